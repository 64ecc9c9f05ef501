import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels

/// What an OAuth 2.0 provider without ID tokens is, for ``OAuth2CodeProvider``: its endpoints and scopes, how it
/// authenticates the client, and how an access token becomes an identity. A module (Discord, X) describes its provider
/// with one of these; the code exchange (RFC 6749 §4.1.3 with RFC 7636's verifier), the refresh validation and the
/// revocation (RFC 7009) are the same for all of them.
struct OAuth2Profile: Sendable {
    var name: String
    var displayName: String
    var clientID: String
    var clientSecret: Secret?
    var authorizeURL: String
    var tokenURL: String
    var revocationURL: String?
    var scopes: [String]
    /// Confidential clients send their secret in a Basic header (`client_secret_basic`) rather than in the form.
    var secretInBasicHeader = false
    /// The identity behind an access token, read from the provider's API.
    var identity: @Sendable (_ accessToken: String, _ calls: ProviderCalls, _ now: Date) async throws(LatchkeyError) -> VerifiedIdentity
}

/// An OAuth 2.0 provider whose sign-ins are authorization codes with PKCE: the app (or Latchkey's browser flow) gets
/// a code, the server redeems it with the verifier and reads the user from the provider's API. The refresh token is
/// the grant: validated daily with a refresh, revoked on account deletion.
struct OAuth2CodeProvider: IdentityProvider {
    let profile: OAuth2Profile
    let calls: ProviderCalls
    let timeSource: TimeSource

    init(_ profile: OAuth2Profile, context: ProviderContext, timeout: Duration = .seconds(10)) {
        self.profile = profile
        timeSource = context.timeSource
        calls = ProviderCalls(
            provider: profile.name, displayName: profile.displayName, transport: context.transport, timeout: timeout, observer: context.observer)
    }

    var name: String { profile.name }
    var displayName: String { profile.displayName }
    var signsInWithBrowser: Bool { true }
    var acceptedCredentials: String { "{authorizationCode, codeVerifier, redirectUri}" }
    var credentialKinds: Set<CredentialKind> { [.authorizationCode] }

    func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart? {
        BrowserSignInStart(
            url: url(
                profile.authorizeURL,
                query: [("response_type", "code"), ("client_id", profile.clientID), ("scope", profile.scopes.joined(separator: " "))]
                    + request.codeFlowParameters))
    }

    func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn {
        let (code, verifier) = try credential.codeWithVerifier(profile.displayName)
        var fields = [("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier)]
        if let redirectURI = credential.redirectURI { fields.append(("redirect_uri", redirectURI)) }
        let answer = try await token(fields, operation: "code_exchange")
        guard let accessToken = answer.access_token, !accessToken.isEmpty else {
            throw LatchkeyError(.invalidProviderResponse, "\(profile.displayName)'s token answer has no access_token")
        }
        let identity = try await profile.identity(accessToken, calls, timeSource.now)
        return ProviderSignIn(identity: identity, grant: answer.refresh_token)
    }

    /// A token-endpoint call with the client's authentication.
    private func token(_ fields: [(String, String)], operation: String) async throws(LatchkeyError) -> OAuthTokenAnswer {
        let (fields, headers) = authenticated(fields)
        return try calls.decode(
            OAuthTokenAnswer.self, try await calls.postForm(profile.tokenURL, fields, headers: headers, operation: operation), what: "token endpoint")
    }

    /// `fields` with the client id, and the secret in the form or in a Basic header.
    private func authenticated(_ fields: [(String, String)]) -> ([(String, String)], [(name: String, value: String)]) {
        guard let secret = profile.clientSecret else { return (fields + [("client_id", profile.clientID)], []) }
        if profile.secretInBasicHeader {
            let basic = Data("\(formEscape(profile.clientID)):\(formEscape(secret.revealed))".utf8)
            return (fields + [("client_id", profile.clientID)], [("Authorization", "Basic \(basic.base64EncodedString())")])
        }
        return (fields + [("client_id", profile.clientID), ("client_secret", secret.revealed)], [])
    }

    /// `doctor --live`: a token request with a made-up code, to see whether the provider accepts the client.
    func probeClient() async -> ProviderFinding {
        let outcome: Result<Void, LatchkeyError>
        do {
            _ = try await token(
                [("grant_type", "authorization_code"), ("code", "latchkey-doctor-invalid-code"), ("code_verifier", PKCE.makeVerifier())],
                operation: "doctor")
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        return .clientProbe(profile.name, profile.displayName, outcome)
    }

    func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            let answer = try await token([("grant_type", "refresh_token"), ("refresh_token", refreshToken)], operation: "refresh_validation")
            // Both Discord and X rotate refresh tokens: the new one replaces the stored one.
            if let new = answer.refresh_token, !new.isEmpty, new != refreshToken { return .replaced(newRefreshToken: new) }
            return .valid
        } catch {
            return error.code == .invalidGrant ? .revoked : .unreachable(error.errorCode)
        }
    }

    func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        // Without a revocation endpoint there is nothing to call; the grant is forgotten.
        guard let revocationURL = profile.revocationURL else { return }
        let (fields, headers) = authenticated([("token", refreshToken), ("token_type_hint", "refresh_token")])
        _ = try await calls.postForm(revocationURL, fields, headers: headers, operation: "revocation")
    }
}
