import Foundation
import Hummingbird

extension CodeRecord.Provider {
    static let gitlab = Self("gitlab")
}

extension ProviderProfile {
    /// GitLab at `/gitlab`, its own issuer: public applications, the OpenID Connect stand-in's rules.
    static let gitlab: ProviderProfile = {
        var profile = ProviderProfile(provider: .gitlab, displayName: "GitLab") { $0.addGitLabRoutes(to: $1) }
        profile.subject = { $0.gitlab }
        profile.register = { configuration, provider, clientID, uris in configuration.setClient(.init(clientID: clientID, redirectURIs: uris), for: provider) }
        profile.ownIssuerPath = true
        profile.keyID = Identifiers.googleKeyID
        return profile
    }()
}

/// GitLab's stand-in at `/gitlab` (its issuer, as a self-managed instance's base URL is): OpenID Connect discovery,
/// keys at `/oauth/discovery/keys`, `/oauth/authorize`, `/oauth/token` (codes with PKCE, ID tokens) and RFC 7009's
/// `/oauth/revoke`, on the OpenID Connect stand-in's rules.
extension Emulator {
    func addGitLabRoutes(to router: Router<BasicRequestContext>) {
        addOpenIDIssuerRoutes(
            .gitlab, authorize: "/oauth/authorize", token: "/oauth/token", keys: "/oauth/discovery/keys", revocation: "/oauth/revoke",
            codeChallengeMethods: ["plain", "S256"], to: router)

        router.post("/gitlab/oauth/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.gitlab, form, issuer: request.baseURL + "/gitlab"), noStore: true)
            }
        }

        router.post("/gitlab/oauth/revoke") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                try await state.revokeOAuth2(.gitlab, form)
                return HTTPAnswer.json([String: String]())
            }
        }
    }
}
