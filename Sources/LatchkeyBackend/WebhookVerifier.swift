public import Foundation
public import LatchkeyJOSE
public import LatchkeyModels

/// An event Latchkey sent to the app's backend, verified by ``WebhookVerifier``.
public struct LatchkeyWebhookEvent: Sendable, Equatable {
    /// The `webhook-id`: the same on every retry of one event, so a backend deduplicates by it.
    public let id: String
    /// `user.created`, `user.deleted`, `identity.linked`, … (docs/configuration.md lists them).
    public let type: String
    public let timestamp: String
    public let data: [String: JSONValue]

    /// `data.userId`, which every event has.
    public var userID: String? {
        if case .string(let id)? = data["userId"] { return id }
        return nil
    }
}

/// Why a delivery was refused.
public enum WebhookVerificationError: Error, Sendable, Equatable {
    /// `webhook-id`, `webhook-timestamp` or `webhook-signature` is missing.
    case missingHeaders
    /// The timestamp is more than ``WebhookVerifier/tolerance`` away from now: a replay, or a clock far off.
    case timestampOutOfRange
    /// No signature in `webhook-signature` is the body's under this secret.
    case invalidSignature
    /// Signed, but not the JSON of an event.
    case malformedBody
}

/// Verifies Latchkey's webhook deliveries (Standard Webhooks) in the app's backend.
///
/// ```swift
/// let webhooks = try WebhookVerifier(secret: secret)
/// let event = try webhooks.verify(body: body, headers: headers)
/// if event.type == "user.deleted", let user = event.userID { try await deleteEverything(of: user) }
/// ```
public struct WebhookVerifier: Sendable {
    private let key: [UInt8]
    /// How far a delivery's timestamp may be from now (Standard Webhooks suggests five minutes).
    public var tolerance: TimeInterval = 300
    private let timeSource: TimeSource

    /// `secret` is the endpoint's `whsec_…` secret, as configured at Latchkey.
    public init(secret: String, timeSource: TimeSource = .system) throws(WebhookSecretProblem) {
        key = try WebhookSignature.key(fromSecret: secret).get()
        self.timeSource = timeSource
    }

    /// Verifies a delivery from its body and headers (names in any case).
    public func verify(body: some Collection<UInt8>, headers: [String: String]) throws(WebhookVerificationError) -> LatchkeyWebhookEvent {
        let lowercased = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        guard let id = lowercased["webhook-id"], let timestamp = lowercased["webhook-timestamp"], let signature = lowercased["webhook-signature"] else {
            throw .missingHeaders
        }
        return try verify(body: body, id: id, timestamp: timestamp, signature: signature)
    }

    /// Verifies a delivery from its body and its three headers' values.
    public func verify(body: some Collection<UInt8>, id: String, timestamp: String, signature: String) throws(WebhookVerificationError)
        -> LatchkeyWebhookEvent
    {
        guard let seconds = Int(timestamp) else { throw .missingHeaders }
        guard abs(timeSource.now.timeIntervalSince1970 - Double(seconds)) <= tolerance else { throw .timestampOutOfRange }
        let text = String(decoding: body, as: UTF8.self)
        guard WebhookSignature.verify(messageID: id, timestamp: seconds, body: text, header: signature, key: key) else { throw .invalidSignature }
        guard let event = try? LeanJSONDecoder().decode(EventBody.self, from: Array(body)) else { throw .malformedBody }
        return LatchkeyWebhookEvent(id: id, type: event.type, timestamp: event.timestamp, data: event.data)
    }
}

/// A delivery's JSON body.
private struct EventBody: Decodable {
    let type: String
    let timestamp: String
    let data: [String: JSONValue]
}
