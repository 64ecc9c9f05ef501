import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// The browser flow through HTTP: `/oauth2/authorize` → the emulator's consent page → `/oauth2/callback/{provider}`
/// → the app's redirect URI → `/oauth2/token`, and every way it must refuse.
@Suite("Server: the browser flow (OAuth 2.1 authorization server)")
struct BrowserFlowTests {
    static let issuer = "https://latchkey.test"
    static let app = "com.example.web"
    static let appRedirect = "https://web.example.com/callback"
    static let confidential = "com.example.backend"
    static let confidentialSecret = "backend-secret-0123456789"

    /// A server whose issuer is ``issuer`` (the emulator answers there; the test carries the answer to the real
    /// port), with a public and a confidential client.
    static func with(configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (ServerHarness) async throws -> Void) async throws {
        var emulator = EmulatorHarness.configuration()
        let callbacks = EmulatedProvider.all.map { issuer + "/oauth2/callback/" + $0.name }
        emulator.addApp(clientID: Fixtures.servicesID, teamID: Fixtures.teamID, redirectURIs: [EmulatorHarness.redirectURI] + callbacks)
        emulator.addClientEverywhere(EmulatorHarness.providerClientID, redirectURIs: [EmulatorHarness.redirectURI] + callbacks)
        try await ServerHarness.with(
            configure: { configuration in
                configuration.publicURL = issuer
                configuration.clients = [
                    OAuthClient(clientID: app, redirectURIs: [appRedirect, "http://127.0.0.1/callback", "com.example.web:/oauth2redirect"]),
                    OAuthClient(
                        clientID: confidential, redirectURIs: ["https://backend.example.com/cb"], providers: ["google"], kind: .confidential,
                        secret: confidentialSecret),
                ]
                configure(&configuration)
            }, emulator: emulator, body)
    }

    struct AppRequest {
        var clientID = BrowserFlowTests.app
        var redirectURI = BrowserFlowTests.appRedirect
        var verifier = PKCE.makeVerifier()
        var state = "app-state-\(UUID().uuidString.prefix(8))"
        var provider: String? = "google"
        var extra: [(String, String)] = []

        var query: [(String, String)] {
            var fields = [
                ("response_type", "code"), ("client_id", clientID), ("redirect_uri", redirectURI), ("code_challenge", PKCE.challenge(for: verifier)),
                ("code_challenge_method", "S256"), ("state", state),
            ]
            if let provider { fields.append(("provider", provider)) }
            return fields + extra
        }
    }

    /// What the user does at the provider's page.
    struct Consent {
        var email = "u-\(UUID().uuidString.prefix(8))@example.com"
        var givenName = ""
        var familyName = ""
        var cancel = false
    }

    /// The query or form of an answer, by name (last wins).
    static func fields(of url: String) -> [String: String] {
        Dictionary((URLComponents(string: url)?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
    }

    /// Runs the request to the point where the server sends the browser back to the app; returns that answer.
    static func run(_ harness: ServerHarness, _ request: AppRequest, _ consent: Consent = Consent(), tamper: (inout [String: String]) -> Void = { _ in })
        async throws -> ServerHarness.Answer
    {
        let start = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(request.query))
        guard start.status == 303, let location = start.headers["location"], location.hasPrefix(harness.emulator.emulator.baseURL) else { return start }
        var page = fields(of: location)
        page["email"] = consent.email
        page["given_name"] = consent.givenName
        page["family_name"] = consent.familyName
        page["action"] = consent.cancel ? "cancel" : "continue"
        let path = String(location.dropFirst(harness.emulator.emulator.baseURL.count).prefix { $0 != "?" })
        let decision = try await harness.emulator.send("POST", path, form: page.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        if let back = decision.headers["location"] {
            #expect(back.hasPrefix(issuer + "/oauth2/callback/"), "\(back)")
            var answer = fields(of: back)
            tamper(&answer)
            let callback = String(back.dropFirst(issuer.count).prefix { $0 != "?" })
            return try await harness.send("GET", callback + "?" + formURLEncoded(answer.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }))
        }
        // form_post (Apple): the page's hidden fields go to the callback as a cross-site POST, with no cookie.
        let html = decision.text
        let action = try #require(html.firstMatch(of: /action="([^"]+)"/)?.1).replacingOccurrences(of: "&amp;", with: "&")
        var answer: [String: String] = [:]
        for match in html.matches(of: /name="([^"]+)" value="([^"]*)"/) {
            answer[String(match.1)] = String(match.2).replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&amp;", with: "&")
        }
        tamper(&answer)
        #expect(action.hasPrefix(issuer + "/oauth2/callback/apple"))
        return try await harness.send(
            "POST", String(action.dropFirst(issuer.count)), body: formURLEncoded(answer.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }),
            contentType: "application/x-www-form-urlencoded")
    }

    /// The code in the server's redirect to the app, after checking `state` and `iss` came back.
    static func code(_ answer: ServerHarness.Answer, _ request: AppRequest, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        #expect(answer.status == 303, "\(answer.status) \(answer.text)", sourceLocation: sourceLocation)
        let location = try #require(answer.headers["location"], sourceLocation: sourceLocation)
        #expect(location.hasPrefix(request.redirectURI + "?"), sourceLocation: sourceLocation)
        let back = fields(of: location)
        #expect(back["state"] == request.state, sourceLocation: sourceLocation)
        #expect(back["iss"] == issuer, sourceLocation: sourceLocation)
        return try #require(back["code"], "\(location)", sourceLocation: sourceLocation)
    }

    static func token(_ harness: ServerHarness, _ fields: [(String, String)], headers: [(String, String)] = []) async throws -> ServerHarness.Answer {
        try await harness.send("POST", "/oauth2/token", body: formURLEncoded(fields), contentType: "application/x-www-form-urlencoded", headers: headers)
    }

    static func redeem(_ harness: ServerHarness, _ code: String, _ request: AppRequest, verifier: String? = nil) async throws -> ServerHarness.Answer {
        try await token(
            harness,
            [
                ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", request.redirectURI), ("client_id", request.clientID),
                ("code_verifier", verifier ?? request.verifier),
            ])
    }

    // MARK: - Every provider

    /// A new user signs in through the browser at `provider`: the code redeems once for RFC 6749 tokens that work, and
    /// the session is the app's, begun through that provider. ``ProviderContractTests`` runs it for every module.
    static func expectSignsIn(_ harness: ServerHarness, provider: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let request = AppRequest(provider: provider)
        let code = try Self.code(
            try await Self.run(harness, request, Consent(givenName: "Ada", familyName: "Lovelace")), request, sourceLocation: sourceLocation)
        let answer = try await Self.redeem(harness, code, request)
        #expect(answer.status == 200, "\(provider): \(answer.text)", sourceLocation: sourceLocation)
        #expect(answer.headers["cache-control"] == "no-store", sourceLocation: sourceLocation)
        #expect(answer.headers["pragma"] == "no-cache", sourceLocation: sourceLocation)
        #expect(answer.json["token_type"] as? String == "Bearer", sourceLocation: sourceLocation)
        #expect(answer.json["expires_in"] as? Int == 600, sourceLocation: sourceLocation)
        let access = try #require(answer.json["access_token"] as? String, sourceLocation: sourceLocation)
        #expect((answer.json["refresh_token"] as? String)?.hasPrefix("lkr_") == true, sourceLocation: sourceLocation)
        let me = try await harness.send("GET", "/v1/me", bearer: access)
        #expect(me.status == 200, "\(me.text)", sourceLocation: sourceLocation)
        let user = try me.decode(UserResponse.self)
        #expect(user.identities.map(\.provider) == [provider], sourceLocation: sourceLocation)
        let sessions = try await harness.store.sessions(userID: user.id)
        #expect(sessions.map(\.clientID) == [Self.app], sourceLocation: sourceLocation)
        let audit = try await harness.store.auditEvents(userID: user.id, limit: 10).map(\.kind)
        #expect(audit.contains("user_created") && audit.contains("signed_in"), "\(audit)", sourceLocation: sourceLocation)

        #expect(try await Self.redeem(harness, code, request).error == "invalid_grant", "a code redeems once", sourceLocation: sourceLocation)
    }

    @Test("a generic OpenID Connect provider (oidc.providers) signs in through the browser like a module's")
    func genericProvider() async throws {
        try await Self.with { harness in try await Self.expectSignsIn(harness, provider: "oidc") }
    }

    @Test("the user is found as the native endpoints find them: a browser sign-in after a native one is the same user")
    func sameUserAsNative() async throws {
        try await Self.with { harness in
            let email = "same-\(UUID().uuidString.prefix(6))@example.com"
            let native = try await harness.googleSignIn(email: email)
            #expect(native.status == 200, "\(native.text)")
            let request = AppRequest()
            let code = try Self.code(try await Self.run(harness, request, Consent(email: email)), request)
            let tokens = try await Self.redeem(harness, code, request)
            let me = try await harness.send("GET", "/v1/me", bearer: try #require(tokens.json["access_token"] as? String))
            #expect(try me.decode(UserResponse.self).id == (try native.decode(SignInResponse.self)).user.id)
        }
    }

    // MARK: - Apple on the web

    @Test("Apple's form_post: the name arrives once, in `user`; a second authorization without it keeps the first name")
    func appleNameOnce() async throws {
        try await Self.with { harness in
            let email = "ada-\(UUID().uuidString.prefix(6))@example.com"
            let first = AppRequest(provider: "apple")
            let firstCode = try Self.code(try await Self.run(harness, first, Consent(email: email, givenName: "Ada", familyName: "Lovelace")), first)
            let firstTokens = try await Self.redeem(harness, firstCode, first)
            let created = try await harness.send("GET", "/v1/me", bearer: try #require(firstTokens.json["access_token"] as? String)).decode(UserResponse.self)
            #expect(created.givenName == "Ada")
            #expect(created.familyName == "Lovelace")
            var sawUser = true
            let second = AppRequest(provider: "apple")
            let answer = try await Self.run(harness, second, Consent(email: email, givenName: "Eve", familyName: "Mallory")) { fields in
                sawUser = fields["user"] != nil
            }
            #expect(!sawUser, "Apple sends `user` on the first authorization only")
            let tokens = try await Self.redeem(harness, try Self.code(answer, second), second)
            let again = try await harness.send("GET", "/v1/me", bearer: try #require(tokens.json["access_token"] as? String)).decode(UserResponse.self)
            #expect(again.id == created.id)
            #expect(again.givenName == "Ada")
            #expect(again.familyName == "Lovelace")
        }
    }

    @Test("a forged form_post whose ID token has another nonce is refused; the app hears access_denied")
    func appleWrongNonce() async throws {
        try await Self.with { harness in
            let other = try await harness.emulator.nativeSignIn(sub: try await harness.emulator.createUser(email: "x@example.com"), nonce: sha256Hex("other"))
            let request = AppRequest(provider: "apple")
            let answer = try await Self.run(harness, request) { fields in fields["id_token"] = other.identityToken }
            let back = Self.fields(of: try #require(answer.headers["location"]))
            #expect(back["error"] == "access_denied")
            #expect(back["error_description"]?.contains("nonce") == true, "\(back)")
            #expect(back["state"] == request.state)
        }
    }

    // MARK: - Refusals at the authorization endpoint

    @Test("PKCE is mandatory and S256 only: missing, plain or malformed challenges go back to the app as invalid_request")
    func pkceRequired() async throws {
        try await Self.with { harness in
            var request = AppRequest()
            for (drop, method, challenge) in [
                ("code_challenge", "S256", nil), ("code_challenge_method", "S256", nil), ("", "plain", nil), ("", "S256", "too-short"),
            ] as [(String, String, String?)] {
                let query = request.query.filter { $0.0 != drop }.map { field -> (String, String) in
                    if field.0 == "code_challenge_method" { return (field.0, method) }
                    if field.0 == "code_challenge", let challenge { return (field.0, challenge) }
                    return field
                }
                let answer = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(query))
                #expect(answer.status == 303, "\(drop) \(method)")
                let back = Self.fields(of: answer.headers["location"] ?? "")
                #expect(back["error"] == "invalid_request", "\(drop) \(method): \(back)")
                #expect(back["state"] == request.state)
                #expect(back["iss"] == Self.issuer)
            }
            request.extra = []
            let noState = request.query.filter { $0.0 != "state" }
            let answer = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(noState))
            #expect(Self.fields(of: answer.headers["location"] ?? "")["error"] == "invalid_request")
        }
    }

    @Test("an unknown client or an unregistered redirect URI is shown on a page, never redirected")
    func untrustedRedirectShown() async throws {
        try await Self.with { harness in
            for request in [
                AppRequest(redirectURI: "https://evil.example/callback"), AppRequest(redirectURI: Self.appRedirect + "/more"),
                AppRequest(redirectURI: "https://web.example.com/callback#x"), AppRequest(clientID: "com.example.unknown"),
                AppRequest(redirectURI: "http://evil.example:80/callback"),
            ] {
                let answer = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(request.query))
                #expect(answer.status == 400, "\(request.redirectURI)")
                #expect(answer.headers["location"] == nil)
                #expect(answer.headers["content-type"]?.hasPrefix("text/html") == true)
                #expect(answer.headers["x-frame-options"] == "DENY")
                #expect(answer.headers["content-security-policy"]?.contains("frame-ancestors 'none'") == true)
            }
            let twice = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(AppRequest().query + [("client_id", Self.app)]))
            #expect(twice.status == 400)
            #expect(twice.headers["location"] == nil)
        }
    }

    @Test("a loopback redirect URI matches any port (RFC 8252), a custom scheme exactly")
    func nativeRedirects() async throws {
        try await Self.with { harness in
            for uri in ["http://127.0.0.1:53121/callback", "http://127.0.0.1/callback", "com.example.web:/oauth2redirect"] {
                let request = AppRequest(redirectURI: uri)
                let code = try Self.code(try await Self.run(harness, request), request)
                #expect(try await Self.redeem(harness, code, request).status == 200)
            }
            for uri in ["http://127.0.0.1:53121/other", "com.example.web:/other", "http://127.0.0.2:53121/callback"] {
                let answer = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(AppRequest(redirectURI: uri).query))
                #expect(answer.status == 400, "\(uri)")
            }
        }
    }

    @Test("without provider the chooser lists the client's providers as links; an unknown or disallowed provider goes back as invalid_request")
    func chooser() async throws {
        try await Self.with { harness in
            let page = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(AppRequest(provider: nil).query))
            #expect(page.status == 200)
            #expect(page.headers["x-frame-options"] == "DENY")
            let browserProviders = harness.server.providers.all.filter(\.signsInWithBrowser).map(\.name)
            #expect(browserProviders.count > 1)
            for name in browserProviders { #expect(page.text.contains("provider=\(name)\""), "\(name)") }
            #expect(!page.text.contains("provider=facebook"), "Facebook has no browser sign-in here")
            let backend = AppRequest(clientID: Self.confidential, redirectURI: "https://backend.example.com/cb", provider: nil)
            let limited = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(backend.query))
            #expect(limited.text.contains("provider=google\""))
            #expect(!limited.text.contains("provider=apple\""))
            for (request, provider) in [(AppRequest(provider: "myspace"), "myspace"), (AppRequest(provider: "facebook"), "facebook")] {
                let answer = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(request.query))
                #expect(Self.fields(of: answer.headers["location"] ?? "")["error"] == "invalid_request", "\(provider)")
            }
            var notAllowed = backend
            notAllowed.provider = "apple"
            let refused = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(notAllowed.query))
            #expect(Self.fields(of: refused.headers["location"] ?? "")["error"] == "invalid_request")
        }
    }

    // MARK: - Refusals at the callback

    @Test("a callback with an unknown state is shown, not redirected; a second callback with the same state too")
    func stateMismatch() async throws {
        try await Self.with { harness in
            let bogus = try await harness.send("GET", "/oauth2/callback/google?state=bogus&code=x")
            #expect(bogus.status == 400)
            #expect(bogus.headers["location"] == nil)
            #expect(bogus.text.contains("state mismatch"))
            let missing = try await harness.send("GET", "/oauth2/callback/google?code=x")
            #expect(missing.status == 400)
            let twice = try await harness.send("GET", "/oauth2/callback/apple?state=a&state=b")
            #expect(twice.status == 400)
            #expect(twice.headers["content-type"]?.hasPrefix("text/html") == true, "a callback's errors are pages, as documented")
            var replayed: [String: String] = [:]
            let request = AppRequest()
            _ = try Self.code(try await Self.run(harness, request) { replayed = $0 }, request)
            let again = try await harness.send("GET", "/oauth2/callback/google?" + formURLEncoded(replayed.map { ($0.key, $0.value) }))
            #expect(again.status == 400)
            #expect(again.headers["location"] == nil)
        }
    }

    @Test("the state of one provider's flow at another provider's callback is refused")
    func callbackOfAnotherProvider() async throws {
        try await Self.with { harness in
            let request = AppRequest(provider: "google")
            let start = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(request.query))
            let location = try #require(start.headers["location"])
            let state = try #require(Self.fields(of: location)["state"])
            let answer = try await harness.send("GET", "/oauth2/callback/microsoft?" + formURLEncoded([("state", state), ("code", "x")]))
            #expect(answer.status == 400)
            #expect(answer.headers["location"] == nil)
        }
    }

    @Test("the user cancelling at the provider, or the provider's error, reaches the app as access_denied with its state")
    func providerError() async throws {
        try await Self.with { harness in
            for provider in ["apple", "google", "dropbox"] {
                let request = AppRequest(provider: provider)
                let answer = try await Self.run(harness, request, Consent(cancel: true))
                #expect(answer.status == 303, "\(provider)")
                let back = Self.fields(of: try #require(answer.headers["location"]))
                #expect(back["error"] == "access_denied", "\(provider)")
                #expect(back["state"] == request.state)
                #expect(back["code"] == nil)
            }
            let request = AppRequest()
            let answer = try await Self.run(harness, request) { fields in
                fields["code"] = nil
                fields["error"] = "server_error"
            }
            #expect(Self.fields(of: try #require(answer.headers["location"]))["error"] == "access_denied")
        }
    }

    @Test("a provider code that does not redeem (tampered) reaches the app as access_denied")
    func tamperedProviderCode() async throws {
        try await Self.with { harness in
            let request = AppRequest()
            let answer = try await Self.run(harness, request) { $0["code"] = "not-a-code" }
            let back = Self.fields(of: try #require(answer.headers["location"]))
            #expect(back["error"] == "access_denied", "\(back)")
            #expect(back["state"] == request.state)
        }
    }

    @Test("a sign-in that took longer than 10 minutes is not finished; the app hears access_denied")
    func expiredFlow() async throws {
        try await Self.with { harness in
            let request = AppRequest()
            let answer = try await Self.run(harness, request) { _ in harness.clock.advance(AuthorizationCodeFlow.flowLifetime + 1) }
            let back = Self.fields(of: try #require(answer.headers["location"]))
            #expect(back["error"] == "access_denied")
            #expect(back["error_description"]?.contains("10 minutes") == true)
            #expect(back["state"] == request.state)
        }
    }

    @Test("invite-only sign-up applies to the browser flow: a new user needs invite_code")
    func inviteOnly() async throws {
        try await Self.with(configure: { $0.signUp = .invite }) { harness in
            let refused = try await Self.run(harness, AppRequest())
            let back = Self.fields(of: try #require(refused.headers["location"]))
            #expect(back["error"] == "access_denied")
            #expect(back["error_description"]?.contains("invit") == true, "\(back)")
            let (_, code) = try await harness.server.sessions.administration.createInvite(by: .cli)
            let request = AppRequest(extra: [("invite_code", code)])
            #expect(try await Self.redeem(harness, try Self.code(try await Self.run(harness, request), request), request).status == 200)
        }
    }

    // MARK: - The token endpoint

    @Test("a wrong verifier, another redirect URI or another client get invalid_grant; the code is then spent")
    func redeemRefusals() async throws {
        try await Self.with { harness in
            let request = AppRequest()
            let wrongVerifier = try await Self.redeem(
                harness, try Self.code(try await Self.run(harness, request), request), request, verifier: PKCE.makeVerifier())
            #expect(wrongVerifier.status == 400)
            #expect(wrongVerifier.error == "invalid_grant")
            #expect(wrongVerifier.headers["cache-control"] == "no-store")

            let second = AppRequest()
            let code = try Self.code(try await Self.run(harness, second), second)
            var elsewhere = second
            elsewhere.redirectURI = "com.example.web:/oauth2redirect"
            #expect(try await Self.redeem(harness, code, elsewhere).error == "invalid_grant")
            #expect(try await Self.redeem(harness, code, second).error == "invalid_grant", "a refused attempt spends the code")

            let third = AppRequest()
            let expired = try Self.code(try await Self.run(harness, third), third)
            harness.clock.advance(AuthorizationCodeFlow.codeLifetime + 1)
            let late = try await Self.redeem(harness, expired, third)
            #expect(late.error == "invalid_grant")
            #expect((late.json["error_description"] as? String)?.contains("expired") == true)

            #expect(try await Self.redeem(harness, "no-such-code", third).error == "invalid_grant")
            let missing = try await Self.token(harness, [("grant_type", "authorization_code"), ("code", expired), ("client_id", Self.app)])
            #expect(missing.status == 400)
            #expect(missing.error == "invalid_request")
        }
    }

    @Test("a replayed code is refused and ends the session the first redemption started (RFC 6749 §4.1.2)")
    func codeReplay() async throws {
        try await Self.with { harness in
            let request = AppRequest()
            let code = try Self.code(try await Self.run(harness, request), request)
            let first = try await Self.redeem(harness, code, request)
            let access = try #require(first.json["access_token"] as? String)
            let refresh = try #require(first.json["refresh_token"] as? String)
            #expect(try await harness.send("GET", "/v1/me", bearer: access).status == 200)
            let replay = try await Self.redeem(harness, code, request)
            #expect(replay.status == 400)
            #expect(replay.error == "invalid_grant")
            #expect(try await harness.send("GET", "/v1/me", bearer: access).status == 401)
            let refreshed = try await Self.token(harness, [("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", Self.app)])
            #expect(refreshed.error == "invalid_grant")
            // The revocation is audited with it, once: a second replay finds the session ended already.
            _ = try await Self.redeem(harness, code, request)
            let audits = try await harness.store.auditEvents(userID: nil, limit: 100).filter { $0.detail.contains("authorization_code_replayed") }
            #expect(audits.map(\.kind) == ["session_revoked"])
        }
    }

    @Test("refresh_token rotates in RFC 6749's shape and only for the client the session belongs to")
    func refreshGrant() async throws {
        try await Self.with { harness in
            let request = AppRequest()
            let tokens = try await Self.redeem(harness, try Self.code(try await Self.run(harness, request), request), request)
            let refresh = try #require(tokens.json["refresh_token"] as? String)
            let other = try await Self.token(
                harness,
                [("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", Self.confidential), ("client_secret", Self.confidentialSecret)])
            #expect(other.error == "invalid_grant")
            let rotated = try await Self.token(harness, [("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", Self.app)])
            #expect(rotated.status == 200, "\(rotated.text)")
            #expect(rotated.json["token_type"] as? String == "Bearer")
            #expect(rotated.json["refresh_token"] as? String != refresh)
            let native = try await harness.signedIn()
            let nativeRefresh = try await Self.token(
                harness, [("grant_type", "refresh_token"), ("refresh_token", native.tokens.refreshToken), ("client_id", Self.app)])
            #expect(nativeRefresh.error == "invalid_grant", "a native session is not this client's")
            let unsupported = try await Self.token(harness, [("grant_type", "password"), ("client_id", Self.app)])
            #expect(unsupported.error == "unsupported_grant_type")
            let json = try await harness.send("POST", "/oauth2/token", body: #"{"grant_type":"refresh_token"}"#)
            #expect(json.error == "invalid_request")
        }
    }

    @Test("client authentication: unknown clients, wrong secrets and secrets from public clients are invalid_client (401)")
    func clientAuthentication() async throws {
        try await Self.with { harness in
            let basic = { (id: String, secret: String) in [("Authorization", "Basic " + Data("\(id):\(secret)".utf8).base64EncodedString())] }
            let refreshFields = [("grant_type", "refresh_token"), ("refresh_token", "lkr_unknown")]
            let wrongBasic = try await Self.token(harness, refreshFields, headers: basic(Self.confidential, "wrong-secret-000000"))
            #expect(wrongBasic.status == 401)
            #expect(wrongBasic.error == "invalid_client")
            #expect(wrongBasic.headers["www-authenticate"]?.hasPrefix("Basic") == true)
            let goodBasic = try await Self.token(harness, refreshFields, headers: basic(Self.confidential, Self.confidentialSecret))
            #expect(goodBasic.error == "invalid_grant", "authenticated; the token itself is unknown")
            for fields in [
                [("client_id", "com.example.unknown")], [("client_id", Self.confidential), ("client_secret", "wrong-secret-000000")],
                [("client_id", Self.confidential)], [("client_id", Self.app), ("client_secret", "anything")], [],
            ] {
                let answer = try await Self.token(harness, refreshFields + fields)
                #expect(answer.status == 401, "\(fields)")
                #expect(answer.error == "invalid_client", "\(fields)")
            }
            let post = try await Self.token(harness, refreshFields + [("client_id", Self.confidential), ("client_secret", Self.confidentialSecret)])
            #expect(post.error == "invalid_grant")
            let both = try await Self.token(
                harness, refreshFields + [("client_secret", Self.confidentialSecret)], headers: basic(Self.confidential, Self.confidentialSecret))
            #expect(both.error == "invalid_request")
        }
    }

    @Test("a confidential client signs in with client_secret_basic")
    func confidentialClient() async throws {
        try await Self.with { harness in
            let request = AppRequest(clientID: Self.confidential, redirectURI: "https://backend.example.com/cb")
            let code = try Self.code(try await Self.run(harness, request), request)
            let answer = try await Self.token(
                harness,
                [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", request.redirectURI), ("code_verifier", request.verifier)],
                headers: [("Authorization", "Basic " + Data("\(Self.confidential):\(Self.confidentialSecret)".utf8).base64EncodedString())])
            #expect(answer.status == 200, "\(answer.text)")
            let refresh = try #require(answer.json["refresh_token"] as? String)
            let native = try await harness.send(
                "POST", "/v1/token", body: formURLEncoded([("grant_type", "refresh_token"), ("refresh_token", refresh)]),
                contentType: "application/x-www-form-urlencoded")
            #expect(native.status == 400)
            #expect(native.error == "invalid_grant", "without the client's secret, its refresh token is refused")
            let rotated = try await Self.token(
                harness,
                [("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", Self.confidential), ("client_secret", Self.confidentialSecret)])
            #expect(rotated.status == 200, "\(rotated.text)")
        }
    }

    @Test("revocation (RFC 7009): a refresh or access token ends its session; unknown and other clients' tokens still get 200")
    func revoke() async throws {
        try await Self.with { harness in
            func revoke(_ token: String, client: [(String, String)] = [("client_id", Self.app)]) async throws -> ServerHarness.Answer {
                try await harness.send(
                    "POST", "/oauth2/revoke", body: formURLEncoded([("token", token)] + client), contentType: "application/x-www-form-urlencoded")
            }
            let request = AppRequest()
            let tokens = try await Self.redeem(harness, try Self.code(try await Self.run(harness, request), request), request)
            let access = try #require(tokens.json["access_token"] as? String)
            let refresh = try #require(tokens.json["refresh_token"] as? String)
            #expect(try await revoke("lkr_unknown").status == 200)
            #expect(try await revoke("not even a token").status == 200)
            #expect(try await revoke(refresh, client: [("client_id", Self.confidential), ("client_secret", Self.confidentialSecret)]).status == 200)
            #expect(try await harness.send("GET", "/v1/me", bearer: access).status == 200, "another client cannot revoke this session")
            #expect(try await revoke(refresh).status == 200)
            #expect(try await harness.send("GET", "/v1/me", bearer: access).status == 401)

            let second = AppRequest()
            let more = try await Self.redeem(harness, try Self.code(try await Self.run(harness, second), second), second)
            let secondAccess = try #require(more.json["access_token"] as? String)
            #expect(try await revoke(secondAccess).status == 200)
            #expect(try await harness.send("GET", "/v1/me", bearer: secondAccess).status == 401)
            #expect(try await revoke(refresh, client: [("client_id", "com.example.unknown")]).status == 401)
            let noToken = try await harness.send("POST", "/oauth2/revoke", body: "client_id=\(Self.app)", contentType: "application/x-www-form-urlencoded")
            #expect(noToken.error == "invalid_request")
        }
    }

    // MARK: - Metadata

    @Test("both metadata documents describe exactly these endpoints, S256 only")
    func metadata() async throws {
        try await Self.with { harness in
            let rfc8414 = try await harness.send("GET", "/.well-known/oauth-authorization-server")
            let oidc = try await harness.send("GET", "/.well-known/openid-configuration")
            #expect(rfc8414.text == oidc.text)
            let document = rfc8414.json
            #expect(document["issuer"] as? String == Self.issuer)
            #expect(document["authorization_endpoint"] as? String == Self.issuer + "/oauth2/authorize")
            #expect(document["token_endpoint"] as? String == Self.issuer + "/oauth2/token")
            #expect(document["revocation_endpoint"] as? String == Self.issuer + "/oauth2/revoke")
            #expect(document["jwks_uri"] as? String == Self.issuer + "/.well-known/jwks.json")
            #expect(document["code_challenge_methods_supported"] as? [String] == ["S256"])
            #expect(document["response_types_supported"] as? [String] == ["code"])
            #expect(document["grant_types_supported"] as? [String] == ["authorization_code", "refresh_token"])
            #expect(document["authorization_response_iss_parameter_supported"] as? Bool == true)
        }
    }

    @Test("the demo page is served only when turned on (serve --dev)")
    func demoPage() async throws {
        try await Self.with { harness in
            let root = try await harness.send("GET", "/")
            #expect(root.status == 404)
        }
        try await Self.with(configure: { $0.servesDemoPage = true }) { harness in
            let page = try await harness.send("GET", "/")
            #expect(page.status == 200)
            #expect(page.text.contains(#"data-provider="apple""#))
            #expect(page.text.contains(#"data-client-id="com.example.web""#))
            #expect(page.headers["content-security-policy"]?.contains("script-src 'self'") == true)
            #expect(try await harness.send("GET", "/demo.js").text.contains("/oauth2/token"))
        }
    }

    // MARK: - Configuration

    @Test("clients[] is validated: redirect URIs, secrets and providers name what is wrong")
    func clientValidation() throws {
        func problem(_ client: OAuthClient) -> String? {
            var configuration = ServerConfiguration()
            configuration.clients = [client]
            do {
                try configuration.validate()
                return nil
            } catch {
                return error.reason
            }
        }
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["https://a.example/cb", "com.example.a:/cb", "http://127.0.0.1/cb"])) == nil)
        #expect(
            problem(OAuthClient(clientID: "a", redirectURIs: [])) == "setting clients[0].redirectUris is empty; list the exact URIs the app receives codes at")
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["http://a.example/cb"]))?.contains("plain http is allowed only on loopback") == true)
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["http://127.0.0.1:65536/cb"]))?.contains("its port is not a port") == true)
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["https://a.example/cb#frag"]))?.contains("fragment") == true)
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["javascript:alert(1)"]))?.contains("javascript") == true)
        #expect(
            problem(OAuthClient(clientID: "a", redirectURIs: ["myapp:/cb"])) == nil,
            "a private scheme without dots works, as serve --dev --client-id myapp needs")
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["/relative/cb"]))?.contains("not an absolute URI") == true)
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["https://a.example/cb"], kind: .confidential))?.contains("clientSecret") == true)
        #expect(problem(OAuthClient(clientID: "a", redirectURIs: ["https://a.example/cb"], providers: ["google"]))?.contains("not configured") == true)
    }
}
