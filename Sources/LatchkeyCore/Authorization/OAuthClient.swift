import Crypto
import Foundation
import LatchkeyJOSE
import LatchkeyModels

/// An app registered to use Latchkey's browser flow (`/oauth2/authorize` → `/oauth2/token`).
public struct OAuthClient: Sendable, Equatable {
    /// Public clients (native and single-page apps) hold no secret and prove themselves with PKCE alone;
    /// confidential clients also authenticate at the token endpoint.
    public enum Kind: String, Sendable { case `public`, confidential }

    public var clientID: String
    /// Compared exactly, except that a loopback `http` URI (`127.0.0.1`, `[::1]`, `localhost`) matches any
    /// port (RFC 8252 §7.3).
    public var redirectURIs: [String]
    /// The providers this client may sign in with; nil allows every configured one.
    public var providers: [String]?
    public var kind: Kind
    /// The secret of a confidential client.
    public var secret: Secret?
    /// Whether this client's sessions must be DPoP-bound; nil follows the server's `dpop.mode`.
    public var dpop: DPoPMode?

    public init(
        clientID: String, redirectURIs: [String], providers: [String]? = nil, kind: Kind = .public, secret: String? = nil, dpop: DPoPMode? = nil
    ) {
        self.dpop = dpop
        self.clientID = clientID
        self.redirectURIs = redirectURIs
        self.providers = providers
        self.kind = kind
        self.secret = secret.map { Secret($0) }
    }

    /// Whether `uri` is one of the registered redirect URIs.
    public func allowsRedirect(to uri: String) -> Bool {
        if redirectURIs.contains(uri) { return true }
        guard let presented = Self.loopbackWithoutPort(uri) else { return false }
        return redirectURIs.contains { Self.loopbackWithoutPort($0) == presented }
    }

    /// Whether `uri` is an `http` URI on a loopback address, which matches any port.
    public static func isLoopback(_ uri: String) -> Bool { loopbackWithoutPort(uri) != nil }

    public func allows(provider: String) -> Bool { providers?.contains(provider) ?? true }

    /// Whether `secret` is this client's secret, compared in constant time.
    public func authenticates(secret presented: String) -> Bool {
        guard let secret else { return false }
        // Digests first: the comparison then takes the same time whatever the lengths.
        return constantTimeEquals(Array(SHA256.hash(data: Array(secret.revealed.utf8))), Array(SHA256.hash(data: Array(presented.utf8))))
    }

    /// A loopback `http` URI with its port removed, or nil for any other URI and for one whose port is not a port.
    /// The hosts a loopback redirect URI may name (RFC 8252 §7.3), as `URLComponents` reads them.
    public static let loopbackHosts: Set<String> = ["127.0.0.1", "::1", "[::1]", "localhost"]

    static func loopbackWithoutPort(_ uri: String) -> String? {
        guard var components = URLComponents(string: uri), components.scheme == "http", let host = components.host,
            loopbackHosts.contains(host), components.fragment == nil, OutboundURL.hasPortOrNone(uri)
        else { return nil }
        components.port = nil
        return components.string
    }

}
