import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyModels
public import Logging

/// Sign in with Apple as an ``IdentityProvider``: the identity token is verified locally; the authorization
/// code that came with it is redeemed after the token was claimed, and Apple's refresh token is kept to
/// validate the authorization daily and revoke it on account deletion.
public struct AppleIdentityProvider: IdentityProvider {
    public let client: AppleClient
    public let keys: JWKSCache
    public let verifier: IdentityTokenVerifier
    /// The redirect URIs web codes may name (`apple.redirectUris`, and Latchkey's own callback).
    public let redirectURIs: [String]
    /// The client id of the browser flow: the Services ID.
    public let servicesID: String
    private let observer: ProviderCallObserver?

    public init(
        configuration: AppleConfiguration, signInPolicy: IdentityTokenPolicy, redirectURIs: [String], servicesID: String? = nil, transport: any HTTPTransport,
        timeSource: TimeSource = .system, logger: Logger? = nil, observer: ProviderCallObserver? = nil
    ) throws(LatchkeyError) {
        self.client = try AppleClient(configuration: configuration, transport: transport, timeSource: timeSource, logger: logger)
        self.keys = JWKSCache(url: configuration.jwksURL, transport: transport, timeSource: timeSource, logger: logger)
        self.verifier = IdentityTokenVerifier(policy: signInPolicy, keys: keys, timeSource: timeSource)
        self.redirectURIs = redirectURIs
        self.servicesID = servicesID ?? configuration.clientIDs.first ?? ""
        self.observer = observer
    }

    public var name: String { "apple" }
    public var displayName: String { "Apple" }
    public var acceptedCredentials: String { "{identityToken, rawNonce, authorizationCode?, redirectUri?, fullName?}" }
    public var credentialKinds: Set<CredentialKind> { [.idToken] }
    public var keyCaches: [JWKSCache] { [keys] }
    public var signsInWithBrowser: Bool { true }

    /// Sign in with Apple on the web: the Services ID (`apple.servicesId`) as client id, `form_post` with the
    /// name and e-mail scopes (Apple requires `form_post` when scopes are asked), and the ID token in the answer.
    public func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart? {
        BrowserSignInStart(
            url: url(
                client.configuration.baseURL + "/auth/authorize",
                query: [
                    ("response_type", "code id_token"), ("response_mode", "form_post"), ("scope", "name email"), ("client_id", servicesID),
                    ("redirect_uri", request.callbackURL), ("state", request.state),
                    ("nonce", nonceParameter(request.rawNonce, verifier.policy.nonceMatching)),
                ]))
    }

    /// Apple posts `id_token`, `code`, `state` and, on the first authorization only, `user`.
    public func browserCredential(_ answer: [String: String], _ request: BrowserSignInRequest) -> ProviderCredential {
        ProviderCredential(idToken: answer["id_token"], rawNonce: request.rawNonce, authorizationCode: answer["code"], redirectURI: request.callbackURL)
    }

    /// The name in Apple's first-authorization `user` field: `{"name":{"firstName":…,"lastName":…},"email":…}`.
    public func browserName(_ answer: [String: String]) -> PersonName? {
        struct User: Decodable {
            struct Name: Decodable {
                let firstName: String?
                let lastName: String?
            }
            let name: Name?
        }
        guard let json = answer["user"], json.utf8.count <= 4096, let user = try? JSONDecoder().decode(User.self, from: Data(json.utf8)),
            let name = user.name
        else { return nil }
        return PersonName(givenName: name.firstName, familyName: name.lastName)
    }

    public var signInBody: any SignInBody.Type { AppleSignInRequest.self }

    public func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn {
        guard let token = credential.idToken, !token.isEmpty else { throw LatchkeyError(.malformedRequest, "identityToken is empty") }
        let identity = try await verifier.verify(token, expecting: .signIn(rawNonce: credential.rawNonce, authorizationCode: credential.authorizationCode))
        return ProviderSignIn(identity: identity, singleUseToken: token)
    }

    /// Apple's authorization code is redeemed once, after the identity token is claimed.
    public func completes(_ credential: ProviderCredential) -> Bool { credential.authorizationCode?.isEmpty == false }

    public func complete(_ credential: ProviderCredential, _ signIn: ProviderSignIn) async throws -> ProviderSignIn {
        guard let code = credential.authorizationCode, !code.isEmpty else { return signIn }
        if let redirectURI = credential.redirectURI, !redirectURIs.contains(redirectURI) {
            throw LatchkeyError(.malformedRequest, "redirectUri \(redirectURI.prefix(200)) is not one of the configured apple.redirectUris")
        }
        let tokens = try await observed("code_exchange") { () throws(LatchkeyError) in
            try await client.exchangeCode(code, clientID: signIn.identity.audience, redirectURI: credential.redirectURI)
        }
        // The code must belong to the same Apple ID as the identity token. Apple always answers with an ID token; an
        // answer without one proves nothing, and its refresh token could be anyone's.
        guard let idToken = tokens.idToken else {
            throw LatchkeyError(.invalidProviderResponse, "Apple's answer to the code exchange had no id_token, so the code's Apple ID is unknown")
        }
        let exchanged = try await verifier.verify(idToken)
        guard exchanged.subject == signIn.identity.subject else {
            throw LatchkeyError(.invalidGrant, "the authorization code belongs to another Apple ID than the identity token")
        }
        var completed = signIn
        completed.grant = tokens.refreshToken
        return completed
    }

    public func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            _ = try await observed("refresh_validation") { () throws(LatchkeyError) in try await client.validateRefreshToken(refreshToken, clientID: clientID) }
            return .valid
        } catch {
            // Only Apple's verdict on the token revokes users; our own misconfiguration never does.
            return error.code == .invalidGrant ? .revoked : .unreachable(error.errorCode)
        }
    }

    public func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        try await observed("revocation") { () throws(LatchkeyError) in try await client.revoke(refreshToken, clientID: clientID) }
    }

    private func observed<T>(_ operation: String, _ call: () async throws(LatchkeyError) -> T) async throws(LatchkeyError) -> T {
        do {
            let value = try await call()
            observer?(name, operation, "ok")
            return value
        } catch {
            observer?(name, operation, error.errorCode)
            throw error
        }
    }
}
