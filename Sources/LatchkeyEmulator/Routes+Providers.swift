import Foundation
import Hummingbird
import NIOCore

/// Microsoft's template issuer: `{tenantid}` stands for the token's `tid`.
let microsoftIssuerTemplate = "https://login.microsoftonline.com/{tenantid}/v2.0"

/// Stand-ins for Microsoft (`/microsoft`), Facebook (`/facebook`), Dropbox (`/dropbox`) and a generic
/// OpenID Connect issuer (`/oidc`). Every call is logged and can be faulted like Apple's and Google's.
extension Emulator {
    func addMicrosoftRoutes(to router: Router<BasicRequestContext>) {
        router.get("/microsoft/:tenant/v2.0/.well-known/openid-configuration") { request, context in
            let tenant = try context.parameters.require("tenant")
            return await providerEndpoint(request) { () throws(ProviderOAuthError) in
                let issuer =
                    switch tenant.lowercased() {
                    case "common", "organizations": microsoftIssuerTemplate
                    case "consumers": microsoftIssuerTemplate.replacingOccurrences(of: "{tenantid}", with: Identifiers.microsoftConsumersTenant)
                    case let guid where UUID(uuidString: guid) != nil: microsoftIssuerTemplate.replacingOccurrences(of: "{tenantid}", with: guid)
                    default: throw ProviderOAuthError(status: 400, code: "invalid_tenant", description: "AADSTS90002: Tenant '\(tenant)' not found.")
                    }
                let base = request.baseURL + "/microsoft/" + tenant
                var document = openIDConfiguration(
                    issuer: issuer, authorization: base + "/oauth2/v2.0/authorize", token: base + "/oauth2/v2.0/token",
                    jwks: base + "/discovery/v2.0/keys", revocation: nil, codeChallengeMethods: ["plain", "S256"])
                document["token_endpoint_auth_methods_supported"] = .array(["client_secret_post", "private_key_jwt", "client_secret_basic"].map(Claim.string))
                document["response_modes_supported"] = .array(["query", "fragment", "form_post"].map(Claim.string))
                document["tenant_region_scope"] = tenant.lowercased() == "consumers" ? .string("") : .string("WW")
                return HTTPAnswer.json(document)
            }
        }

        // Keys carry no `alg` and a per-key `issuer`, as Microsoft's do.
        router.get("/microsoft/:tenant/discovery/v2.0/keys") { request, _ in
            await providerDocument(request) { () throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.jwks(.microsoft))
            }
        }

        addAuthorizeRoutes("/microsoft/:tenant/oauth2/v2.0/authorize", provider: .microsoft, to: router)

        router.post("/microsoft/:tenant/oauth2/v2.0/token") { request, context in
            let tenant = try context.parameters.require("tenant")
            return try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.microsoft, form, tenant: tenant), noStore: true)
            }
        }
    }

    func addFacebookRoutes(to router: Router<BasicRequestContext>) {
        router.get("/facebook/.well-known/openid-configuration/") { request, _ in
            await providerDocument(request) {
                let base = request.baseURL + "/facebook"
                var document = openIDConfiguration(
                    issuer: configuration.facebookIssuer, authorization: base + "/dialog/oauth/", token: nil, jwks: base + "/.well-known/oauth/openid/jwks/",
                    revocation: nil, codeChallengeMethods: ["S256"])
                document["response_types_supported"] = .array(["id_token", "token id_token"].map(Claim.string))
                document["subject_types_supported"] = .array([.string("pairwise")])
                document["claims_supported"] = .array(
                    ["iss", "aud", "sub", "iat", "exp", "jti", "nonce", "at_hash", "name", "given_name", "family_name", "email", "picture"].map(Claim.string))
                return HTTPAnswer.json(document)
            }
        }

        router.get("/facebook/.well-known/oauth/openid/jwks/") { request, _ in
            await providerDocument(request) { () throws(ProviderOAuthError) in HTTPAnswer.json(try await state.jwks(.facebook)) }
        }

        router.get("/facebook/debug_token") { request, _ in
            let appToken = request.query("access_token")
            let appID = appToken?.split(separator: "|").first.map(String.init)
            return await providerEndpoint(request, clientID: appID) { () throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.facebookDebugToken(request.query("input_token"), appToken: appToken))
            }
        }

        router.get("/facebook/me") { request, _ in
            let token = request.query("access_token") ?? request.bearerToken
            return await providerEndpoint(request, clientID: await token.asyncFlatMap { await state.clientID(ofToken: $0) }) {
                () throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.facebookMe(token, fields: request.query("fields")))
            }
        }

        // The user removes the app: every token they gave it dies.
        router.delete("/facebook/me/permissions") { request, _ in
            let token = request.query("access_token") ?? request.bearerToken
            return await providerEndpoint(request, clientID: await token.asyncFlatMap { await state.clientID(ofToken: $0) }) {
                () throws(ProviderOAuthError) in
                guard let token, await state.revokeAppAuthorization(token, .facebook) else {
                    throw EmulatorState.facebookError(400, code: 190, "Invalid OAuth access token data.")
                }
                return HTTPAnswer.json(["success": true])
            }
        }
    }

    func addDropboxRoutes(to router: Router<BasicRequestContext>) {
        router.post("/dropbox/oauth2/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.dropbox, form), noStore: true)
            }
        }

        addAuthorizeRoutes("/dropbox/oauth2/authorize", provider: .dropbox, to: router)

        router.post("/dropbox/2/users/get_current_account") { request, _ in
            let body = String(buffer: try await request.body.collect(upTo: maximumBodySize)).trimmingCharacters(in: .whitespacesAndNewlines)
            return await dropboxRPC(request) { () throws(ProviderOAuthError) in
                guard body.isEmpty || body == "null" else {
                    throw ProviderOAuthError(
                        status: 400, code: "bad_request",
                        description: "Error in call to API function \"users/get_current_account\": request body: could not decode input as JSON")
                }
                return HTTPAnswer.json(try await state.dropboxAccount(request.bearerToken))
            }
        }

        // Revokes the Bearer token and its refresh token; answers `null`.
        router.post("/dropbox/2/auth/token/revoke") { request, _ in
            await dropboxRPC(request) { () throws(ProviderOAuthError) in
                try await state.dropboxRevoke(request.bearerToken)
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "null")))
            }
        }
    }

    /// A Dropbox API call, logged under the app of its Bearer token.
    private func dropboxRPC(_ request: Request, _ body: () async throws(ProviderOAuthError) -> Response) async -> Response {
        let clientID = await request.bearerToken.asyncFlatMap { await state.clientID(ofToken: $0) }
        return await providerEndpoint(request, clientID: clientID, body)
    }

    /// The discovery document, keys and authorization page of an OpenID Connect stand-in whose issuer is
    /// `{base}/{provider}` (the generic issuer, GitLab, Slack); the endpoints' paths are relative to the issuer.
    func addOpenIDIssuerRoutes(
        _ provider: Provider, authorize: String, token: String, keys: String, revocation: String?, codeChallengeMethods: [String],
        to router: Router<BasicRequestContext>
    ) {
        let prefix = "/" + provider.rawValue
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
