public import Foundation
public import LatchkeyJOSE
public import LatchkeyModels
import Synchronization

/// A Latchkey access token that ``AccessTokenVerifier`` verified.
public struct LatchkeyAccessToken: Sendable, Equatable {
    /// The user (`sub`): the id the app's backend keeps its data under.
    public let userID: String
    public let sessionID: String
    public let clientID: String
    public let tokenID: String
    public let issuedAt: Date
    public let expiresAt: Date
    /// When the session began (`auth_time`).
    public let authTime: Date?
    /// The provider the session began with (`idp`): `apple`, `google`, …
    public let idp: String?
    /// Every claim of the token: Latchkey's and those the backend set with `PUT /admin/v1/users/{id}/claims`.
    public let claims: [String: JSONValue]

    /// One claim, such as a custom `plan`.
    public subscript(claim name: String) -> JSONValue? { claims[name] }
}

/// Verifies Latchkey access tokens in the app's own server, without a database: the issuer's discovery document
/// names its JWKS, whose keys are cached (a token signed with a key not seen yet fetches them again at once, one
/// fetch for all waiting requests, and a flood of made-up key ids cannot make it fetch more than a few times).
///
/// ```swift
/// let verifier = AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey")
/// let token = try await verifier.verify(bearer)
/// let plan = token[claim: "plan"]
/// ```
public final class AccessTokenVerifier: Sendable {
    public let issuer: String
    public let audience: String
    private let leeway: TimeInterval
    private let transport: any HTTPTransport
    private let timeSource: TimeSource
    private let discovered = Mutex<Task<AccessTokenCheck, any Error>?>(nil)

    /// - Parameters:
    ///   - issuer: Latchkey's `publicUrl` (the `iss` of its tokens), without a trailing slash.
    ///   - audience: Latchkey's `audience` setting (`latchkey` by default).
    ///   - leeway: clock skew tolerated on `exp`, in seconds.
    ///   - transport: how discovery and the JWKS are fetched; AsyncHTTPClient by default.
    ///   - timeSource: the time tokens are checked at; the system clock by default.
    public init(
        issuer: String, audience: String, leeway: TimeInterval = 30, transport: any HTTPTransport = AsyncHTTPClientTransport(),
        timeSource: TimeSource = .system
    ) {
        self.issuer = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        self.audience = audience
        self.leeway = leeway
        self.transport = transport
        self.timeSource = timeSource
    }

    /// Verifies `token` (the bearer token of a request). Throws `invalid_token` with the reason for a token to refuse
    /// (401), `keys_unavailable` when Latchkey's keys cannot be had now (503).
    public func verify(_ token: String) async throws(LatchkeyError) -> LatchkeyAccessToken {
        let check = try await self.check()
        let (verified, payload) = try await check.verify(token)
        let claims = (try? LeanJSONDecoder().decode([String: JSONValue].self, from: payload)) ?? [:]
        return LatchkeyAccessToken(
            userID: verified.userID, sessionID: verified.sessionID, clientID: verified.clientID, tokenID: verified.tokenID, issuedAt: verified.issuedAt,
            expiresAt: verified.expiresAt, authTime: verified.authTime, idp: verified.idp, claims: claims)
    }

    /// The check, once discovery has named the JWKS (one discovery for every caller; a failed one is tried again
    /// by the next call).
    private func check() async throws(LatchkeyError) -> AccessTokenCheck {
        let task = discovered.withLock { task in
            if let task { return task }
            let made = Task { [issuer, audience, leeway, transport, timeSource] in
                let jwksURL = try await Self.discoverJWKS(issuer: issuer, transport: transport)
                return AccessTokenCheck(
                    issuer: issuer, audience: audience, keys: JWKSCache(url: jwksURL, transport: transport, timeSource: timeSource), leeway: leeway,
                    timeSource: timeSource)
            }
            task = made
            return made
        }
        do {
            return try await task.value
        } catch {
            discovered.withLock { if $0 == task { $0 = nil } }
            throw error as? LatchkeyError ?? LatchkeyError(.keysUnavailable, "Latchkey's discovery document could not be read")
        }
    }

    /// `jwks_uri` of the issuer's discovery document, which must name this issuer and serve its keys from its own origin.
    static func discoverJWKS(issuer: String, transport: any HTTPTransport) async throws(LatchkeyError) -> String {
        let url = issuer + "/.well-known/openid-configuration"
        let response = try await transport.send(OutboundRequest(url: url, headers: [("Accept", "application/json")]))
        guard response.status == 200 else { throw LatchkeyError(.keysUnavailable, "\(url) answered \(response.status)") }
        struct Discovery: Decodable {
            let issuer: String?
            let jwks: String?
            enum CodingKeys: String, CodingKey {
                case issuer
                case jwks = "jwks_uri"
            }
        }
        guard let document = try? LeanJSONDecoder().decode(Discovery.self, from: response.body) else {
            throw LatchkeyError(.keysUnavailable, "\(url) is not a discovery document")
        }
        guard document.issuer == issuer else {
            throw LatchkeyError(.keysUnavailable, "\(url) names the issuer \(document.issuer?.prefix(100) ?? "none"), not \(issuer)")
        }
        guard let jwks = document.jwks, let jwksURL = URL(string: jwks), let issuerURL = URL(string: issuer), jwksURL.scheme == issuerURL.scheme,
            jwksURL.host == issuerURL.host, jwksURL.port == issuerURL.port
        else { throw LatchkeyError(.keysUnavailable, "\(url) names a jwks_uri outside the issuer's origin") }
        return jwks
    }
}
