import HTTPTypes
public import Hummingbird
public import HummingbirdAuth
public import LatchkeyBackend
import LatchkeyJOSE

/// Authenticates Hummingbird requests with Latchkey access tokens: a request with a valid token gets it as the
/// context's `identity`; one without a token goes on unauthenticated (add `IsAuthenticatedMiddleware` where a token is
/// required); a bad token is answered 401 (an unavailable JWKS, 503).
///
/// ```swift
/// let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
/// router.addMiddleware { LatchkeyAuthenticator(verifier: AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey")) }
/// router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("me") { _, context -> String in
///     try context.requireIdentity().userID
/// }
/// ```
///
/// Sessions bound to the app's device key (DPoP, RFC 9449) send their tokens as `Authorization: DPoP` with a proof of
/// the key, which names the URL the client used. Give the authenticator this server's public URL to take them: behind a
/// proxy or a load balancer the request's `Host` is not what the client used.
///
/// ```swift
/// router.addMiddleware { LatchkeyAuthenticator(verifier: verifier, publicBaseURL: "https://api.example.com") }
/// ```
public struct LatchkeyAuthenticator<Context: AuthRequestContext<LatchkeyAccessToken>>: AuthenticatorMiddleware {
    public typealias Identity = LatchkeyAccessToken
    public let verifier: AccessTokenVerifier
    /// This server's URL as clients reach it (scheme, host, port, and a path prefix the proxy strips, if any), without a
    /// trailing slash: a DPoP proof's URL is this and the request's path. Nil takes bearer tokens only.
    public let publicBaseURL: String?

    /// An authenticator of bearer tokens; a DPoP-bound token is refused (see ``init(verifier:publicBaseURL:)``).
    public init(verifier: AccessTokenVerifier) {
        self.verifier = verifier
        publicBaseURL = nil
    }

    /// An authenticator of bearer tokens and of DPoP-bound tokens with their proofs, for a server clients reach at
    /// `publicBaseURL`, such as `https://api.example.com`.
    public init(verifier: AccessTokenVerifier, publicBaseURL: String) {
        self.verifier = verifier
        self.publicBaseURL = publicBaseURL.hasSuffix("/") ? String(publicBaseURL.dropLast()) : publicBaseURL
    }

    public func authenticate(request: Request, context: Context) async throws -> LatchkeyAccessToken? {
        guard let authorization = request.headers[.authorization], let space = authorization.firstIndex(of: " ") else { return nil }
        let scheme = authorization[..<space].lowercased()
        guard scheme == "bearer" || scheme == "dpop" else { return nil }
        do throws(LatchkeyError) {
            guard let publicBaseURL else {
                guard scheme == "bearer" else {
                    throw LatchkeyError(.invalidToken, "this server takes bearer tokens only (its LatchkeyAuthenticator has no publicBaseURL)")
                }
                return try await verifier.verify(String(authorization[authorization.index(after: space)...]))
            }
            return try await verifier.verify(
                authorization: authorization, dpop: request.headers[values: .dpop], method: request.method.rawValue, url: publicBaseURL + request.uri.path)
        } catch  where error.code == .keysUnavailable || error.code == .providerUnavailable {
            throw HTTPError(.serviceUnavailable, message: "the sign-in server's keys cannot be fetched now")
        } catch {
            // RFC 9449 §7.1: a DPoP request, or a refused proof, is answered with a DPoP challenge.
            let challenge =
                scheme == "dpop" || error.code == .invalidDPoPProof
                ? #"DPoP error="\#(error.errorCode)", algs="\#(DPoPProofCheck.algorithms.joined(separator: " "))""#
                : #"Bearer error="invalid_token""#
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: challenge], message: error.reason)
        }
    }
}

extension HTTPField.Name {
    /// RFC 9449's proof header.
    fileprivate static let dpop = HTTPField.Name("DPoP")!
}
