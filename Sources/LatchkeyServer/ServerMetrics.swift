import Metrics
import Prometheus

/// Prometheus counters: requests, sign-ins and refreshes by outcome, Apple calls by endpoint and error, notifications by type.
public final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    public init() {
        factory = PrometheusMetricsFactory(registry: registry)
    }

    private func count(_ label: String, _ dimensions: [(String, String)]) {
        Counter(label: label, dimensions: dimensions, factory: factory).increment()
    }

    func request(route: String, status: Int) { count("latchkey_http_requests_total", [("route", route), ("status", String(status))]) }
    func signIn(provider: String, outcome: String) { count("latchkey_sign_ins_total", [("provider", provider), ("outcome", outcome)]) }
    func refresh(outcome: String) { count("latchkey_refreshes_total", [("outcome", outcome)]) }
    func providerCall(_ provider: String, _ operation: String, outcome: String) {
        count("latchkey_provider_calls_total", [("provider", provider), ("operation", operation), ("outcome", outcome)])
    }
    func notification(type: String, outcome: String) { count("latchkey_apple_notifications_total", [("type", type), ("outcome", outcome)]) }

    /// The Prometheus text exposition.
    public func exposition() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
