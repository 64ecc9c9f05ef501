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
    /// The RFC 7638 thumbprint of the device key the token is bound to (`cnf.jkt`, RFC 9449): such a token was
    /// presented as `Authorization: DPoP` with a proof by that key. Nil for a bearer token.
    public let boundKeyThumbprint: String?
    /// Whether App Attest vouched for the app at the sign-in that began the session (`attested`).
    public let attested: Bool
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
///
/// A session bound to the app's device key (DPoP, RFC 9449) has access tokens that are sent as `Authorization: DPoP`
/// with a proof of the key for each request; ``verify(authorization:dpop:method:url:)`` checks the request as a whole,
/// bearer tokens included:
///
/// ```swift
/// let token = try await verifier.verify(authorization: authorization, dpop: proofs, method: "GET", url: "https://api.example.com/notes")
/// ```
public final class AccessTokenVerifier: Sendable {
    public let issuer: String
    public let audience: String
    private let leeway: TimeInterval
    private let transport: any HTTPTransport
    private let timeSource: TimeSource
    private let discovered = Mutex<Task<AccessTokenCheck, any Error>?>(nil)
    private let proofCheck: DPoPProofCheck
    private let replays: DPoPReplayWindow

    /// - Parameters:
    ///   - issuer: Latchkey's `publicUrl` (the `iss` of its tokens), without a trailing slash.
    ///   - audience: Latchkey's `audience` setting (`latchkey` by default).
    ///   - leeway: clock skew tolerated on `exp`, in seconds.
    ///   - transport: how discovery and the JWKS are fetched; AsyncHTTPClient by default.
    ///   - timeSource: the time tokens and DPoP proofs are checked at; the system clock by default.
    ///   - dpopProofMaximumAge: how far a DPoP proof's `iat` may lie from now, either way, in seconds.
    ///   - dpopReplayCapacity: how many DPoP proofs (their `jti`) are remembered to refuse a second use, within the
    ///     proofs' window. When more arrive within the window the oldest are forgotten first: keep it above the
    ///     requests with DPoP-bound tokens that one process takes in `2 × dpopProofMaximumAge`.
    public init(
        issuer: String, audience: String, leeway: TimeInterval = 30, transport: any HTTPTransport = AsyncHTTPClientTransport(),
        timeSource: TimeSource = .system, dpopProofMaximumAge: TimeInterval = 60, dpopReplayCapacity: Int = 100_000
    ) {
        self.issuer = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        self.audience = audience
        self.leeway = leeway
        self.transport = transport
        self.timeSource = timeSource
        proofCheck = DPoPProofCheck(maximumAge: dpopProofMaximumAge, timeSource: timeSource)
        replays = DPoPReplayWindow(capacity: dpopReplayCapacity)
    }

    /// Verifies `token`, the bearer token of a request (`Authorization: Bearer`). Throws `invalid_token` with the reason
    /// for a token to refuse (401) — a DPoP-bound token too, which is only taken with a proof of its key
    /// (``verify(authorization:dpop:method:url:)``) — and `keys_unavailable` when Latchkey's keys cannot be had now (503).
    public func verify(_ token: String) async throws(LatchkeyError) -> LatchkeyAccessToken {
        let verified = try await verifiedToken(token)
        guard verified.boundKeyThumbprint == nil else { throw Self.boundAsBearer }
        return verified
    }

    /// Verifies the access token of a request, as the request presents it (RFC 9449 §7): a bearer token as
    /// `Authorization: Bearer`; a DPoP-bound token (`cnf.jkt`) as `Authorization: DPoP` with exactly one `DPoP` proof,
    /// by the token's key, for this method and URL, carrying the token's hash (`ath`), issued within
    /// `dpopProofMaximumAge` of now and not used before (its `jti`, remembered in this process).
    ///
    /// - Parameters:
    ///   - authorization: the request's `Authorization` header.
    ///   - dpop: the values of the request's `DPoP` headers.
    ///   - method: the request's method, such as `GET`.
    ///   - url: the URL the client sent the request to: the backend's public URL and the request's path (a query is
    ///     ignored). Behind a proxy or a load balancer, build it from the public URL you configured, not from the
    ///     `Host` the proxy passes on.
    /// - Throws: `invalid_token` (401, a `Bearer` or `DPoP` challenge as the request's scheme) for a token to refuse, a
    ///   bound token sent as `Bearer`, an unbound one sent as `DPoP`, or another scheme; `invalid_dpop_proof` (401, a
    ///   `DPoP` challenge) for a missing, malformed, foreign or replayed proof; `keys_unavailable` (503).
    public func verify(authorization: String, dpop: [String], method: String, url: String) async throws(LatchkeyError) -> LatchkeyAccessToken {
        guard let space = authorization.firstIndex(of: " ") else { throw LatchkeyError(.invalidToken, "the Authorization header has no scheme") }
        let scheme = authorization[..<space].lowercased()
        let token = authorization[authorization.index(after: space)...].trimmingCharacters(in: .whitespaces)
        switch scheme {
        case "bearer":
            return try await verify(token)
        case "dpop":
            let verified = try await verifiedToken(token)
            guard let bound = verified.boundKeyThumbprint else {
                throw LatchkeyError(.invalidToken, "this access token is not DPoP-bound: send it as Authorization: Bearer")
            }
            guard dpop.count == 1, let presented = dpop.first else {
                throw Self.invalidProof(
                    dpop.isEmpty ? "a DPoP-bound access token goes with a DPoP proof (the DPoP header)" : "the request carries more than one DPoP header")
            }
            let proof = try proofCheck.verify(presented, method: method, url: url, accessToken: token)
            guard proof.thumbprint == bound else { throw Self.invalidProof("the DPoP proof is by another key than the token's") }
            let now = timeSource.now
            guard replays.insert(proof.thumbprint + " " + proof.jti, until: proof.issuedAt.addingTimeInterval(proofCheck.maximumAge), now: now) else {
                throw Self.invalidProof("the DPoP proof was used already (its jti); make a new proof for each request")
            }
            return verified
        default:
            throw LatchkeyError(.invalidToken, "the Authorization scheme is \(scheme.prefix(16)), not Bearer or DPoP")
        }
    }

    private static let boundAsBearer = LatchkeyError(
        .invalidToken, "this access token is DPoP-bound: send it as Authorization: DPoP with a DPoP proof by its key")

    private static func invalidProof(_ reason: String) -> LatchkeyError { LatchkeyError(.invalidDPoPProof, reason) }

    /// The token's signature and claims checked, however it is bound.
    private func verifiedToken(_ token: String) async throws(LatchkeyError) -> LatchkeyAccessToken {
        let check = try await self.check()
        let (verified, payload) = try await check.verify(token)
        let claims = (try? LeanJSONDecoder().decode([String: JSONValue].self, from: payload)) ?? [:]
        return LatchkeyAccessToken(
            userID: verified.userID, sessionID: verified.sessionID, clientID: verified.clientID, tokenID: verified.tokenID, issuedAt: verified.issuedAt,
            expiresAt: verified.expiresAt, authTime: verified.authTime, idp: verified.idp, boundKeyThumbprint: verified.boundKeyThumbprint,
            attested: verified.attested, claims: claims)
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
