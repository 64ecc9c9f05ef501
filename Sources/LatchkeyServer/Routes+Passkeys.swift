import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyModels

extension LatchkeyServer {
    static let passkeyRoutes: [(method: String, path: String)] = [
        ("POST", "/v1/me/passkeys/options"), ("POST", "/v1/me/passkeys"), ("GET", "/v1/me/passkeys"), ("DELETE", "/v1/me/passkeys/{id}"),
        ("POST", "/v1/auth/passkey/options"), ("POST", "/v1/auth/passkey"), ("POST", "/v1/auth/passkey/signup/options"),
        ("POST", "/v1/auth/passkey/signup"),
    ]

    func addPasskeyRoutes(to router: Router<LatchkeyRequestContext>) {
        router.post("/v1/me/passkeys/options") { request, _ in
            let (token, _) = try await authenticate(request)
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
            return JSONBody.response(["passkeys": try await passkeyService().passkeys(userID: token.userID)])
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
            try await passkeySignIn(provider: "passkey") {
                let body = try decodeJSON(PasskeySignInRequest.self, try await request.bytes(limit: configuration.maximumBodySize))
                return try await passkeyService().signIn(challengeID: body.challengeId, credential: body.credential, userAgent: request.headers[.userAgent])
            }
        }
        router.post("/v1/auth/passkey/signup/options") { request, _ in
            let bytes = try await request.bytes(limit: configuration.maximumBodySize)
            let body = bytes.isEmpty ? PasskeySignUpOptionsRequest() : try decodeJSON(PasskeySignUpOptionsRequest.self, bytes)
            return JSONBody.response(try await passkeyService().signUpOptions(displayName: body.displayName, inviteCode: body.inviteCode))
        }
        router.post("/v1/auth/passkey/signup") { request, _ in
            try await passkeySignIn(provider: "passkey") {
                let body = try decodeJSON(PasskeySignUpRequest.self, try await request.bytes(limit: configuration.maximumBodySize))
                return try await passkeyService().signUp(
                    challengeID: body.challengeId, credential: body.credential, name: body.name, userAgent: request.headers[.userAgent])
            }
        }
    }

    private func passkeyService() throws -> PasskeyService {
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
