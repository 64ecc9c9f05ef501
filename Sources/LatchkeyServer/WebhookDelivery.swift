public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyProviders
public import Logging
import ServiceLifecycle
import Tracing

/// Sends the store's owed webhook deliveries: signed as Standard Webhooks asks, retried on the schedule of
/// ``WebhookRetrySchedule`` until a 2xx, and given up (status `failed`) after the last attempt. Runs beside the
/// requests, never in them: a slow or dead endpoint costs its own attempts only.
public struct WebhookDispatcher: Sendable {
    /// What one attempt got: a status code, or no answer (and why).
    public enum Outcome: Sendable, Equatable {
        case answered(Int)
        case noAnswer(String)

        var isSuccess: Bool {
            if case .answered(let status) = self { return (200..<300).contains(status) }
            return false
        }

        /// For the delivery's `lastError` and logs: never the response body.
        var summary: String {
            switch self {
            case .answered(let status): "HTTP \(status)"
            case .noAnswer(let reason): reason
            }
        }
    }

    /// Sends one signed POST and says what came back.
    public typealias Send = @Sendable (_ url: String, _ headers: [(name: String, value: String)], _ body: String, _ timeout: Duration) async -> Outcome

    let store: any WebhookStore
    let endpoints: [String: (endpoint: WebhookEndpoint, key: [UInt8])]
    let timeout: Duration
    let send: Send
    let timeSource: TimeSource
    let metrics: ServerMetrics?
    let logger: Logger
    /// How many deliveries one instance attempts at once.
    static let concurrency = 8

    /// `endpoints` must have valid secrets (``ServerConfiguration/validate()`` checked them).
    public init(
        store: any WebhookStore, endpoints: [WebhookEndpoint], timeout: Duration = .seconds(10), send: @escaping Send = WebhookDispatcher.httpSend,
        timeSource: TimeSource = .system, metrics: ServerMetrics? = nil, logger: Logger = Logger(label: "latchkey.webhooks")
    ) {
        self.store = store
        var byURL: [String: (WebhookEndpoint, [UInt8])] = [:]
        for endpoint in endpoints {
            if case .success(let key) = WebhookSignature.key(fromSecret: endpoint.secret.revealed) { byURL[endpoint.url] = (endpoint, key) }
        }
        self.endpoints = byURL
        self.timeout = timeout
        self.send = send
        self.timeSource = timeSource
        self.metrics = metrics
        self.logger = logger
    }

    /// The lease on a claimed group of `count` deliveries: long enough for all of them to be attempted, ``concurrency``
    /// at a time, each within the timeout, and a margin; another instance retries them only after this one died.
    func lease(for count: Int) -> TimeInterval {
        Double(timeout.components.seconds) * Double((count + Self.concurrency - 1) / Self.concurrency) + 50
    }

    /// The URLs of the endpoints this instance delivers to.
    var endpointURLs: [String] { endpoints.keys.sorted() }

    /// Attempts every delivery due now (up to `limit` an endpoint), each endpoint's apart from the others'; returns
    /// how many were attempted.
    @discardableResult
    public func deliverDue(limit: Int = 64) async throws -> Int {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for url in endpointURLs { group.addTask { try await deliverDue(to: url, limit: limit) } }
            return try await group.reduce(0, +)
        }
    }

    /// Attempts the deliveries to the endpoint at `url` due now (up to `limit`), ``concurrency`` at a time; returns how
    /// many were attempted. They are claimed in one step, with a lease that covers every attempt of the group (see
    /// ``lease(for:)``). Each attempt ends within the timeout, head and body, so a slow endpoint holds up only its own.
    /// Outcomes are recorded ``concurrency`` at a time, each batch in one store step.
    @discardableResult
    public func deliverDue(to url: String, limit: Int = 64) async throws -> Int {
        let now = timeSource.now
        let due = try await store.claimDueWebhookDeliveries(
            now: now, limit: limit, leaseUntil: now.addingTimeInterval(lease(for: limit)), endpoints: [url])
        await withTaskGroup(of: WebhookDelivery.self) { group in
            var waiting = due[...]
            for _ in 0..<Self.concurrency {
                guard let next = waiting.popFirst() else { break }
                group.addTask { await self.attempt(next) }
            }
            var outcomes: [WebhookDelivery] = []
            while let outcome = await group.next() {
                outcomes.append(outcome)
                if let next = waiting.popFirst() { group.addTask { await self.attempt(next) } }
                if outcomes.count >= Self.concurrency {
                    await record(outcomes)
                    outcomes.removeAll(keepingCapacity: true)
                }
            }
            await record(outcomes)
        }
        return due.count
    }

    private func record(_ outcomes: [WebhookDelivery]) async {
        do {
            try await store.updateWebhookDeliveries(outcomes)
        } catch {
            // Their lease runs out and they are attempted again: at least once.
            logger.warning(
                "could not record webhook deliveries' outcomes; they will be attempted again",
                metadata: ["deliveries": "\(outcomes.map(\.id).joined(separator: ","))", "error": "\(MaintenanceService.describe(error))"])
        }
    }

    /// One attempt at `delivery`, and the record as it should be stored after it.
    func attempt(_ delivery: WebhookDelivery) async -> WebhookDelivery {
        var delivery = delivery
        // Only deliveries to this instance's endpoints are claimed.
        guard let (endpoint, key) = endpoints[delivery.endpoint] else { return delivery }
        let outcome = await withSpan("webhook delivery", ofKind: .producer) { span in
            span.attributes["latchkey.webhook.type"] = delivery.kind
            span.attributes["latchkey.webhook.attempt"] = delivery.attempts + 1
            let outcome = await post(messageID: delivery.messageID, body: delivery.payload, to: endpoint.url, key: key)
            if !outcome.isSuccess { span.setStatus(SpanStatus(code: .error, message: outcome.summary)) }
            return outcome
        }
        let now = timeSource.now
        delivery.attempts += 1
        delivery.lastError = outcome.isSuccess ? nil : outcome.summary
        let result: String
        if outcome.isSuccess {
            (delivery.status, delivery.finishedAt, result) = (.delivered, now, "delivered")
        } else if let next = WebhookRetrySchedule.nextAttempt(after: delivery.attempts, at: now) {
            (delivery.nextAttemptAt, result) = (next, "retry")
            logger.debug(
                "a webhook endpoint did not take a delivery; it is retried",
                metadata: ["delivery": "\(delivery.id)", "type": "\(delivery.kind)", "outcome": "\(outcome.summary)", "attempt": "\(delivery.attempts)"])
        } else {
            (delivery.status, delivery.finishedAt, result) = (.failed, now, "failed")
            logger.warning(
                "a webhook delivery failed for good; `latchkey webhooks retry \(delivery.id)` sends it again",
                metadata: ["delivery": "\(delivery.id)", "type": "\(delivery.kind)", "outcome": "\(outcome.summary)", "attempts": "\(delivery.attempts)"])
        }
        metrics?.webhookDelivery(type: delivery.kind, outcome: result)
        return delivery
    }

    /// A signed POST of `body` to `url`, timestamped now.
    public func post(messageID: String, body: String, to url: String, key: [UInt8]) async -> Outcome {
        await Self.post(messageID: messageID, body: body, to: url, key: key, at: timeSource.now, timeout: timeout, send: send)
    }

    /// A signed POST of `body` to `url`, timestamped `at`, as every attempt sends it: what `latchkey webhooks test` sends
    /// once, with no store behind it.
    public static func post(
        messageID: String, body: String, to url: String, key: [UInt8], at date: Date, timeout: Duration, send: Send = httpSend
    ) async -> Outcome {
        let timestamp = Int(date.timeIntervalSince1970)
        let headers =
            [("Content-Type", "application/json"), ("User-Agent", "Latchkey-Webhooks")]
            + WebhookSignature.headers(messageID: messageID, timestamp: timestamp, body: body, key: key)
        return await send(url, headers, body, timeout)
    }

    /// Sends through ``AsyncHTTPClientTransport/webhookClient`` (no redirects); the answer's body is dropped, however long.
    public static let httpSend: Send = { url, headers, body, timeout in
        let transport = AsyncHTTPClientTransport(client: AsyncHTTPClientTransport.webhookClient, maximumResponseBytes: 64 * 1024)
        do {
            return .answered(
                try await transport.status(of: OutboundRequest(method: "POST", url: url, headers: headers, body: Array(body.utf8), timeout: timeout)))
        } catch {
            return .noAnswer((error as? LatchkeyError)?.reason ?? "no answer")
        }
    }
}

/// Delivers owed webhook events about once a second, each endpoint in a loop of its own (one endpoint's slowness never
/// delays another's deliveries), and keeps the pending gauge current.
struct WebhookDeliveryService: Service, CustomStringConvertible {
    let dispatcher: WebhookDispatcher
    let logger: Logger

    /// The name swift-service-lifecycle logs for this service (the default would print its endpoints' secrets).
    var description: String { "WebhookDeliveryService" }

    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            for url in dispatcher.endpointURLs { group.addTask { await deliverLoop(to: url) } }
            group.addTask { await gaugeLoop() }
        }
    }

    private func deliverLoop(to url: String) async {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                // A full round means more are due: the next one starts at once.
                let attempted = try await cancelWhenGracefulShutdown { try await dispatcher.deliverDue(to: url) }
                if attempted >= 64 { continue }
            } catch is CancellationError {
                return
            } catch {
                logger.warning("webhook delivery failed; will retry", metadata: ["error": "\(MaintenanceService.describe(error))"])
            }
            do { try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) } } catch { return }
        }
    }

    private func gaugeLoop() async {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await updateGauge()
            } catch {
                logger.debug("could not count pending webhook deliveries", metadata: ["error": "\(MaintenanceService.describe(error))"])
            }
            do { try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(15)) } } catch { return }
        }
    }

    private func updateGauge() async throws {
        let pending = try await dispatcher.store.webhookDeliveryCounts().filter { $0.status == .pending }.reduce(0) { $0 + $1.count }
        dispatcher.metrics?.webhookPending(pending)
    }
}
