public import Foundation
import LatchkeyCore
public import LatchkeyJOSE

/// A server-to-server notification from Sign in with Apple, verified.
public struct AppleNotification: Sendable, Equatable {
    /// The notification's unique id; process each one once.
    public var id: String
    public var issuedAt: Date
    /// The client id (primary App ID) the notification is for.
    public var audience: String
    public var event: AppleNotificationEvent
}

/// What happened to a user's Apple Account.
public struct AppleNotificationEvent: Sendable, Equatable {
    public var type: AppleNotificationEventType
    /// The user's subject, as in their identity tokens.
    public var subject: String
    public var eventTime: Date
    public var email: String?
    public var isPrivateEmail: Bool?
}

/// The event types Apple sends. Both spellings of account deletion map to ``accountDeleted``.
public enum AppleNotificationEventType: Sendable, Equatable, CustomStringConvertible {
    case emailDisabled
    case emailEnabled
    case consentRevoked
    case accountDeleted
    /// A type Latchkey does not know yet; recorded, not acted on.
    case other(String)

    init(wire: String) {
        switch wire {
        case "email-disabled": self = .emailDisabled
        case "email-enabled": self = .emailEnabled
        case "consent-revoked": self = .consentRevoked
        case "account-delete", "account-deleted": self = .accountDeleted
        default: self = .other(String(wire.prefix(64)))
        }
    }

    public var description: String {
        switch self {
        case .emailDisabled: "email-disabled"
        case .emailEnabled: "email-enabled"
        case .consentRevoked: "consent-revoked"
        case .accountDeleted: "account-deleted"
        case .other(let type): type
        }
    }
}

/// Verifies the body Apple POSTs to your notification URL: `{"payload": "<JWT>"}`.
///
/// The JWT is signed with the same keys as identity tokens; `events` arrives as a JSON object or,
/// as Apple really sends it, as a JSON string, and `event_time` in seconds or milliseconds.
public struct AppleNotificationVerifier: Sendable {
    /// Bodies larger than this are refused unread.
    public static let maximumBodySize = 64 * 1024

    public let audiences: [String]
    public let leeway: TimeInterval
    private let envelope: SignedTokenVerifier
    private let timeSource: TimeSource

    public init(keys: any VerificationKeyResolver, audiences: [String], leeway: TimeInterval = 60, timeSource: TimeSource = .system) {
        self.envelope = SignedTokenVerifier(allowedAlgorithms: ["RS256"], keys: keys)
        self.audiences = audiences
        self.leeway = leeway
        self.timeSource = timeSource
    }

    /// Verifies a notification request body.
    public func verify(body: [UInt8], now: Date? = nil) async throws(LatchkeyError) -> AppleNotification {
        guard body.count <= Self.maximumBodySize else {
            throw LatchkeyError(.invalidNotification, "the notification body is \(body.count) bytes; at most \(Self.maximumBodySize) are accepted")
        }
        struct Body: Decodable { let payload: String }
        guard let wrapper = try? JSONDecoder().decode(Body.self, from: Data(body)) else {
            throw LatchkeyError(.invalidNotification, "the body is not {\"payload\": \"<JWT>\"}")
        }
        return try await verify(payload: wrapper.payload, now: now)
    }

    /// Verifies the notification JWT itself.
    public func verify(payload: String, now: Date? = nil) async throws(LatchkeyError) -> AppleNotification {
        let jws = try await envelope.verify(payload)
        let claims = try decodeClaims(Claims.self, from: jws.payload)
        let now = (now ?? timeSource.now).timeIntervalSince1970

        guard let iss = claims.iss else { throw missing("iss") }
        guard IdentityTokenPolicy.appleIssuers.contains(iss) else {
            throw LatchkeyError(.unexpectedIssuer, "issuer \"\(iss.prefix(128))\" is not Apple's")
        }
        guard let aud = claims.aud?.values, let audience = aud.first(where: audiences.contains) else {
            throw LatchkeyError(
                .unexpectedAudience,
                "the notification is for \(claims.aud?.values.joined(separator: ", ") ?? "no audience"), not one of [\(audiences.joined(separator: ", "))]; notifications carry the primary App ID (bundle id)"
            )
        }
        guard let iat = claims.iat else { throw missing("iat") }
        if now + leeway < iat { throw LatchkeyError(.issuedInFuture, "the notification was issued in the future; check this server's clock") }
        if let exp = claims.exp, now > exp + leeway { throw LatchkeyError(.tokenExpired, "the notification expired \(describe(seconds: now - exp)) ago") }
        guard let jti = claims.jti, !jti.isEmpty else { throw missing("jti") }
        guard let events = claims.events else { throw missing("events") }
        return AppleNotification(id: jti, issuedAt: Date(timeIntervalSince1970: iat), audience: audience, event: try events.event())
    }

    private func missing(_ claim: String) -> LatchkeyError {
        LatchkeyError(.missingClaim, "the notification has no \"\(claim)\" claim")
    }

    struct Claims: Decodable {
        var iss: String?
        var aud: Audience?
        var iat: Double?
        var exp: Double?
        var jti: String?
        var events: Events?
    }

    /// `events` as an object or as a string holding the object.
    struct Events: Decodable {
        struct Wire: Decodable {
            var type: String?
            var sub: String?
            var eventTime: Double?
            var email: String?
            var isPrivateEmail: LenientBool?

            enum CodingKeys: String, CodingKey {
                case type, sub, email
                case eventTime = "event_time"
                case isPrivateEmail = "is_private_email"
            }
        }

        var wire: Wire

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let string = try? container.decode(String.self) {
                do {
                    wire = try JSONDecoder().decode(Wire.self, from: Data(string.utf8))
                } catch {
                    throw DecodingError.dataCorruptedError(in: container, debugDescription: "events is a string but not a JSON object")
                }
            } else {
                wire = try container.decode(Wire.self)
            }
        }

        func event() throws(LatchkeyError) -> AppleNotificationEvent {
            guard let type = wire.type else { throw LatchkeyError(.missingClaim, "the notification's events have no \"type\"") }
            guard let sub = wire.sub, !sub.isEmpty else { throw LatchkeyError(.missingClaim, "the notification's events have no \"sub\"") }
            let time = wire.eventTime.map { $0 > 100_000_000_000 ? $0 / 1000 : $0 } ?? 0
            return AppleNotificationEvent(
                type: AppleNotificationEventType(wire: type),
                subject: sub,
                eventTime: Date(timeIntervalSince1970: time),
                email: wire.email,
                isPrivateEmail: wire.isPrivateEmail?.value
            )
        }
    }
}
