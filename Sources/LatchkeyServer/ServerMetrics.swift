import Metrics
import Prometheus
import Synchronization

/// Prometheus counters: requests, sign-ins and refreshes by outcome, Apple calls by endpoint and error, notifications by type.
public final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    /// Each counter once made, by label and dimensions: the registry's look-up builds and checks names and takes
    /// its lock, a visible share of a small request. Labels and dimensions come from bounded sets (routes,
    /// statuses, configured providers, outcomes), so this stays small.
    private let counters = Mutex<[[String]: any CounterHandler]>([:])

    private let pendingWebhooks: Prometheus.Gauge

    public init() {
        factory = PrometheusMetricsFactory(registry: registry)
        pendingWebhooks = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "latchkey", metricName: "webhook_pending", unitName: "deliveries", helpText: "Webhook deliveries not yet delivered or given up"))
    }

    private func count(_ label: String, _ dimensions: [(String, String)]) {
        var key = [label]
        key.reserveCapacity(1 + 2 * dimensions.count)
        for (name, value) in dimensions {
            key.append(name)
            key.append(value)
        }
        let counter = counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = factory.makeCounter(label: label, dimensions: dimensions)
            counters[key] = counter
            return counter
        }
        counter.increment(by: 1)
    }

    func request(route: String, status: Int) { count("latchkey_http_requests_total", [("route", route), ("status", String(status))]) }
    func signIn(provider: String, outcome: String) { count("latchkey_sign_ins_total", [("provider", provider), ("outcome", outcome)]) }
    func refresh(outcome: String) { count("latchkey_refreshes_total", [("outcome", outcome)]) }
    /// App Attest at sign-in: `attestation`, `assertion`, `missing` or `invalid`.
    func appAttest(outcome: String) { count("latchkey_app_attest_total", [("outcome", outcome)]) }
    func providerCall(_ provider: String, _ operation: String, outcome: String) {
        count("latchkey_provider_calls_total", [("provider", provider), ("operation", operation), ("outcome", outcome)])
    }
    /// A provider's server-to-server notification (Apple's, so far), by provider, type and outcome.
    func notification(provider: String, type: String, outcome: String) {
        count("latchkey_provider_notifications_total", [("provider", provider), ("type", type), ("outcome", outcome)])
    }
    /// `outcome`: `delivered`, `retry` (the attempt failed; another follows) or `failed` (given up).
    func webhookDelivery(type: String, outcome: String) { count("latchkey_webhook_deliveries_total", [("type", type), ("outcome", outcome)]) }
    func webhookPending(_ count: Int) { pendingWebhooks.set(Double(count)) }

    /// The Prometheus text exposition.
    public func exposition() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
