public import Hummingbird
public import HummingbirdAuth
public import LatchkeyBackend
import LatchkeyJOSE

/// Authenticates Hummingbird requests with Latchkey access tokens: a request with a valid bearer token gets it as
/// the context's `identity`; one without a token goes on unauthenticated (add `IsAuthenticatedMiddleware` where a
/// token is required); a bad token is answered 401 (an unavailable JWKS, 503).
///
/// ```swift
/// let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
/// router.addMiddleware { LatchkeyAuthenticator(verifier: AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey")) }
/// router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("me") { _, context -> String in
///     try context.requireIdentity().userID
/// }
/// ```
public struct LatchkeyAuthenticator<Context: AuthRequestContext<LatchkeyAccessToken>>: AuthenticatorMiddleware {
    public typealias Identity = LatchkeyAccessToken
    public let verifier: AccessTokenVerifier

    public init(verifier: AccessTokenVerifier) { self.verifier = verifier }

    public func authenticate(request: Request, context: Context) async throws -> LatchkeyAccessToken? {
        guard let bearer = request.headers.bearer else { return nil }
        do {
            return try await verifier.verify(bearer.token)
        } catch  where error.code == .keysUnavailable || error.code == .providerUnavailable {
            throw HTTPError(.serviceUnavailable, message: "the sign-in server's keys cannot be fetched now")
        } catch {
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: #"Bearer error="invalid_token""#], message: error.reason)
        }
    }
}
