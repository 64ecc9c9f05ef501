public import Foundation
import LatchkeyJOSE

/// Something that happened to a user that the app's backend hears of through its webhooks. Its `data` always names
/// the user and never holds a token, a code or a provider secret.
public struct LifecycleEvent: Sendable, Equatable {
    /// The event types, exactly as deliveries name them.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case userCreated = "user.created"
        case userDeleted = "user.deleted"
        case identityLinked = "identity.linked"
        case identityUnlinked = "identity.unlinked"
        /// A provider ended its grant: Apple's notifications, `invalid_grant` at the daily validation.
        case identityRevoked = "identity.revoked"
        case userEmailChanged = "user.email_changed"
        case sessionReuseDetected = "session.reuse_detected"
        case userDisabled = "user.disabled"
        case userEnabled = "user.enabled"
        /// An Apple identity moved to the subject of the team an app was transferred to.
        case identityTransferred = "identity.transferred"
        /// A guest linked an identity: the same user, no longer anonymous.
        case userUpgraded = "user.upgraded"
        /// A guest was merged into the user who holds the identity they proved: move the guest's rows.
        case userMerged = "user.merged"
        /// Sent by `latchkey webhooks test` only.
        case webhookTest = "webhook.test"
    }

    /// Why a user was deleted (`data.reason` of `user.deleted`).
    public enum DeletionReason: String, Sendable {
        case userRequest = "user_request"
        case admin
        case providerAccountDeleted = "provider_account_deleted"
        case providerConsentRevoked = "provider_consent_revoked"
        /// A guest unused for `anonymous.ttl`.
        case anonymousExpired = "anonymous_expired"
    }

    /// The `webhook-id` of every delivery of this event, to every endpoint and on every retry.
    public var id: String
    public var kind: Kind
    public var at: Date
    public var userID: String
    /// Besides `userId`, which every event has.
    public var data: [String: Value]

    /// A value in `data`.
    public enum Value: Sendable, Equatable, Encodable {
        case string(String)
        case bool(Bool)
        case null

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let text): try container.encode(text)
            case .bool(let flag): try container.encode(flag)
            case .null: try container.encodeNil()
            }
        }
    }

    public init(id: String = LifecycleEvent.newID(), kind: Kind, at: Date, userID: String, data: [String: Value] = [:]) {
        self.id = id
        self.kind = kind
        self.at = at
        self.userID = userID
        self.data = data
    }

    /// A new message id: `msg_` and a time-ordered identifier.
    public static func newID() -> String { "msg_" + newIdentifier() }

    /// The body every delivery of this event sends: `{"type", "timestamp", "data"}`, `data.userId` first among equals.
    public func body() -> String {
        struct Body: Encodable {
            let type: String
            let timestamp: String
            let data: [String: Value]
        }
        var fields = data
        fields["userId"] = .string(userID)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding strings, booleans and nulls cannot fail.
        let bytes = (try? encoder.encode(Body(type: kind.rawValue, timestamp: Self.timestamp(at), data: fields))) ?? Data("{}".utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// RFC 3339 with milliseconds, in UTC.
    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!))
    }
}

extension LifecycleEvent {
    public static func userCreated(_ userID: String, provider: String, at: Date, id: String = newID()) -> LifecycleEvent {
        LifecycleEvent(id: id, kind: .userCreated, at: at, userID: userID, data: ["provider": .string(provider)])
    }

    public static func userDeleted(_ userID: String, reason: DeletionReason, at: Date) -> LifecycleEvent {
        LifecycleEvent(kind: .userDeleted, at: at, userID: userID, data: ["reason": .string(reason.rawValue)])
    }

    /// `identity.linked`, `identity.unlinked` or `identity.revoked` of this identity.
    public static func identity(_ kind: Kind, _ identity: LinkedIdentity, at: Date, reason: String? = nil) -> LifecycleEvent {
        self.identity(kind, userID: identity.userID, identityID: identity.id, provider: identity.provider, subject: identity.subject, at: at, reason: reason)
    }

    /// `identity.linked`, `identity.unlinked` or `identity.revoked` of the identity `identityID` (`subject`: its
    /// account at the provider, when known).
    public static func identity(
        _ kind: Kind, userID: String, identityID: String, provider: String, subject: String?, at: Date, reason: String? = nil
    ) -> LifecycleEvent {
        var data: [String: Value] = ["identityId": .string(identityID), "provider": .string(provider)]
        if let subject { data["subject"] = .string(subject) }
        if let reason { data["reason"] = .string(reason) }
        return LifecycleEvent(kind: kind, at: at, userID: userID, data: data)
    }

    /// The user's e-mail as the provider `provider` now gives it (nil: none); `forwarding`: Apple's relay on or off.
    public static func emailChanged(
        _ userID: String, provider: String, email: String?, verified: Bool?, forwarding: Bool? = nil, at: Date, id: String = newID()
    ) -> LifecycleEvent {
        var data: [String: Value] = ["provider": .string(provider), "email": email.map(Value.string) ?? .null]
        if let verified { data["emailVerified"] = .bool(verified) }
        if let forwarding { data["emailForwardingEnabled"] = .bool(forwarding) }
        return LifecycleEvent(id: id, kind: .userEmailChanged, at: at, userID: userID, data: data)
    }

    /// `user.disabled` or `user.enabled`, by an admin key (`by`: its name) or the CLI.
    public static func userDisabled(_ userID: String, disabled: Bool, at: Date) -> LifecycleEvent {
        LifecycleEvent(kind: disabled ? .userDisabled : .userEnabled, at: at, userID: userID)
    }

    /// `identity.transferred`: after an app transfer, the identity's subject is the recipient team's.
    public static func identityTransferred(_ identity: LinkedIdentity, oldSubject: String, at: Date) -> LifecycleEvent {
        LifecycleEvent(
            kind: .identityTransferred, at: at, userID: identity.userID,
            data: [
                "identityId": .string(identity.id), "provider": .string(identity.provider), "oldSubject": .string(oldSubject),
                "newSubject": .string(identity.subject),
            ])
    }

    /// `user.upgraded`: the guest linked an identity of `provider`.
    public static func userUpgraded(_ userID: String, provider: String, at: Date) -> LifecycleEvent {
        LifecycleEvent(kind: .userUpgraded, at: at, userID: userID, data: ["provider": .string(provider)])
    }

    /// `user.merged`: the guest `from` is gone into `into` (the event's user).
    public static func userMerged(from: String, into: String, at: Date) -> LifecycleEvent {
        LifecycleEvent(kind: .userMerged, at: at, userID: into, data: ["fromUserId": .string(from), "intoUserId": .string(into)])
    }

    /// What `latchkey webhooks test` sends: `webhook.test`, for the user `test`.
    public static func test(at: Date) -> LifecycleEvent {
        LifecycleEvent(kind: .webhookTest, at: at, userID: "test", data: ["message": .string("a test event from latchkey webhooks test")])
    }

    /// A refresh token came back after its successor was used: the session was revoked.
    public static func reuseDetected(_ session: SessionFamily, ip: String?, userAgent: String?, at: Date) -> LifecycleEvent {
        LifecycleEvent(
            kind: .sessionReuseDetected, at: at, userID: session.userID,
            data: [
                "sessionId": .string(session.id), "clientId": .string(session.clientID), "ip": ip.map(Value.string) ?? .null,
                "userAgent": userAgent.map { .string(String($0.prefix(256))) } ?? .null,
            ])
    }
}

/// Where a request came from, as the server saw it (behind trusted proxies, the client's address).
public struct RequestOrigin: Sendable, Equatable {
    public var ip: String?
    public var userAgent: String?

    public init(ip: String? = nil, userAgent: String? = nil) {
        self.ip = ip
        self.userAgent = userAgent
    }
}
