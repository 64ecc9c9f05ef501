import Foundation
import Hummingbird

/// GitLab's stand-in at `/gitlab` (its issuer, as a self-managed instance's base URL is): OpenID Connect discovery,
/// keys at `/oauth/discovery/keys`, `/oauth/authorize`, `/oauth/token` (codes with PKCE, ID tokens) and RFC 7009's
/// `/oauth/revoke`, on the OpenID Connect stand-in's rules.
extension Emulator {
    func addGitLabRoutes(to router: Router<BasicRequestContext>) {
        router.get("/gitlab/.well-known/openid-configuration") { request, _ in
            await providerDocument(request) {
                let issuer = request.baseURL + "/gitlab"
                return HTTPAnswer.json(
                    openIDConfiguration(
                        issuer: issuer, authorization: issuer + "/oauth/authorize", token: issuer + "/oauth/token", jwks: issuer + "/oauth/discovery/keys",
                        revocation: issuer + "/oauth/revoke", codeChallengeMethods: ["plain", "S256"]))
            }
        }

        router.get("/gitlab/oauth/discovery/keys") { request, _ in
            await providerDocument(request) { () throws(ProviderOAuthError) in HTTPAnswer.json(try await state.jwks(.gitlab)) }
        }

        addAuthorizeRoutes("/gitlab/oauth/authorize", provider: .gitlab, to: router)

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
