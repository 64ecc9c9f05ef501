import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import Logging

/// Latchkey as the OAuth 2.1 authorization server of its registered apps (RFC 6749, RFC 7636, RFC 7009,
/// RFC 8414, RFC 9207, RFC 9700), federating each sign-in to a provider.
extension LatchkeyServer {
    func addOAuthRoutes(to router: Router<LatchkeyRequestContext>) {
        router.get("/oauth2/authorize") { request, _ in try await authorize(request) }
        router.get("/oauth2/callback/:provider") { request, context in
            let answer: [String: String]
            do {
                answer = try queryFields(request)
            } catch {
                return HTMLPage.error(title: Self.callbackFailed, (error as? APIError)?.description ?? "the provider's answer is malformed")
            }
            return try await providerCallback(request, providerName: try context.parameters.require("provider"), answer: answer)
        }
        // Apple answers with form_post: a cross-site POST that carries no SameSite=Lax cookie, so the flow is found by `state`.
        router.post("/oauth2/callback/:provider") { request, context in
            let bytes = try await request.bytes(limit: configuration.maximumBodySize)
            guard let answer = try? Self.formFields(bytes) else {
                return HTMLPage.error(title: Self.callbackFailed, "the provider's answer is not a valid form")
            }
            return try await providerCallback(request, providerName: try context.parameters.require("provider"), answer: answer)
        }
        router.post("/oauth2/token") { request, context in try await oauthTokenEndpoint(request, from: origin(request, context)) }
        router.post("/oauth2/revoke") { request, _ in try await revokeEndpoint(request) }
        router.get("/.well-known/oauth-authorization-server") { _, _ in
            JSONBody.response(authorizationServerMetadata, headers: [.cacheControl: "public, max-age=3600"])
        }
        if configuration.servesDemoPage {
            // The page is also its own redirect URI: its script finishes the flow there.
            for path in ["/", "/callback"] {
                router.get(RouterPath(path)) { _, _ in
                    HTMLPage.demo(
                        providers: browserProviders(for: demoClient), clientID: demoClient?.clientID ?? "", passkeys: passkeys != nil, email: emailCodes != nil)
                }
            }
            router.get("/demo.js") { _, _ in HTMLPage.demoScript() }
        }
    }

    /// The client the demo page signs in as: the first registered one.
    var demoClient: OAuthClient? { configuration.clients.first }

    /// The providers a client may sign in with in the browser, in the registry's order.
    func browserProviders(for client: OAuthClient?) -> [(name: String, displayName: String)] {
        guard let client else { return [] }
        return providers.all.filter { $0.signsInWithBrowser && client.allows(provider: $0.name) }.map { ($0.name, $0.displayName) }
    }

    /// RFC 8414 metadata: exactly the endpoints, methods and PKCE method this server supports.
    struct AuthorizationServerMetadata: Encodable {
        let issuer, authorization_endpoint, token_endpoint, revocation_endpoint, jwks_uri: String
        let response_types_supported, response_modes_supported, grant_types_supported, code_challenge_methods_supported: [String]
        let token_endpoint_auth_methods_supported, revocation_endpoint_auth_methods_supported: [String]
        let authorization_response_iss_parameter_supported: Bool
        let access_token_signing_alg_values_supported: [String]
        /// RFC 9449 §5.1.
        let dpop_signing_alg_values_supported: [String]
    }

    var authorizationServerMetadata: AuthorizationServerMetadata {
        let issuer = configuration.issuer
        let methods = ["none", "client_secret_basic", "client_secret_post"]
        return AuthorizationServerMetadata(
            issuer: issuer, authorization_endpoint: issuer + "/oauth2/authorize", token_endpoint: issuer + "/oauth2/token",
            revocation_endpoint: issuer + "/oauth2/revoke", jwks_uri: issuer + "/.well-known/jwks.json", response_types_supported: ["code"],
            response_modes_supported: ["query"], grant_types_supported: ["authorization_code", "refresh_token"], code_challenge_methods_supported: ["S256"],
            token_endpoint_auth_methods_supported: methods, revocation_endpoint_auth_methods_supported: methods,
            authorization_response_iss_parameter_supported: true, access_token_signing_alg_values_supported: ["ES256"],
            dpop_signing_alg_values_supported: DPoPProofCheck.algorithms)
    }

    // MARK: - Authorization endpoint

    /// An authorization request whose client and redirect URI are known and whose PKCE and `state` are in order.
    struct AuthorizationRequest {
        let client: OAuthClient
        let query: [String: String]
        let redirectURI: String
        let appState: String
        let codeChallenge: String
        /// `dpop_jkt` (RFC 9449 §10).
        let dpopThumbprint: String?
    }

    func authorize(_ request: Request) async throws -> Response {
        let query: [String: String]
        do {
            query = try queryFields(request)
        } catch {
            return HTMLPage.error(title: "This sign-in request is invalid", (error as? APIError)?.description ?? "the query is malformed")
        }
        let authorization: AuthorizationRequest
        switch validated(query) {
        case .success(let valid): authorization = valid
        case .failure(let refusal): return refusal.response
        }
        let (client, clientID, redirectURI, appState, challenge) = (
            authorization.client, authorization.client.clientID, authorization.redirectURI, authorization.appState, authorization.codeChallenge
        )
        func refuse(_ code: String, _ description: String) -> Response {
            redirectToApp(redirectURI, [("error", code), ("error_description", description)], state: appState)
        }
        let offered = browserProviders(for: client)
        guard let providerName = query["provider"], !providerName.isEmpty else {
            return HTMLPage.chooser(
                providers: offered, query: query, clientID: clientID, passkeys: passkeys != nil && client.allows(provider: PasskeyService.provider))
        }
        guard offered.contains(where: { $0.name == providerName }), let provider = providers[providerName] else {
            return refuse(
                "invalid_request",
                "provider \(providerName.prefix(40)) is not available to this client; available: \(offered.map(\.name).joined(separator: ", "))")
        }
        var pending = AuthorizationCodeFlow.PendingSignIn(
            provider: provider.name, clientID: clientID, redirectURI: redirectURI, appState: appState, codeChallenge: challenge,
            rawNonce: PKCE.makeVerifier(), providerCodeVerifier: PKCE.makeVerifier(byteCount: 48), inviteCode: query["invite_code"])
        pending.dpopThumbprint = authorization.dpopThumbprint
        let state = try await flows.begin(pending)
        do {
            guard let start = try await provider.browserSignIn(browserRequest(pending, state: state)) else {
                return refuse("invalid_request", "\(provider.displayName) has no browser sign-in on this server")
            }
            return Self.redirect(to: start.url)
        } catch {
            logger.warning("could not start a browser sign-in", metadata: ["provider": "\(provider.name)", "error": "\(error)"])
            return refuse("temporarily_unavailable", "\(provider.displayName) cannot be reached; try again shortly")
        }
    }

    /// Why an authorization request is refused: a page shown here until the redirect URI is trusted, then the app's
    /// redirect with the error.
    struct AuthorizationRefusal: Error {
        let response: Response
        let code: String
        let description: String
    }

    /// `/oauth2/authorize`'s checks, in order: the client and its exact redirect URI (refused here), then `response_type`,
    /// `state` and the S256 PKCE challenge (refused to the app).
    func validated(_ query: [String: String]) -> Result<AuthorizationRequest, AuthorizationRefusal> {
        func page(_ title: String, _ message: String) -> Result<AuthorizationRequest, AuthorizationRefusal> {
            .failure(AuthorizationRefusal(response: HTMLPage.error(title: title, message), code: "invalid_request", description: message))
        }
        // Until the redirect URI is trusted, errors are shown here, never sent anywhere (RFC 9700 §4.1).
        guard let clientID = query["client_id"], !clientID.isEmpty else { return page("This sign-in request is invalid", "client_id is missing") }
        guard let client = clients[clientID] else {
            return page("Unknown app", "the client_id \(clientID.prefix(100)) is not registered on this server (clients[] in its configuration)")
        }
        guard let redirectURI = query["redirect_uri"], !redirectURI.isEmpty else { return page("This sign-in request is invalid", "redirect_uri is missing") }
        guard client.allowsRedirect(to: redirectURI) else {
            return page(
                "Unknown redirect URI",
                "the redirect_uri \(redirectURI.prefix(200)) is not registered for \(clientID.prefix(100)); redirect URIs are matched exactly (a loopback http URI matches any port)"
            )
        }
        let appState = query["state"]
        func refuse(_ code: String, _ description: String) -> Result<AuthorizationRequest, AuthorizationRefusal> {
            let response = redirectToApp(redirectURI, [("error", code), ("error_description", description)], state: appState)
            return .failure(AuthorizationRefusal(response: response, code: code, description: description))
        }
        guard query["response_type"] == "code" else { return refuse("unsupported_response_type", "response_type must be code") }
        guard let appState, !appState.isEmpty else { return refuse("invalid_request", "state is required") }
        guard appState.utf8.count <= 1024 else { return refuse("invalid_request", "state is longer than 1024 bytes") }
        guard let challenge = query["code_challenge"] else {
            return refuse("invalid_request", "code_challenge is required (PKCE, RFC 7636) with code_challenge_method=S256")
        }
        guard query["code_challenge_method"] == "S256" else {
            return refuse("invalid_request", "code_challenge_method must be S256; plain and a missing method are not accepted")
        }
        guard challenge.utf8.count == 43, challenge.utf8.allSatisfy(Self.isBase64URL) else {
            return refuse("invalid_request", "code_challenge is not an S256 challenge (43 base64url characters)")
        }
        // An RFC 7638 SHA-256 thumbprint: 43 base64url characters.
        let dpopThumbprint = query["dpop_jkt"]
        if let dpopThumbprint, dpopThumbprint.utf8.count != 43 || !dpopThumbprint.utf8.allSatisfy(Self.isBase64URL) {
            return refuse("invalid_request", "dpop_jkt is not a JWK SHA-256 thumbprint (43 base64url characters)")
        }
        return .success(
            AuthorizationRequest(
                client: client, query: query, redirectURI: redirectURI, appState: appState, codeChallenge: challenge, dpopThumbprint: dpopThumbprint))
    }

    /// The base64url alphabet (RFC 4648 §5), which an S256 challenge is written in.
    static func isBase64URL(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"),
            UInt8(ascii: "_"):
            true
        default: false
        }
    }

    private func browserRequest(_ pending: AuthorizationCodeFlow.PendingSignIn, state: String) -> BrowserSignInRequest {
        BrowserSignInRequest(
            callbackURL: Self.callbackURL(issuer: configuration.issuer, provider: pending.provider), state: state, rawNonce: pending.rawNonce,
            codeVerifier: pending.providerCodeVerifier)
    }

    // MARK: - The provider's answer

    static let callbackFailed = "This sign-in cannot be finished"

    func providerCallback(_ request: Request, providerName: String, answer: [String: String]) async throws -> Response {
        guard let state = answer["state"], !state.isEmpty else {
            return HTMLPage.error(title: Self.callbackFailed, "the provider's answer has no state; start again from the app")
        }
        let pending: AuthorizationCodeFlow.PendingSignIn
        switch try await flows.take(state: state) {
        case .unknown:
            return HTMLPage.error(
                title: Self.callbackFailed, "the provider's answer names no sign-in in progress here (state mismatch); start again from the app")
        case .alreadyUsed:
            return HTMLPage.error(title: Self.callbackFailed, "this sign-in was already finished; start again from the app")
        case .expired(let expired):
            return redirectToApp(
                expired.redirectURI,
                [("error", "access_denied"), ("error_description", "the sign-in took longer than \(Int(AuthorizationCodeFlow.flowLifetime / 60)) minutes")],
                state: expired.appState)
        case .pending(let found):
            pending = found
        }
        func refuse(_ code: String, _ description: String) -> Response {
            metrics.signIn(provider: pending.provider, outcome: code)
            return redirectToApp(pending.redirectURI, [("error", code), ("error_description", description)], state: pending.appState)
        }
        guard pending.provider == providerName, let provider = providers[pending.provider] else {
            return HTMLPage.error(title: Self.callbackFailed, "the answer came back to another provider's callback")
        }
        if let error = answer["error"] {
            let cancelled = ["access_denied", "user_cancelled_authorize"].contains(error)
            return refuse("access_denied", cancelled ? "the user cancelled at \(provider.displayName)" : "\(provider.displayName) answered \(error.prefix(60))")
        }
        let credential = provider.browserCredential(answer, browserRequest(pending, state: state))
        guard credential.authorizationCode?.isEmpty == false || credential.idToken?.isEmpty == false else {
            return refuse("access_denied", "\(provider.displayName)'s answer has no code")
        }
        let name = Self.browserName(provider.browserName(answer))
        do {
            let account = try await signInFlow.resolveAccount(provider, credential, name: name, inviteCode: pending.inviteCode)
            let code = try await flows.issueCode(for: pending, userID: account.user.id, identityID: account.identity.id, userAgent: request.headers[.userAgent])
            metrics.signIn(provider: provider.name, outcome: account.isNewUser ? "new_user" : "ok")
            return redirectToApp(pending.redirectURI, [("code", code)], state: pending.appState)
        } catch {
            let apiError = ErrorMiddleware.apiError(error, logger: logger)
            switch apiError.status {
            case .serviceUnavailable, .tooManyRequests, .badGateway:
                return refuse("temporarily_unavailable", apiError.description)
            case .internalServerError:
                return refuse("server_error", apiError.description)
            default:
                return refuse("access_denied", apiError.description)
            }
        }
    }

    /// The name a provider's answer at the callback carries (Apple's `user` field). The user's browser posts it: a name
    /// it garbled is left out rather than failing the sign-in.
    static func browserName(_ name: PersonName?) -> PersonName? {
        guard let name else { return nil }
        return PersonName(
            givenName: (try? profileName(name.givenName, "user.name.firstName")) ?? nil,
            familyName: (try? profileName(name.familyName, "user.name.lastName")) ?? nil)
    }

    /// Back to the app's redirect URI with the answer, its `state` and this server as `iss` (RFC 9207).
    func redirectToApp(_ redirectURI: String, _ fields: [(String, String)], state: String?) -> Response {
        var fields = fields
        if let state { fields.append(("state", state)) }
        fields.append(("iss", configuration.issuer))
        return Self.redirect(to: redirectURI + (redirectURI.contains("?") ? "&" : "?") + formURLEncoded(fields))
    }

    /// 303: after the POST of a `form_post` answer the browser must GET the next page.
    static func redirect(to location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store", HTMLPage.referrerPolicy: "no-referrer"])
    }

    // MARK: - Token endpoint

    /// RFC 6749 §5.1 answers: snake_case, `token_type`, never cached.
    struct OAuthTokenResponse: Encodable {
        let access_token: String
        let token_type: String
        let expires_in: Int
        let refresh_token: String
    }

    static let tokenHeaders: HTTPFields = [.cacheControl: "no-store", .init("Pragma")!: "no-cache"]

    func oauthTokenEndpoint(_ request: Request, from origin: RequestOrigin) async throws -> Response {
        do {
            let fields = try await oauthForm(request)
            let client = try authenticateClient(request, fields)
            let tokens: IssuedTokens
            switch fields["grant_type"] {
            case "authorization_code":
                guard let code = fields["code"], !code.isEmpty else { throw APIError.invalidRequest("code is missing") }
                guard let redirectURI = fields["redirect_uri"], !redirectURI.isEmpty else { throw APIError.invalidRequest("redirect_uri is missing") }
                guard let verifier = fields["code_verifier"], !verifier.isEmpty else {
                    throw APIError.invalidRequest("code_verifier is missing (PKCE is required)")
                }
                if (client.dpop ?? configuration.dpop.mode) == .require, SessionBinding.current.dpopThumbprint == nil {
                    throw LatchkeyError(.invalidDPoPProof, "this client's sessions are bound to a device key: send a DPoP proof (RFC 9449) with the code")
                }
                tokens = try await flows.redeem(code: code, clientID: client.clientID, redirectURI: redirectURI, codeVerifier: verifier)
            case "refresh_token":
                guard let refreshToken = fields["refresh_token"], !refreshToken.isEmpty else { throw APIError.invalidRequest("refresh_token is missing") }
                tokens = try await sessions.refresh(
                    refreshToken, forClient: client.clientID, origin: origin, proofThumbprint: SessionBinding.current.dpopThumbprint)
            case nil:
                throw APIError.invalidRequest("grant_type is missing")
            case let other?:
                throw APIError(
                    status: .badRequest, code: "unsupported_grant_type",
                    description: "grant_type \(other.prefix(40)) is not supported; use authorization_code or refresh_token")
            }
            if fields["grant_type"] == "refresh_token" { metrics.refresh(outcome: "ok") }
            return JSONBody.response(
                OAuthTokenResponse(
                    access_token: tokens.accessToken, token_type: tokens.tokenType, expires_in: tokens.expiresIn, refresh_token: tokens.refreshToken),
                headers: Self.tokenHeaders)
        } catch {
            return oauthError(error)
        }
    }

    /// RFC 7009: 200 whether or not the token was valid, so a caller learns nothing about tokens it does not own.
    func revokeEndpoint(_ request: Request) async throws -> Response {
        do {
            let fields = try await oauthForm(request)
            let client = try authenticateClient(request, fields)
            guard let token = fields["token"], !token.isEmpty else { throw APIError.invalidRequest("token is missing") }
            var sessionID: String?
            if RefreshTokens.isWellFormed(token) {
                if let (_, family) = try await store.refreshToken(hash: RefreshTokens.hash(token)), family.clientID == client.clientID {
                    sessionID = family.id
                }
            } else if let verified = try? await sessions.accessTokens.verify(token), verified.clientID == client.clientID {
                sessionID = verified.sessionID
            }
            if let sessionID { try await store.revokeSession(id: sessionID, reason: "revoked_by_client", at: timeSource.now) }
            return Response(status: .ok, headers: Self.tokenHeaders)
        } catch {
            return oauthError(error)
        }
    }

    /// An RFC 6749 §5.2 error answer, never cached.
    private func oauthError(_ error: any Error) -> Response {
        var apiError = ErrorMiddleware.apiError(error, logger: logger)
        for field in Self.tokenHeaders { apiError.headers[field.name] = field.value }
        return JSONBody.error(apiError)
    }

    /// The token and revocation endpoints take forms only (RFC 6749 §3.2).
    private func oauthForm(_ request: Request) async throws -> [String: String] {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            throw APIError.invalidRequest("send application/x-www-form-urlencoded")
        }
        return try Self.formFields(try await request.bytes(limit: configuration.maximumBodySize))
    }

    /// The registered client making a token or revocation request: `client_secret_basic`, `client_secret_post`,
    /// or a public client's `client_id` alone. Every failure is `invalid_client` (RFC 6749 §5.2).
    func authenticateClient(_ request: Request, _ fields: [String: String]) throws -> OAuthClient {
        func invalidClient(_ description: String, basic: Bool) -> APIError {
            APIError(
                status: .unauthorized, code: "invalid_client", description: description,
                headers: basic ? [.wwwAuthenticate: #"Basic realm="latchkey""#] : [:])
        }
        if let authorization = request.headers[.authorization], authorization.lowercased().hasPrefix("basic ") {
            guard fields["client_secret"] == nil else { throw APIError.invalidRequest("use one client authentication method, not Basic and client_secret") }
            guard let decoded = Data(base64Encoded: String(authorization.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
                let pair = String(data: decoded, encoding: .utf8), let colon = pair.firstIndex(of: ":"),
                let id = String(pair[..<colon]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding,
                let secret = String(pair[pair.index(after: colon)...]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            else { throw invalidClient("the Basic credentials are malformed", basic: true) }
            guard fields["client_id"] == nil || fields["client_id"] == id else { throw APIError.invalidRequest("client_id differs from the Basic credentials") }
            guard let client = clients[id], client.kind == .confidential, client.authenticates(secret: secret) else {
                throw invalidClient("client authentication failed", basic: true)
            }
            return client
        }
        guard let id = fields["client_id"], !id.isEmpty else { throw invalidClient("client_id is missing", basic: false) }
        guard let client = clients[id] else { throw invalidClient("client authentication failed", basic: false) }
        let secret = fields["client_secret"] ?? ""
        switch client.kind {
        case .confidential:
            guard client.authenticates(secret: secret) else { throw invalidClient("client authentication failed", basic: false) }
        case .public:
            guard secret.isEmpty else { throw invalidClient("this client is public and has no secret", basic: false) }
        }
        return client
    }

    // MARK: - Parameters

    /// Query parameters; a parameter sent twice is refused (RFC 6749 §3.1).
    func queryFields(_ request: Request) throws -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in request.uri.queryParameters {
            let name = String(name)
            guard fields[name] == nil else { throw APIError.invalidRequest("parameter \(name.prefix(40)) appears twice") }
            // No identifier, code or search term holds one, and PostgreSQL refuses it in text.
            guard !value.contains("\u{0}") else { throw APIError.invalidRequest("parameter \(name.prefix(40)) holds a NUL character") }
            fields[name] = String(value)
        }
        return fields
    }

    /// An `application/x-www-form-urlencoded` body; a parameter sent twice is refused.
    static func formFields(_ bytes: [UInt8]) throws -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: bytes, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = formDecoded(parts[0]), let value = formDecoded(parts.count > 1 ? parts[1] : "")
            else { throw APIError.invalidRequest("the form body is not valid percent-encoding") }
            guard fields[name] == nil else { throw APIError.invalidRequest("parameter \(name.prefix(40)) appears twice") }
            fields[name] = value
        }
        return fields
    }
}
