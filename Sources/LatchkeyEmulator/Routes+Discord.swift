import Foundation
import Hummingbird

extension CodeRecord.Provider {
    static let discord = Self("discord")
}

extension ProviderProfile {
    /// Discord at `/discord`: plain OAuth 2.0 with rotating refresh tokens, no ID tokens.
    static let discord: ProviderProfile = {
        var profile = ProviderProfile(provider: .discord, displayName: "Discord") { $0.addDiscordRoutes(to: $1) }
        profile.subject = { $0.discord }
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "", refreshPrefix: "", codePrefix: "", accessLifetime: 604_800, tokenType: "Bearer", badCode: "Invalid \"code\" in request.",
                badRefresh: "Invalid \"refresh_token\" in request.", codeLifetime: nil)
        }
        profile.refresh = { _ in .rotates }
        profile.appSignIn = .code
        profile.defaultScopes = ["identify", "email"]
        profile.authorizationAnswerHasScope = false
        profile.tokenAnswerHasIDToken = false
        return profile
    }()
}

/// Discord's stand-in at `/discord`: `/oauth2/authorize`, `/api/oauth2/token` (codes with PKCE, rotating refresh
/// tokens), `/api/oauth2/token/revoke` and `/api/users/@me`.
extension Emulator {
    func addDiscordRoutes(to router: Router<BasicRequestContext>) {
        addAuthorizeRoutes("/discord/oauth2/authorize", provider: .discord, to: router)

        router.post("/discord/api/oauth2/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.discord, form), noStore: true)
            }
        }

        router.post("/discord/api/oauth2/token/revoke") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                try await state.revokeOAuth2(.discord, form)
                return HTTPAnswer.json([String: String]())
            }
        }

        router.get("/discord/api/users/@me") { request, _ in
            await providerEndpoint(request) { () throws(ProviderOAuthError) in
                let refused = ProviderOAuthError(
                    status: 401, code: "unauthorized", description: "401: Unauthorized", body: ["message": .string("401: Unauthorized"), "code": .int(0)])
                let (record, user) = try await state.bearerUser(request.bearerToken, .discord, refused: refused)
                let subjects = Identifiers.ProviderSubjects(userID: user.id)
                let name = [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
                var answer: [String: Claim] = [
                    "id": .string(subjects.discord), "username": .string(String(user.email.prefix { $0 != "@" }).lowercased()),
                    "global_name": name.isEmpty ? .null : .string(name), "discriminator": .string("0"), "avatar": .null,
                    "mfa_enabled": .bool(false), "locale": .string("en-US"),
                ]
                // The e-mail only with the `email` scope.
                if record.scopes.contains("email") {
                    answer["email"] = .string(user.email)
                    answer["verified"] = .bool(true)
                }
                return HTTPAnswer.json(answer)
            }
        }
    }
}
