import Foundation
import Hummingbird

extension CodeRecord.Provider {
    static let x = Self("x")
}

extension ProviderProfile {
    /// X at `/x`: OAuth 2.0 with PKCE, codes that live 30 seconds, rotating refresh tokens, no ID tokens.
    static let x: ProviderProfile = {
        var profile = ProviderProfile(provider: .x, displayName: "X") { $0.addXRoutes(to: $1) }
        profile.subject = { $0.x }
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "", refreshPrefix: "", codePrefix: "", accessLifetime: 7200, tokenType: "bearer",
                badCode: "Value passed for the authorization code was invalid.", badRefresh: "Value passed for the token was invalid.", codeLifetime: 30)
        }
        profile.refresh = { _ in .rotates }
        profile.appSignIn = .code
        profile.defaultScopes = ["users.read", "tweet.read", "offline.access"]
        profile.authorizationAnswerHasScope = false
        profile.tokenAnswerHasIDToken = false
        return profile
    }()
}

/// X's stand-in at `/x`: `/i/oauth2/authorize`, `/2/oauth2/token` (codes with PKCE; confidential clients in a Basic
/// header; rotating refresh tokens with `offline.access`), `/2/oauth2/revoke` and `/2/users/me`. X shares no e-mail.
extension Emulator {
    func addXRoutes(to router: Router<BasicRequestContext>) {
        addAuthorizeRoutes("/x/i/oauth2/authorize", provider: .x, to: router)

        router.post("/x/2/oauth2/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                var answer = try await state.providerToken(.x, form)
                // A refresh token only with offline.access.
                if !((answer["scope"].flatMap { if case .string(let scope) = $0 { scope } else { nil } } ?? "").contains("offline.access")) {
                    answer["refresh_token"] = nil
                }
                return HTTPAnswer.json(answer, noStore: true)
            }
        }

        router.post("/x/2/oauth2/revoke") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                try await state.revokeOAuth2(.x, form)
                return HTTPAnswer.json(["revoked": true])
            }
        }

        router.get("/x/2/users/me") { request, _ in
            await providerEndpoint(request) { () throws(ProviderOAuthError) in
                let refused = ProviderOAuthError(
                    status: 401, code: "unauthorized", description: "Unauthorized",
                    body: ["title": .string("Unauthorized"), "type": .string("about:blank"), "status": .int(401), "detail": .string("Unauthorized")])
                let (_, user) = try await state.bearerUser(request.bearerToken, .x, refused: refused)
                let subjects = Identifiers.ProviderSubjects(userID: user.id)
                let name = [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
                return HTTPAnswer.json([
                    "data": Claim.object([
                        "id": .string(subjects.x), "name": .string(name.isEmpty ? "X user" : name),
                        "username": .string(String(user.email.prefix { $0 != "@" }).replacingOccurrences(of: "-", with: "_")),
                    ])
                ])
            }
        }
    }
}
