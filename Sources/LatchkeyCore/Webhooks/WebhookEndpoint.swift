import Foundation
import LatchkeyJOSE

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

    /// A new secret: `whsec_` and the base64 of 32 random bytes.
    public static func generateSecret() -> String { WebhookSignature.secretPrefix + Data(systemRandomBytes(32)).base64EncodedString() }
}
