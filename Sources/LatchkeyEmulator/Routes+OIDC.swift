import Foundation
import Hummingbird
import NIOCore

extension CodeRecord.Provider {
    static let oidc = Self("oidc")
}

extension ProviderProfile {
    /// A generic OpenID Connect issuer at `/oidc`: public clients, refresh tokens that rotate when the configuration
    /// says so.
    static let oidc: ProviderProfile = {
        var profile = ProviderProfile(provider: .oidc, displayName: "OpenID Connect") { $0.addOIDCRoutes(to: $1) }
        profile.subject = { $0.oidc }
        profile.register = { configuration, _, clientID, uris in
            configuration.oidcClients.removeAll { $0.clientID == clientID }
            configuration.oidcClients.append(.init(clientID: clientID, redirectURIs: uris))
        }
        profile.client = { configuration, _, clientID in configuration.oidcClients.first { $0.clientID == clientID } }
        profile.refresh = { $0.oidcRotatesRefreshTokens ? .rotates : .keeps }
        profile.keyID = Identifiers.googleKeyID
        return profile
    }()
}

extension Emulator {
    func addOIDCRoutes(to router: Router<BasicRequestContext>) {
        addOpenIDIssuerRoutes(.oidc, authorize: "/authorize", token: "/token", keys: "/jwks", revocation: "/revoke", codeChallengeMethods: ["S256"], to: router)

        router.post("/oidc/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.oidc, form, issuer: request.baseURL + "/oidc"), noStore: true)
            }
        }

        // RFC 7009: the client must be registered; unknown tokens (or other clients' tokens) are still a 200.
        router.post("/oidc/revoke") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                guard let clientID = form["client_id"], let client = configuration.oauthClient(.oidc, clientID),
                    client.clientSecret == nil || client.clientSecret == form["client_secret"]
                else { throw ProviderOAuthError(status: 401, code: "invalid_client", description: "client authentication failed") }
                guard let token = form["token"], !token.isEmpty else {
                    throw ProviderOAuthError(status: 400, code: "invalid_request", description: "token is missing")
                }
                _ = await state.revokeProviderToken(token, .oidc, clientID: clientID)
                return HTTPAnswer.empty()
            }
        }
    }
}
