import Foundation
import HTTPTypes
import Hummingbird

extension CodeRecord.Provider {
    static let apple = Self("apple")
}

extension ProviderProfile {
    /// Sign in with Apple at the emulator's root: its teams, apps, client secrets and notifications are the emulator's
    /// own (``EmulatorState``); the profile names it and adds its routes.
    static let apple: ProviderProfile = {
        var profile = ProviderProfile(provider: .apple, displayName: "Apple") { $0.addAppleRoutes(to: $1) }
        profile.register = { _, _, _, _ in }
        profile.appSignIn = .apple
        profile.keyID = Identifiers.appleKeyID
        return profile
    }()
}

extension Emulator {
    func addAppleRoutes(to router: Router<BasicRequestContext>) {
        router.get("/.well-known/openid-configuration") { request, _ in
            let base = request.baseURL
            return HTTPAnswer.json(
                AppleDiscovery(
                    issuer: configuration.appleIssuer,
                    authorization_endpoint: base + "/auth/authorize",
                    token_endpoint: base + "/auth/token",
                    revocation_endpoint: base + "/auth/revoke",
                    jwks_uri: base + "/auth/keys",
                    response_types_supported: ["code"],
                    response_modes_supported: ["query", "fragment", "form_post"],
                    subject_types_supported: ["pairwise"],
                    id_token_signing_alg_values_supported: ["RS256"],
                    scopes_supported: ["openid", "email", "name"],
                    token_endpoint_auth_methods_supported: ["client_secret_post"],
                    claims_supported: [
                        "aud", "email", "email_verified", "exp", "iat", "is_private_email", "iss", "nonce", "nonce_supported", "real_user_status", "sub",
                        "transfer_sub",
                    ]
                ))
        }

        router.get("/auth/keys") { request, _ in
            await state.record(RequestRecord(time: await state.now, method: "GET", endpoint: "/auth/keys", status: 200))
            var response = HTTPAnswer.json(try await state.jwks(.apple))
            response.headers[.cacheControl] = "public, max-age=3600"
            return response
        }

        router.post("/auth/token") { request, _ in
            try await appleFormEndpoint(request, endpoint: "/auth/token") { form throws(AppleOAuthError) in
                HTTPAnswer.json(try await state.appleToken(form), noStore: true)
            }
        }

        router.post("/auth/revoke") { request, _ in
            try await appleFormEndpoint(request, endpoint: "/auth/revoke") { form throws(AppleOAuthError) in
                try await state.appleRevoke(form)
                return HTTPAnswer.empty()
            }
        }

        router.post("/auth/usermigrationinfo") { request, _ in
            let bearer = request.bearerToken
            return try await appleFormEndpoint(request, endpoint: "/auth/usermigrationinfo") { form throws(AppleOAuthError) in
                HTTPAnswer.json(try await state.userMigration(form, bearer: bearer), noStore: true)
            }
        }

        router.get("/auth/authorize") { request, _ in await authorizePage(request.queryDictionary, provider: .apple, action: "/auth/authorize") }

        router.post("/auth/authorize") { request, _ in
            let (form, _, malformed) = try await readForm(request)
            if malformed { return HTTPAnswer.json(["error": "invalid_request"], status: .badRequest) }
            return await authorizeDecision(form)
        }
    }

    /// Runs an Apple form endpoint: reads the form, refuses repeated parameters, logs the outcome,
    /// and turns errors into Apple's `400 {"error": …}`.
    private func appleFormEndpoint(_ request: Request, endpoint: String, _ body: ([String: String]) async throws(AppleOAuthError) -> Response) async throws
        -> Response
    {
        let (form, duplicate, malformed) = try await readForm(request)
        var entry = RequestRecord(
            time: await state.now, method: "POST", endpoint: endpoint, clientId: form["client_id"], grantType: form["grant_type"], status: 200)
        entry.traceparent = request.headers[HTTPField.Name("traceparent")!]
        let response: Response
        do throws(AppleOAuthError) {
            if malformed { throw AppleOAuthError(code: "invalid_request", detail: "the body is not form encoded") }
            if let duplicate { throw AppleOAuthError(code: "invalid_request", detail: "parameter \(duplicate) appears twice") }
            if request.headers[.contentType].map({ !$0.lowercased().hasPrefix("application/x-www-form-urlencoded") }) ?? true {
                throw AppleOAuthError(code: "invalid_request", detail: "the body must be application/x-www-form-urlencoded")
            }
            response = try await body(form)
        } catch {
            entry.error = error.code
            entry.detail = error.detail
            response = HTTPAnswer.appleError(error.code)
        }
        entry.status = Int(response.status.code)
        await state.record(entry)
        return response
    }

    // MARK: - Authorization page (web sign-in)

    typealias Provider = CodeRecord.Provider

    /// Checks an authorization request the way Apple (or the OAuth provider) does before showing its page.
    func validateAuthorizeRequest(_ parameters: [String: String], provider: Provider) async -> (error: String, detail: String)? {
        guard let clientID = parameters["client_id"], !clientID.isEmpty else { return ("invalid_request", "client_id is missing") }
        let registered: [String]
        switch provider {
        case .apple:
            guard let app = configuration.app(clientID) else { return ("invalid_client", "client_id \(clientID) is not registered") }
            registered = app.redirectURIs
        default:
            guard let client = configuration.oauthClient(provider, clientID) else { return ("invalid_client", "client_id \(clientID) is not registered") }
            registered = client.redirectURIs
        }
        guard let redirectURI = parameters["redirect_uri"], !redirectURI.isEmpty else { return ("unauthorized_client", "redirect_uri is missing") }
        if provider == .apple, let problem = redirectURIProblem(redirectURI) { return ("invalid_request", problem) }
        guard registered.contains(redirectURI) else { return ("unauthorized_client", "redirect_uri \(redirectURI) is not registered for \(clientID)") }
        let responseTypes = Set((parameters["response_type"] ?? "").split(separator: " ").map(String.init))
        let scopes = Set((parameters["scope"] ?? "").split(separator: " ").map(String.init)).subtracting(["openid"])
        switch provider {
        case .apple:
            guard responseTypes == ["code"] || responseTypes == ["code", "id_token"] else {
                return (
                    "invalid_request",
                    responseTypes == ["id_token"] ? "response_type id_token alone is not supported" : "response_type must be code or code id_token"
                )
            }
            guard scopes.isSubset(of: ["name", "email"]) else { return ("invalid_scope", "scopes are name and email") }
            let mode = parameters["response_mode"] ?? "query"
            guard ["query", "fragment", "form_post"].contains(mode) else { return ("invalid_request", "response_mode \(mode) is not supported") }
            if responseTypes.contains("id_token"), mode == "query" {
                return ("invalid_request", "response_mode must be fragment or form_post when id_token is requested")
            }
            if !scopes.isEmpty, mode != "form_post" { return ("invalid_request", "response_mode must be form_post when scopes are requested") }
        default:
            // GitHub's authorization endpoint has no response_type parameter.
            guard responseTypes == ["code"] || (provider.profile.responseTypeOptional && responseTypes.isEmpty) else {
                return ("unsupported_response_type", "response_type must be code")
            }
            if let method = parameters["code_challenge_method"], !["S256", "plain"].contains(method) {
                return ("invalid_request", "code_challenge_method must be S256 or plain")
            }
        }
        return nil
    }

    /// Apple refuses redirect URIs that are IP addresses, `localhost`, carry a fragment, or are not HTTPS
    /// (unless ``EmulatorConfiguration/allowLoopbackRedirectURIs`` lets a development server on loopback through).
    func redirectURIProblem(_ uri: String) -> String? {
        guard let url = URLComponents(string: uri), let host = url.host, !host.isEmpty else { return "redirect_uri is not a URL" }
        if configuration.allowLoopbackRedirectURIs, url.scheme == "http", ["127.0.0.1", "localhost", "::1"].contains(host), url.fragment == nil {
            return nil
        }
        guard url.scheme == "https" || (configuration.allowHTTPRedirectURIs && url.scheme == "http") else { return "redirect_uri must use HTTPS" }
        if host == "localhost" || host.hasSuffix(".localhost") { return "redirect_uri cannot be localhost" }
        let isIPv4 = host.split(separator: ".").count == 4 && host.split(separator: ".").allSatisfy { UInt8($0) != nil }
        if isIPv4 || host.contains(":") || host.hasPrefix("[") { return "redirect_uri cannot be an IP address" }
        if url.fragment != nil { return "redirect_uri cannot contain a fragment" }
        return nil
    }

    func authorizePage(_ parameters: [String: String], provider: Provider, action: String) async -> Response {
        if let (error, detail) = await validateAuthorizeRequest(parameters, provider: provider) {
            await state.record(
                RequestRecord(
                    time: await state.now, method: "GET", endpoint: action, clientId: parameters["client_id"], status: 400, error: error, detail: detail))
            return HTTPAnswer.json(["error": error], status: .badRequest)
        }
        await state.record(RequestRecord(time: await state.now, method: "GET", endpoint: action, clientId: parameters["client_id"], status: 200))
        let hint = parameters["login_hint"] ?? ""
        return HTTPAnswer.html(ConsentPage.render(parameters: parameters, provider: provider, action: action, suggestedEmail: hint))
    }

    /// The user pressed Continue or Cancel on the Apple page.
    func authorizeDecision(_ form: [String: String]) async -> Response {
        if let (error, _) = await validateAuthorizeRequest(form, provider: .apple) { return HTTPAnswer.json(["error": error], status: .badRequest) }
        let redirectURI = form["redirect_uri"]!
        let mode = form["response_mode"] ?? "query"
        var answer: [(String, String)] = []
        if form["action"] != "continue" {
            answer.append(("error", "user_cancelled_authorize"))
        } else {
            let scopes = Set((form["scope"] ?? "").split(separator: " ").map(String.init)).subtracting(["openid"])
            let user = await findOrCreateUser(form)
            do throws(AppleOAuthError) {
                let signIn = try await state.signIn(
                    userID: user.id, clientID: form["client_id"]!, redirectURI: redirectURI, nonce: form["nonce"], scopes: scopes, native: false)
                answer.append(("code", signIn.code))
                if (form["response_type"] ?? "").contains("id_token") { answer.append(("id_token", signIn.identityToken)) }
                if let shared = signIn.user, let json = try? JSONEncoder.sorted.encode(shared) {
                    answer.append(("user", String(decoding: json, as: UTF8.self)))
                }
            } catch {
                return HTTPAnswer.json(["error": error.code], status: .badRequest)
            }
        }
        if let state = form["state"] { answer.append(("state", state)) }
        return deliver(answer, to: redirectURI, mode: mode)
    }

    func findOrCreateUser(_ form: [String: String]) async -> UserRecord {
        let email = (form["email"] ?? "").trimmingCharacters(in: .whitespaces)
        if !email.isEmpty, let existing = await state.user(byEmail: email) { return existing }
        return await state.createUser(
            email: email.isEmpty ? nil : email,
            hideMyEmail: form["hide_my_email"] == "on" || form["hide_my_email"] == "true",
            realUserStatus: 1,
            givenName: form["given_name"].flatMap { $0.isEmpty ? nil : $0 },
            familyName: form["family_name"].flatMap { $0.isEmpty ? nil : $0 }
        )
    }

    /// Returns the authorization response by query, fragment or form_post.
    func deliver(_ answer: [(String, String)], to redirectURI: String, mode: String) -> Response {
        if mode == "form_post" { return HTTPAnswer.html(ConsentPage.formPost(answer, to: redirectURI)) }
        let encoded = answer.map { "\(formEscape($0.0))=\(formEscape($0.1))" }.joined(separator: "&")
        if mode == "fragment" { return HTTPAnswer.redirect(redirectURI + "#" + encoded) }
        return HTTPAnswer.redirect(redirectURI + (redirectURI.contains("?") ? "&" : "?") + encoded)
    }
}

struct AppleDiscovery: Encodable {
    let issuer, authorization_endpoint, token_endpoint, revocation_endpoint, jwks_uri: String
    let response_types_supported, response_modes_supported, subject_types_supported, id_token_signing_alg_values_supported: [String]
    let scopes_supported, token_endpoint_auth_methods_supported, claims_supported: [String]
}

private let formAllowed: CharacterSet = {
    var set = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    set.insert(charactersIn: "-._~")
    return set
}()

func formEscape(_ value: String) -> String { value.addingPercentEncoding(withAllowedCharacters: formAllowed) ?? "" }
