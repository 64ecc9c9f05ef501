public import Foundation
import LatchkeyJOSE

/// One event owed to one endpoint, kept in the store's outbox from the transaction of the change until a 2xx (or
/// until the retry schedule gives up).
public struct WebhookDelivery: Sendable, Equatable {
    public enum Status: String, Sendable, CaseIterable {
        case pending, delivered, failed
    }

    public var id: String
    /// The event's `webhook-id`.
    public var messageID: String
    /// The endpoint's URL.
    public var endpoint: String
    public var kind: String
    public var userID: String?
    /// The JSON body, exactly as sent on every attempt.
    public var payload: String
    public var status: Status
    public var attempts: Int
    public var nextAttemptAt: Date
    /// What the last attempt got (`HTTP 503`, `timeout`, …); never a response body.
    public var lastError: String?
    public var createdAt: Date
    /// When it was delivered, or given up.
    public var finishedAt: Date?

    /// How long the sweep keeps a delivered delivery, and a failed one (for `latchkey webhooks retry`).
    public static let deliveredRetention: TimeInterval = 7 * 86_400
    public static let failedRetention: TimeInterval = 30 * 86_400

    public init(
        id: String, messageID: String, endpoint: String, kind: String, userID: String?, payload: String, status: Status = .pending, attempts: Int = 0,
        nextAttemptAt: Date, lastError: String? = nil, createdAt: Date, finishedAt: Date? = nil
    ) {
        self.id = id
        self.messageID = messageID
        self.endpoint = endpoint
        self.kind = kind
        self.userID = userID
        self.payload = payload
        self.status = status
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.createdAt = createdAt
        self.finishedAt = finishedAt
    }
}

/// The configured endpoints, and what each change owes them.
public struct WebhookEndpoints: Sendable {
    public var endpoints: [WebhookEndpoint]

    public init(_ endpoints: [WebhookEndpoint] = []) { self.endpoints = endpoints }

    public var isEmpty: Bool { endpoints.isEmpty }

    /// One delivery of each event to each endpoint that receives its type, due at once. A delivery's id follows from
    /// its event's and the endpoint's position, so a plan written twice writes the same rows.
    public func deliveries(_ events: [LifecycleEvent]) -> [WebhookDelivery] {
        guard !endpoints.isEmpty else { return [] }
        var deliveries: [WebhookDelivery] = []
        for event in events {
            let body = event.body()
            for (index, endpoint) in endpoints.enumerated() where endpoint.receives(event.kind) {
                deliveries.append(
                    WebhookDelivery(
                        id: "\(event.id).\(index)", messageID: event.id, endpoint: endpoint.url, kind: event.kind.rawValue, userID: event.userID,
                        payload: body, nextAttemptAt: event.at, createdAt: event.at))
            }
        }
        return deliveries
    }

    public func deliveries(_ events: LifecycleEvent...) -> [WebhookDelivery] { deliveries(events) }
}
