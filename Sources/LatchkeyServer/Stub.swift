import Hummingbird
import Prometheus
import Configuration
import Metrics
