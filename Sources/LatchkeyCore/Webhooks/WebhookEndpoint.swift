import Foundation

/// Where the app's backend hears what happens to its users: one configured webhook endpoint.
public struct WebhookEndpoint: Sendable, Hashable {
    /// `https`, or `http` to a loopback address. Deliveries name their endpoint by this URL.
    public var url: String
    /// `whsec_` and the base64 of the signing key, as Standard Webhooks writes it.
    public var secret: Secret
    /// The event types this endpoint gets; nil: every type.
    public var events: Set<LifecycleEvent.Kind>?

    public init(url: String, secret: Secret, events: Set<LifecycleEvent.Kind>? = nil) {
        self.url = url
        self.secret = secret
        self.events = events
    }

    /// Whether this endpoint gets events of `kind` (a test event reaches every endpoint).
    public func receives(_ kind: LifecycleEvent.Kind) -> Bool { kind == .webhookTest || events?.contains(kind) ?? true }

    /// What is wrong with the URL, or nil: https anywhere, http only to a loopback address (no secret crosses a network
    /// in clear, and nothing leaves the host unencrypted).
    public static func problem(url: String) -> String? {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), let host = parsed.host, !host.isEmpty else {
            return "is not an absolute URL"
        }
        if parsed.user != nil || parsed.password != nil { return "must not carry a user name or password" }
        if parsed.fragment != nil { return "must not have a #fragment" }
        if let problem = OutboundURL.problem(url) { return problem }
        switch scheme {
        case "https": return nil
        case "http":
            return OAuthClient.loopbackHosts.contains(host.lowercased()) ? nil : "uses http to \(host); use https (http only to 127.0.0.1, [::1] or localhost)"
        default: return "uses \(scheme); use https"
        }
    }

    /// The signing key of a `whsec_` secret, or what is wrong with it (never the secret itself).
    public static func signingKey(_ secret: Secret) -> Result<[UInt8], WebhookSecretProblem> {
        let text = secret.revealed.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix(secretPrefix) else { return .failure(.missingPrefix) }
        guard let key = Data(base64Encoded: String(text.dropFirst(secretPrefix.count))) else { return .failure(.notBase64) }
        guard key.count >= minimumKeyBytes else { return .failure(.tooShort(key.count)) }
        return .success(Array(key))
    }

    /// A new secret: `whsec_` and the base64 of 32 random bytes.
    public static func generateSecret() -> String { secretPrefix + Data(systemRandomBytes(32)).base64EncodedString() }

    public static let secretPrefix = "whsec_"
    /// Standard Webhooks asks for 24 to 64 random bytes.
    public static let minimumKeyBytes = 24
}

/// Why a webhook secret cannot be used.
public enum WebhookSecretProblem: Error, Sendable, Equatable, CustomStringConvertible {
    case missingPrefix, notBase64
    case tooShort(Int)

    public var description: String {
        switch self {
        case .missingPrefix: "does not begin with whsec_ (make one with `latchkey webhooks secret`)"
        case .notBase64: "is not whsec_ followed by base64 (make one with `latchkey webhooks secret`)"
        case .tooShort(let count): "holds \(count) bytes; use at least \(WebhookEndpoint.minimumKeyBytes) random bytes (`latchkey webhooks secret`)"
        }
    }
}
