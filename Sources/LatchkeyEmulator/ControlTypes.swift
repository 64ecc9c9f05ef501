public import Foundation

/// A fault injected into one endpoint (or `*` for every provider endpoint).
struct FaultSpec: Codable, Sendable {
    enum Kind: String, Codable, Sendable {
        /// Answer late, then normally.
        case latency
        /// Answer with `status` (500 by default) and an empty body.
        case status
        /// Answer 429 with `Retry-After`.
        case rateLimit = "rate_limit"
        /// Answer 200 with a body that is not JSON.
        case malformedJSON = "malformed_json"
        /// Close the connection without answering.
        case dropConnection = "drop_connection"
    }

    var endpoint: String
    var kind: Kind
    var status: Int?
    var latencyMilliseconds: Int?
    /// How many requests the fault applies to; forever when nil.
    var count: Int?
}

/// One call the emulator received.
public struct RequestRecord: Codable, Sendable, Equatable {
    public var time: Date
    public var method: String
    public var endpoint: String
    public var clientId: String?
    public var grantType: String?
    public var status: Int
    /// The OAuth error code answered, if any.
    public var error: String?
    /// Why the emulator answered with that error (Apple would not say).
    public var detail: String?
    /// The W3C `traceparent` header the call carried, if any: a trace the caller continues here.
    public var traceparent: String? = nil
}

/// A server-to-server notification and how its delivery went.
public struct NotificationRecord: Codable, Sendable, Equatable {
    public var id: String
    public var url: String
    public var type: String
    public var sub: String
    public var clientId: String
    public var attempts = 0
    public var lastStatus: Int?
    public var delivered = false
    public var createdAt = Date()
}

struct PendingNotification: Sendable {
    let id: String
    let url: String
    let claims: ClaimSet
}

struct CreateUserRequest: Decodable {
    var email: String?
    var hideMyEmail: Bool?
    /// Where the relay address is: `privaterelay.appleid.com` (the default) or `private.icloud.com`.
    var relayDomain: String?
    var realUserStatus: Int?
    var givenName: String?
    var familyName: String?
    /// `consumers` (personal accounts, the default) or a tenant GUID.
    var microsoftTenant: String?
    /// Subjects of a user who already exists at a provider: `apple` (under the default team) and `google`.
    var subjects: [String: String]?
}

/// `POST /emulator/apple/transfers`: moves an app to another team.
struct AppTransferRequest: Decodable {
    var clientId: String
    var toTeamId: String
}

/// Why the control API refuses a request: 400, or 404 when what it names does not exist.
struct ControlRefusal: Error, Sendable {
    let message: String
    let notFound: Bool

    init(_ message: String, notFound: Bool = false) {
        self.message = message
        self.notFound = notFound
    }
}

struct AuthorizationRequest: Decodable {
    /// `apple` (the default), `google`, `microsoft`, `facebook`, `dropbox` or `oidc`.
    var provider: String?
    var sub: String
    var clientId: String
    var nonce: String?
    var scopes: [String]?
    var codeChallenge: String?
    var codeChallengeMethod: String?
    var redirectUri: String?
}

struct EmailForwardingRequest: Decodable { var enabled: Bool }

/// A message in the development mailbox: what `serve --dev` would have sent by SMTP.
public struct MailRecord: Codable, Sendable, Equatable {
    public var to: String
    public var subject: String
    public var text: String
    public var html: String?
    public var receivedAt: Date?
}
struct ClockRequest: Decodable { var offsetSeconds: Double }
