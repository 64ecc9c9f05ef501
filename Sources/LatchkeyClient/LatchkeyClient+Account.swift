import Foundation
public import LatchkeyModels

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The signed-in user's account: profile, sessions, linked providers, deletion.
extension LatchkeyClient {
    /// The user as the server has them now (`GET /v1/me`), with their identities and the claims the app's backend set;
    /// also kept as ``currentUser`` (and in ``state``).
    public func user() async throws -> LatchkeyUser {
        let user = try await call("GET", "v1/me", as: LatchkeyUser.self)
        await engine.described(user)
        return user
    }

    /// The user's live sessions (`GET /v1/me/sessions`); `current` marks this one.
    public func sessions() async throws -> [SessionResponse] {
        try await call("GET", "v1/me/sessions", as: SessionList.self).sessions
    }

    /// Ends one of the user's sessions, another device's say (`DELETE /v1/me/sessions/{id}`).
    public func revokeSession(id: String) async throws {
        _ = try await call("DELETE", "v1/me/sessions/" + Self.pathSegment(id), as: EmptyAnswer.self)
    }

    /// Deletes the account (`DELETE /v1/me`), as the App Store requires apps to offer: the server revokes every
    /// provider's grant and deletes the user. The session here ends whatever the network does; an error says the
    /// server did not confirm the deletion (ask the user to try again).
    public func deleteAccount() async throws {
        do {
            _ = try await call("DELETE", "v1/me", as: EmptyAnswer.self)
        } catch {
            await signOut()
            throw error
        }
        // The server ended every session with the user: there is nothing to log out of.
        _ = await engine.signOut()
    }

    /// Links another provider account with its ID token (`POST /v1/me/identities/{provider}`); the user as they are
    /// afterwards. `identity_in_use` when another user has it.
    @discardableResult
    public func linkIdentity(provider: String, idToken: String, rawNonce: String? = nil) async throws -> UserResponse {
        try await call(
            "POST", "v1/me/identities/" + Self.pathSegment(provider), body: ProviderSignInRequest(idToken: idToken, rawNonce: rawNonce), as: UserResponse.self)
    }

    /// Links another provider account with an authorization code the app got with PKCE.
    @discardableResult
    public func linkIdentity(provider: String, authorizationCode: String, codeVerifier: String, redirectUri: String) async throws -> UserResponse {
        let body = ProviderSignInRequest(authorizationCode: authorizationCode, codeVerifier: codeVerifier, redirectUri: redirectUri)
        return try await call("POST", "v1/me/identities/" + Self.pathSegment(provider), body: body, as: UserResponse.self)
    }

    /// A guest proves another account with its ID token and is merged into it (`POST /v1/me/merge/{provider}`): the
    /// client's session becomes that account's. Call it after a link answered `identity_in_use` with `mergeable`.
    @discardableResult
    public func merge(provider: String, idToken: String, rawNonce: String? = nil) async throws -> SignedIn {
        try await merge(provider: provider, body: ProviderSignInRequest(idToken: idToken, rawNonce: rawNonce))
    }

    /// A guest proves an Apple account afresh (a new credential) and is merged into the user who holds it.
    @discardableResult
    public func mergeWithApple(identityToken: String, authorizationCode: String?, rawNonce: String) async throws -> SignedIn {
        try await merge(provider: "apple", body: AppleSignInRequest(identityToken: identityToken, authorizationCode: authorizationCode, rawNonce: rawNonce))
    }

    /// A guest proves another account with an authorization code the app got with PKCE, and is merged into it.
    @discardableResult
    public func merge(provider: String, authorizationCode: String, codeVerifier: String, redirectUri: String) async throws -> SignedIn {
        try await merge(
            provider: provider, body: ProviderSignInRequest(authorizationCode: authorizationCode, codeVerifier: codeVerifier, redirectUri: redirectUri))
    }

    /// A guest proves an account by the code e-mailed to its address (``startEmailSignIn(email:inviteCode:)`` sends it),
    /// and is merged into it.
    @discardableResult
    public func mergeWithEmailCode(_ code: String, email: String) async throws -> SignedIn {
        try await merge(provider: "email", body: EmailVerifyRequest(email: email, code: code))
    }

    /// A guest proves an account with one of its passkeys, and is merged into it.
    @discardableResult
    public func mergeWithPasskey(using authenticator: some PasskeyAuthenticator) async throws -> SignedIn {
        let options = try await post("v1/auth/passkey/options", body: [String: String](), as: PublicKeyCredentialRequestOptionsJSON.self)
        guard let challengeID = options.challengeId else { throw LatchkeyClientError.invalidResponse("passkey options without a challengeId") }
        let assertion = try await authenticator.assertPasskey(options)
        return try await merge(provider: "passkey", body: PasskeySignInRequest(challengeId: challengeID, credential: assertion))
    }

    private func merge(provider: String, body: some Encodable & Sendable) async throws -> SignedIn {
        let answer = try await call("POST", "v1/me/merge/" + Self.pathSegment(provider), body: body, as: SignInResponse.self)
        let tokens = TokenPairResponse(
            accessToken: answer.accessToken, tokenType: answer.tokenType, expiresIn: answer.expiresIn, refreshToken: answer.refreshToken)
        await engine.signedIn(tokens, user: answer.user)
        return SignedIn(user: answer.user, isNewUser: answer.isNewUser)
    }

    /// Sends a code to an address the user adds as another way in (`POST /v1/me/identities/email/start`).
    public func startLinkingEmail(_ email: String) async throws {
        _ = try await call("POST", "v1/me/identities/email/start", body: EmailStartRequest(email: email), as: StatusResponse.self)
    }

    /// Links the address with its code (`POST /v1/me/identities/email/verify`); a guest becomes a user like any other.
    @discardableResult
    public func linkEmail(_ email: String, code: String) async throws -> UserResponse {
        try await call("POST", "v1/me/identities/email/verify", body: EmailVerifyRequest(email: email, code: code), as: UserResponse.self)
    }

    /// Unlinks one of the user's provider accounts, never the last (`last_identity`).
    @discardableResult
    public func unlinkIdentity(provider: String, subject: String) async throws -> UserResponse {
        try await call("DELETE", "v1/me/identities/\(Self.pathSegment(provider))/\(Self.pathSegment(subject))", as: UserResponse.self)
    }

    // MARK: - Calls

    /// A success whose body nobody reads.
    struct EmptyAnswer: Decodable {}

    /// A signed-in call (with the 401-aware retry of ``data(for:)``); a non-2xx answer is ``LatchkeyClientError/rejected``.
    func call<Answer: Decodable>(_ method: String, _ path: String, body: (some Encodable)? = Optional<String>.none, as type: Answer.Type)
        async throws -> Answer
    {
        var request = URLRequest(url: URL(string: Self.issuer(of: baseURL) + "/" + path)!, timeoutInterval: 30)
        request.httpMethod = method
        if let body {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = try JSONEncoder().encode(body)
        }
        let (data, response) = try await self.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        // A success whose body the caller does not need (a 204, say) decodes from an empty object.
        let body = Answer.self == EmptyAnswer.self && (200..<300).contains(status) ? Data("{}".utf8) : data
        return try Self.answer(Answer.self, body, status: status, describing: "the answer \(method) /\(path) documents")
    }

    /// One path segment, percent-encoded (subjects may hold `|` or `/`).
    static func pathSegment(_ value: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}
