import Crypto
import Foundation
import Hummingbird

extension CodeRecord.Provider {
    static let google = Self("google")
}

extension ProviderProfile {
    /// Google at `/google`: its issuer, codes that live ten minutes, `plain` PKCE allowed, `azp` and `hd` in its ID tokens.
    static let google: ProviderProfile = {
        var profile = ProviderProfile(provider: .google, displayName: "Google") { $0.addGoogleRoutes(to: $1) }
        profile.subject = { Identifiers.googleSubject(userID: $0.userID) }
        profile.register = { configuration, _, clientID, uris in
            configuration.googleClients.removeAll { $0.clientID == clientID }
            configuration.googleClients.append(.init(clientID: clientID, redirectURIs: uris))
        }
        profile.client = { configuration, _, clientID in configuration.googleClient(clientID) }
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "ya29.", refreshPrefix: "1//0", codePrefix: "4/0", accessLifetime: 3599, tokenType: "Bearer",
                badCode: "Malformed auth code.", badRefresh: "Token has been expired or revoked.", codeLifetime: 600)
        }
        profile.makeCode = { $0.codePrefix + Identifiers.randomAlphanumeric(70, alphabet: Identifiers.base64URLAlphabet) }
        profile.redirectMismatchError = "redirect_uri_mismatch"
        profile.allowsPlainChallenge = true
        profile.idTokenIssuer = { configuration, _, _ in configuration.googleIssuer }
        profile.idTokenLifetime = 3600
        profile.idTokenExtras = { claims, user, clientID, _ in
            claims["azp"] = .string(clientID)
            if let domain = user.email.split(separator: "@").last, !["gmail.com", "googlemail.com"].contains(String(domain)) {
                claims["hd"] = .string(String(domain))
            }
        }
        profile.keyID = Identifiers.googleKeyID
        return profile
    }()
}

extension Emulator {
    func addGoogleRoutes(to router: Router<BasicRequestContext>) {
        router.get("/google/.well-known/openid-configuration") { request, _ in
            let base = request.baseURL + "/google"
            return HTTPAnswer.json(
                GoogleDiscovery(
                    issuer: configuration.googleIssuer,
                    authorization_endpoint: base + "/o/oauth2/v2/auth",
                    token_endpoint: base + "/token",
                    jwks_uri: base + "/oauth2/v3/certs",
                    revocation_endpoint: base + "/revoke",
                    response_types_supported: ["code", "token", "id_token", "code token", "code id_token", "token id_token", "code token id_token", "none"],
                    subject_types_supported: ["public"],
                    id_token_signing_alg_values_supported: ["RS256"],
                    scopes_supported: ["openid", "email", "profile"],
                    token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic"],
                    claims_supported: ["aud", "email", "email_verified", "exp", "family_name", "given_name", "iat", "iss", "name", "picture", "sub"],
                    code_challenge_methods_supported: ["plain", "S256"],
                    grant_types_supported: ["authorization_code", "refresh_token"]
                ))
        }

        router.get("/google/oauth2/v3/certs") { _, _ in
            var response = HTTPAnswer.json(try await state.jwks(.google))
            response.headers[.cacheControl] = "public, max-age=21600, must-revalidate, no-transform"
            return response
        }

        addAuthorizeRoutes("/google/o/oauth2/v2/auth", provider: .google, to: router)

        router.post("/google/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.google, form), noStore: true)
            }
        }

        // RFC 7009 as Google does it: `token=` (form or query), 200 for a known token, 400 invalid_token otherwise.
        router.post("/google/revoke") { request, _ in
            let queryToken = request.query("token")
            return try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                guard let token = form["token"] ?? queryToken, await state.revokeProviderToken(token, .google) else {
                    throw ProviderOAuthError(status: 400, code: "invalid_token", description: "Token expired or revoked")
                }
                return HTTPAnswer.json([String: String]())
            }
        }

        router.get("/google/tokeninfo") { request, _ in
            guard let token = request.query("id_token"), let claims = await state.googleTokenInfo(token) else {
                return HTTPAnswer.json(["error": "invalid_token", "error_description": "Invalid Value"], status: .badRequest)
            }
            return HTTPAnswer.json(claims)
        }
    }
}

extension Emulator {
    /// The user pressed Continue or Cancel on an OAuth provider's page (Google, Microsoft, Dropbox, OIDC): the
    /// answer goes to the redirect URI in the query, with a code bound to the client, redirect URI, nonce and PKCE challenge.
    func oauthAuthorizeDecision(_ request: Request, provider: Provider) async throws -> Response {
        let (form, _, malformed) = try await readForm(request)
        if malformed { return HTTPAnswer.json(["error": "invalid_request"], status: .badRequest) }
        if let (error, _) = await validateAuthorizeRequest(form, provider: provider) { return HTTPAnswer.json(["error": error], status: .badRequest) }
        var answer: [(String, String)] = []
        if form["action"] != "continue" {
            answer.append(("error", "access_denied"))
        } else {
            let user = await findOrCreateUser(form)
            do throws(ProviderOAuthError) {
                let code = try await state.issueCode(
                    .init(
                        provider: provider, userID: user.id, clientID: form["client_id"]!, redirectURI: form["redirect_uri"], nonce: form["nonce"],
                        scopes: (form["scope"] ?? "").split(separator: " ").map(String.init), codeChallenge: form["code_challenge"],
                        codeChallengeMethod: form["code_challenge_method"]))
                answer.append(("code", code))
                if provider.profile.authorizationAnswerHasScope { answer.append(("scope", form["scope"] ?? "")) }
            } catch {
                return HTTPAnswer.json(["error": error.code], status: .init(code: error.status))
            }
        }
        if let stateValue = form["state"] { answer.append(("state", stateValue)) }
        return deliver(answer, to: form["redirect_uri"]!, mode: "query")
    }

    /// The GET (page) and POST (decision) routes of an OAuth provider's authorization endpoint at `path`.
    func addAuthorizeRoutes(_ path: RouterPath, provider: Provider, to router: Router<BasicRequestContext>) {
        router.get(path) { request, _ in await authorizePage(request.queryDictionary, provider: provider, action: request.uri.path) }
        router.post(path) { request, _ in try await oauthAuthorizeDecision(request, provider: provider) }
    }
}

struct GoogleDiscovery: Encodable {
    let issuer, authorization_endpoint, token_endpoint, jwks_uri, revocation_endpoint: String
    let response_types_supported, subject_types_supported, id_token_signing_alg_values_supported, scopes_supported: [String]
    let token_endpoint_auth_methods_supported, claims_supported, code_challenge_methods_supported, grant_types_supported: [String]
}
