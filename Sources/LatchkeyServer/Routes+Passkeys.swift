import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels

extension LatchkeyServer {
    func addPasskeyRoutes(to router: Router<LatchkeyRequestContext>) {
        router.post("/oauth2/passkey") { request, _ in try await passkeyAuthorization(request) }
        router.post("/v1/me/passkeys/options") { request, _ in
            let (token, _) = try await authenticate(request)
            // Each call reads the user and their passkeys: one user's token may not start them without bound, from any address.
            if let wait = subjectLimiter.check("passkey-options:" + token.userID) {
                throw APIError(
                    status: .tooManyRequests, code: "rate_limited", description: "too many passkey registrations started for this user; retry in \(wait) s",
                    headers: [.retryAfter: String(wait)])
            }
            return JSONBody.response(try await passkeyService().registrationOptions(userID: token.userID))
        }
        router.post("/v1/me/passkeys") { request, _ in
            let (token, _) = try await authenticate(request)
            let body = try decodeJSON(PasskeyRegistrationRequest.self, try await request.bytes(limit: configuration.maximumBodySize))
            do {
                let passkey = try await passkeyService().register(userID: token.userID, credential: body.credential, name: body.name)
                return JSONBody.response(passkey, status: .created)
            } catch let error as LatchkeyError where error.code == .invalidCredential {
                // A 401 here would blame the access token: clients would refresh it and send the used challenge again.
                throw APIError(status: .badRequest, code: error.errorCode, description: error.reason)
            }
        }
        router.get("/v1/me/passkeys") { request, _ in
            let (token, _) = try await authenticate(request)
            return JSONBody.response(PasskeyList(passkeys: try await passkeyService().passkeys(userID: token.userID)))
        }
        router.delete("/v1/me/passkeys/:id") { request, context in
            let (token, _) = try await authenticate(request)
            let id = try Self.decodedPathSegment(try context.parameters.require("id"), name: "id")
            try await passkeyService().delete(userID: token.userID, id: id)
            return Response(status: .noContent)
        }
        router.post("/v1/auth/passkey/options") { _, _ in
            JSONBody.response(try await passkeyService().signInOptions())
        }
        router.post("/v1/auth/passkey") { request, _ in
            let bytes = try await request.bytes(limit: configuration.maximumBodySize)
            return try await passkeySignIn(provider: "passkey") {
                let body = try decodeJSON(PasskeySignInRequest.self, bytes)
                return try await attesting(bytes) {
                    try await passkeyService().signIn(challengeID: body.challengeId, credential: body.credential, userAgent: request.headers[.userAgent])
                }
            }
        }
        router.post("/v1/auth/passkey/signup/options") { request, _ in
            let bytes = try await request.bytes(limit: configuration.maximumBodySize)
            let body = bytes.isEmpty ? PasskeySignUpOptionsRequest() : try decodeJSON(PasskeySignUpOptionsRequest.self, bytes)
            return JSONBody.response(try await passkeyService().signUpOptions(displayName: body.displayName, inviteCode: body.inviteCode))
        }
        router.post("/v1/auth/passkey/signup") { request, _ in
            let bytes = try await request.bytes(limit: configuration.maximumBodySize)
            return try await passkeySignIn(provider: "passkey") {
                let body = try decodeJSON(PasskeySignUpRequest.self, bytes)
                return try await attesting(bytes) {
                    try await passkeyService().signUp(
                        challengeID: body.challengeId, credential: body.credential, name: body.name, userAgent: request.headers[.userAgent])
                }
            }
        }
    }

    /// `POST /oauth2/passkey`: the chooser's passkey sign-in finishes its authorization request. The request is checked
    /// as `/oauth2/authorize` checks it; the answer says where the browser goes next (the app, with its code or error).
    func passkeyAuthorization(_ request: Request) async throws -> Response {
        struct Body: Decodable {
            let authorization: String
            let challengeId: String
            let credential: AuthenticationResponseJSON
        }
        let passkeys = try passkeyService()
        let body = try decodeJSON(Body.self, try await request.bytes(limit: configuration.maximumBodySize))
        let query: [String: String]
        do { query = try Self.formFields(Array(body.authorization.utf8)) } catch { throw APIError.invalidRequest("authorization is not a query string") }
        let authorization: AuthorizationRequest
        switch validated(query) {
        case .success(let valid): authorization = valid
        case .failure(let refusal):
            guard let location = refusal.response.headers[.location] else { throw APIError.invalidRequest(refusal.description) }
            return JSONBody.response(RedirectResponse(redirectTo: location))
        }
        guard authorization.client.allows(provider: PasskeyService.provider) else {
            throw APIError.invalidRequest("passkeys are not among the providers of the client \(authorization.client.clientID.prefix(100))")
        }
        let account: SignInService.ResolvedAccount
        do {
            account = try await passkeys.authenticate(challengeID: body.challengeId, credential: body.credential)
        } catch {
            metrics.signIn(provider: PasskeyService.provider, outcome: (error as? LatchkeyError)?.errorCode ?? "error")
            throw error
        }
        var pending = AuthorizationCodeFlow.PendingSignIn(
            provider: PasskeyService.provider, clientID: authorization.client.clientID, redirectURI: authorization.redirectURI,
            appState: authorization.appState, codeChallenge: authorization.codeChallenge, rawNonce: "", providerCodeVerifier: "")
        pending.dpopThumbprint = authorization.dpopThumbprint
        let code = try await flows.issueCode(for: pending, userID: account.user.id, identityID: account.identity.id, userAgent: request.headers[.userAgent])
        metrics.signIn(provider: PasskeyService.provider, outcome: "ok")
        let redirect = redirectToApp(authorization.redirectURI, [("code", code)], state: authorization.appState)
        return JSONBody.response(RedirectResponse(redirectTo: redirect.headers[.location] ?? authorization.redirectURI))
    }

    func passkeyService() throws -> PasskeyService {
        guard let passkeys else {
            throw APIError(
                status: .notFound, code: "not_found", description: "passkeys are not configured on this server (set passkeys.rpId and passkeys.origins)")
        }
        return passkeys
    }

    /// A passkey sign-in or sign-up, answered and counted like every provider's.
    private func passkeySignIn(provider: String, _ run: () async throws -> SignInService.SignInOutcome) async throws -> Response {
        do {
            let outcome = try await run()
            metrics.signIn(provider: provider, outcome: outcome.isNewUser ? "new_user" : "ok")
            return Self.signInResponse(outcome)
        } catch {
            if passkeys != nil {
                metrics.signIn(provider: provider, outcome: (error as? LatchkeyError)?.errorCode ?? (error as? APIError)?.code ?? "error")
            }
            throw error
        }
    }
}
