import Foundation
import Hummingbird
import NIOCore

/// What the OpenID Connect stand-ins share: an issuer's discovery document, keys and authorization page.
extension Emulator {
    /// The discovery document, keys and authorization page of an OpenID Connect stand-in whose issuer is
    /// `{base}/{provider}` (the generic issuer, GitLab, Slack); the endpoints' paths are relative to the issuer.
    func addOpenIDIssuerRoutes(
        _ provider: Provider, authorize: String, token: String, keys: String, revocation: String?, codeChallengeMethods: [String],
        to router: Router<BasicRequestContext>
    ) {
        let prefix = "/" + provider.name
        router.get(RouterPath(prefix + "/.well-known/openid-configuration")) { request, _ in
            await providerDocument(request) {
                let issuer = request.baseURL + prefix
                return HTTPAnswer.json(
                    openIDConfiguration(
                        issuer: issuer, authorization: issuer + authorize, token: issuer + token, jwks: issuer + keys,
                        revocation: revocation.map { issuer + $0 }, codeChallengeMethods: codeChallengeMethods))
            }
        }
        router.get(RouterPath(prefix + keys)) { request, _ in
            await providerDocument(request) { () throws(ProviderOAuthError) in HTTPAnswer.json(try await state.jwks(provider)) }
        }
        addAuthorizeRoutes(RouterPath(prefix + authorize), provider: provider, to: router)
    }

    /// An OpenID Connect discovery document (RS256, code flow, public subjects).
    func openIDConfiguration(issuer: String, authorization: String, token: String?, jwks: String, revocation: String?, codeChallengeMethods: [String])
        -> [String: Claim]
    {
        var document: [String: Claim] = [
            "issuer": .string(issuer), "authorization_endpoint": .string(authorization), "jwks_uri": .string(jwks),
            "response_types_supported": .array(["code", "id_token", "code id_token"].map(Claim.string)),
            "subject_types_supported": .array([.string("public")]), "id_token_signing_alg_values_supported": .array([.string("RS256")]),
            "scopes_supported": .array(["openid", "email", "profile", "offline_access"].map(Claim.string)),
            "token_endpoint_auth_methods_supported": .array(["none", "client_secret_post", "client_secret_basic"].map(Claim.string)),
            "claims_supported": .array(
                ["iss", "aud", "sub", "iat", "exp", "nonce", "email", "email_verified", "name", "given_name", "family_name"].map(Claim.string)),
            "code_challenge_methods_supported": .array(codeChallengeMethods.map(Claim.string)),
            "grant_types_supported": .array(["authorization_code", "refresh_token"].map(Claim.string)),
        ]
        if let token { document["token_endpoint"] = .string(token) }
        if let revocation { document["revocation_endpoint"] = .string(revocation) }
        return document
    }
}

extension Optional {
    func asyncFlatMap<U>(_ transform: (Wrapped) async -> U?) async -> U? {
        guard let value = self else { return nil }
        return await transform(value)
    }
}
