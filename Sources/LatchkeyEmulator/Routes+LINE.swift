import Foundation
import Hummingbird

/// LINE Login v2.1's stand-in at `/line` (its issuer here): discovery naming ES256, keys at `/oauth2/v2.1/certs`,
/// `/oauth2/v2.1/authorize` (PKCE S256), `/oauth2/v2.1/token` (codes, whose ID token is the web login's HS256 one signed
/// with the channel secret; refresh tokens) and `/oauth2/v2.1/revoke`, which takes an `access_token` and ends the grant
/// behind it. The control API's sign-ins answer as the app SDK does, with an ES256 ID token.
extension Emulator {
    func addLINERoutes(to router: Router<BasicRequestContext>) {
        router.get("/line/.well-known/openid-configuration") { request, _ in
            await providerDocument(request) {
                let issuer = request.baseURL + "/line"
                var document = openIDConfiguration(
                    issuer: issuer, authorization: issuer + "/oauth2/v2.1/authorize", token: issuer + "/oauth2/v2.1/token",
                    jwks: issuer + "/oauth2/v2.1/certs", revocation: issuer + "/oauth2/v2.1/revoke", codeChallengeMethods: ["S256"])
                document["id_token_signing_alg_values_supported"] = .array([.string("ES256")])
                document["subject_types_supported"] = .array([.string("pairwise")])
                return HTTPAnswer.json(document)
            }
        }
        router.get("/line/oauth2/v2.1/certs") { request, _ in
            await providerDocument(request) { HTTPAnswer.json(await state.lineJWKS()) }
        }
        addAuthorizeRoutes("/line/oauth2/v2.1/authorize", provider: .line, to: router)

        router.post("/line/oauth2/v2.1/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.line, form, issuer: request.baseURL + "/line"), noStore: true)
            }
        }

        router.post("/line/oauth2/v2.1/revoke") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                guard let clientID = form["client_id"], let channel = configuration.oauthClient(.line, clientID),
                    channel.clientSecret == form["client_secret"]
                else { throw ProviderOAuthError(status: 400, code: "invalid_client", description: "invalid client_id or client_secret") }
                guard let token = form["access_token"], !token.isEmpty else {
                    throw ProviderOAuthError(status: 400, code: "invalid_request", description: "access_token is required")
                }
                _ = await state.revokeProviderToken(token, .line, clientID: clientID)
                return HTTPAnswer.empty()
            }
        }
    }
}
