import Configuration
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyStore
import LatchkeyTestSupport
import Testing

@testable import LatchkeyServer

@Suite("Server: HTTP contract", .timeLimit(.minutes(2)))
struct HTTPContractTests {
    /// Bad input of every kind gets a 4xx with an RFC 6749 error body, never a 5xx.
    static let malformed: [(String, String, String?, String, [(String, String)])] = [
        ("POST", "/v1/auth/apple", "not json", "application/json", []),
        ("POST", "/v1/auth/apple", #"{"identityToken": 5}"#, "application/json", []),
        ("POST", "/v1/auth/apple", #"{"identityToken": ""}"#, "application/json", []),
        ("POST", "/v1/auth/apple", #"{"identityToken": "a.b.c"}"#, "application/json", []),
        ("POST", "/v1/auth/apple", #"{"identityToken": "eyJhbGciOiJub25lIn0.e30."}"#, "application/json", []),
        ("POST", "/v1/auth/apple", nil, "application/json", []),
        ("POST", "/v1/token", "grant_type=password", "application/x-www-form-urlencoded", []),
        ("POST", "/v1/token", "refresh_token=lkr_x", "application/x-www-form-urlencoded", []),
        ("POST", "/v1/token", "grant_type=refresh_token", "application/x-www-form-urlencoded", []),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=%zz", "application/x-www-form-urlencoded", []),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=a&refresh_token=b", "application/x-www-form-urlencoded", []),
        (
            "POST", "/v1/token", "grant_type=refresh_token&refresh_token=lkr_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "application/x-www-form-urlencoded",
            []
        ),
        ("POST", "/v1/token", "{", "application/json", []),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=x", "text/plain", []),
        ("GET", "/v1/me", nil, "application/json", []),
        ("GET", "/v1/me", nil, "application/json", [("Authorization", "Basic dXNlcjpwYXNz")]),
        ("GET", "/v1/me", nil, "application/json", [("Authorization", "Bearer not-a-jwt")]),
        ("GET", "/v1/me", nil, "application/json", [("Authorization", "Bearer eyJhbGciOiJFUzI1NiIsImtpZCI6Ingifq.e30.c2ln")]),
        ("GET", "/v1/me/sessions", nil, "application/json", [("Authorization", "Bearer ")]),
        ("DELETE", "/v1/me", nil, "application/json", []),
        ("POST", "/v1/logout", nil, "application/json", []),
        ("POST", "/v1/apple/notifications", "[]", "application/json", []),
        ("POST", "/v1/apple/notifications", #"{"payload":"x.y.z"}"#, "application/json", []),
        ("GET", "/v1/nothing-here", nil, "application/json", []),
    ]

    @Test("malformed bodies, headers and tokens get a 4xx with an error body, without calling a provider", arguments: malformed)
    func malformedInput(method: String, path: String, body: String?, contentType: String, headers: [(String, String)]) async throws {
        try await RouterHarness.with { harness in
            let answer = try await harness.send(method, path, body: body, contentType: contentType, headers: headers)
            #expect((400..<500).contains(answer.status), "\(method) \(path): \(answer.status) \(answer.text)")
            #expect(answer.error != nil, "\(answer.text)")
            #expect(answer.json["error_description"] != nil)
            #expect(harness.providerCalls == 0)
        }
    }

    @Test("an ID token for another app is refused with the reason; so is an expired one and a wrong nonce")
    func identityTokenRefusals() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let wrongNonce = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("the-real-nonce"))
            let answer = try await harness.post("/v1/auth/apple", json: ["identityToken": wrongNonce.identityToken, "rawNonce": "another"])
            #expect(answer.status == 401)
            #expect(answer.error == "nonce_mismatch")
            let forged = try await harness.post("/v1/auth/apple", json: ["identityToken": Fixtures.appleKey.sign(claims: appleClaims())])
            #expect(forged.status == 401)
            // A replayed sign-in is refused before its code reaches Apple; another token cannot carry the code either (c_hash).
            let signIn = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("nonce-1"))
            let body: [String: any Sendable] = ["identityToken": signIn.identityToken, "rawNonce": "nonce-1", "authorizationCode": signIn.code]
            #expect(try await harness.post("/v1/auth/apple", json: body).status == 200)
            let replayed = try await harness.post("/v1/auth/apple", json: body)
            #expect(replayed.status == 401)
            #expect(replayed.error == "token_already_used")
            let other = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("nonce-2"))
            let foreignCode = try await harness.post(
                "/v1/auth/apple", json: ["identityToken": other.identityToken, "rawNonce": "nonce-2", "authorizationCode": signIn.code])
            #expect(foreignCode.status == 401)
            #expect(foreignCode.error == "code_hash_mismatch")
        }
    }

    @Test("an Apple code exchange answered without an id_token is refused: nothing proves the code is the same Apple ID's")
    func codeExchangeWithoutIDToken() async throws {
        try await ServerHarness.with(transport: WithoutIDToken()) { harness in
            let sub = try await harness.emulator.createUser()
            let answer = try await harness.signIn(sub: sub)
            #expect(answer.status == 502, "\(answer.text)")
            #expect(answer.error == "invalid_provider_response")
            #expect(try await harness.store.identity(provider: "apple", subject: sub) == nil)
            // Without a code there is no exchange to doubt.
            #expect(try await harness.signIn(sub: sub, withCode: false).status == 200)
        }
    }

    /// The network, except that Apple's token endpoint answers without its `id_token`.
    final class WithoutIDToken: HTTPTransport {
        private let network = AsyncHTTPClientTransport()
        func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
            var response = try await network.send(request)
            if request.url.hasSuffix("/auth/token"), var json = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] {
                json["id_token"] = nil
                response.body = Array((try? JSONSerialization.data(withJSONObject: json)) ?? Data())
            }
            return response
        }
    }

    @Test("request bodies are capped")
    func bodyCap() async throws {
        try await ServerHarness.with { harness in
            let big = String(repeating: "a", count: 40_000)
            let answer = try await harness.send("POST", "/v1/auth/apple", body: #"{"identityToken":"\#(big)"}"#)
            #expect(answer.status == 413)
            #expect(answer.error == "invalid_request")
        }
    }

    @Test("rate limits answer 429 with Retry-After")
    func rateLimits() async throws {
        try await ServerHarness.with(configure: { $0.rateLimit.perClientIP = 3 }) { harness in
            var statuses: [Int] = []
            for _ in 0..<5 { statuses.append(try await harness.refresh("lkr_x").status) }
            #expect(statuses.prefix(3).allSatisfy { $0 == 400 })
            let limited = try await harness.refresh("lkr_x")
            #expect(limited.status == 429)
            #expect(limited.error == "rate_limited")
            #expect(Int(limited.headers["retry-after"] ?? "") != nil)
            #expect(try await harness.send("GET", "/healthz").status == 200)
        }
    }

    @Test("every route that may call a provider is limited per address: linking, unlinking and account deletion too")
    func rateLimitsProviderRoutes() async throws {
        // The first sign-in spends one of the address's 4 requests; the one session then makes the rest.
        try await ServerHarness.with(configure: { $0.rateLimit.perClientIP = 4 }) { harness in
            let bearer = try await harness.signedIn().tokens.accessToken
            let link = { try await harness.send("POST", "/v1/me/identities/google", body: #"{"idToken":"x"}"#, bearer: bearer).status }
            #expect(try await link() != 429)
            #expect(try await harness.send("DELETE", "/v1/me/identities/google/someone", bearer: bearer).status != 429)
            #expect(try await harness.send("DELETE", "/v1/me", bearer: bearer).status != 429)
            for _ in 0..<3 { #expect(try await link() == 429) }
            #expect(try await harness.send("DELETE", "/v1/me/identities/google/someone", bearer: bearer).status == 429)
            #expect(try await harness.send("DELETE", "/v1/me", bearer: bearer).status == 429)
            // Reading what is stored calls no provider and is not limited.
            #expect(try await harness.send("GET", "/v1/me", bearer: bearer).status != 429)
        }
    }

    @Test("the per-address limit counts every spelling of a limited path the router serves")
    func rateLimitsPathSpellings() async throws {
        try await ServerHarness.with(configure: { $0.rateLimit.perClientIP = 3 }) { harness in
            let form = "grant_type=refresh_token&refresh_token=lkr_x"
            var statuses: [Int] = []
            for path in ["//v1/token", "/v1/token/", "/v1//token", "/v1/token"] {
                statuses.append(try await harness.send("POST", path, body: form, contentType: "application/x-www-form-urlencoded").status)
            }
            #expect(statuses == [400, 400, 400, 429])
            let authorize = try await harness.send("GET", "//oauth2/authorize")
            #expect(authorize.status == 429)
        }
    }

    @Test("path segments are percent-decoded; malformed escapes and control characters are invalid_request")
    func pathSegments() throws {
        #expect(try LatchkeyServer.decodedPathSegment("auth0%7C42%2Fa", name: "subject") == "auth0|42/a")
        #expect(try LatchkeyServer.decodedPathSegment("001234.abc", name: "subject") == "001234.abc")
        for raw in ["%C3", "%zz", "%", "a%00", "%7F"] {
            #expect(throws: APIError.self, "\(raw)") { try LatchkeyServer.decodedPathSegment(raw, name: "subject") }
        }
    }

    @Test("Apple's user JSON in the browser flow: a name with a control character is left out, a long one cut to 200")
    func browserFlowNames() throws {
        let long = String(repeating: "é", count: 300)
        let apple = try AppleModule(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8, clientIDs: [Fixtures.bundleID])
            .makeProvider(ProviderContext(transport: AsyncHTTPClientTransport(), timeSource: .system, observer: nil))
        let answer = ["user": #"{"name":{"firstName":"A\u0000","lastName":"\#(long)"}}"#]
        let names = try #require(LatchkeyServer.browserName(apple.browserName(answer)))
        #expect(names.givenName == nil)
        #expect(names.familyName == String(long.prefix(200)))
    }

    @Test("the OpenAPI document lists every route, and every listed route exists")
    func openAPI() async throws {
        try await RouterHarness.with { harness in
            let document = try await harness.send("GET", "/openapi.json").json
            #expect(document["openapi"] as? String == "3.1.0")
            let paths = try #require(document["paths"] as? [String: [String: Any]])
            // The admin API answers 404 to everything while no admin key exists.
            let (_, adminKey) = try await AdminKeys(store: harness.store).create(name: "routes", readOnly: true)
            for (method, path) in harness.server.routes {
                #expect(paths[path]?[method.lowercased()] != nil, "\(method) \(path) is missing from /openapi.json")
                let concrete = path.replacingOccurrences(of: "{id}", with: "x").replacingOccurrences(of: "{provider}", with: "apple")
                    .replacingOccurrences(of: "{subject}", with: "x")
                let answer = try await harness.send(method, concrete, headers: path.hasPrefix("/admin/") ? [("Authorization", "Bearer \(adminKey)")] : [])
                // Guests and App Attest are off by default, and then their routes answer 404 as an unconfigured provider does.
                #expect(
                    answer.error != "not_found" || path.contains("{id}") || path.contains("{subject}") || path == "/v1/auth/anonymous"
                        || path.contains("/email/") || path == "/v1/attest/challenge",
                    "\(method) \(path) is not served")
            }
            let documented = paths.flatMap { path, operations in operations.keys.map { "\($0.uppercased()) \(path)" } }
            #expect(Set(documented) == Set(harness.server.routes.map { "\($0.method) \($0.path)" }))
        }
    }

    @Test("health, readiness and Prometheus metrics")
    func operations() async throws {
        try await ServerHarness.with { harness in
            #expect(try await harness.send("GET", "/healthz").json["status"] as? String == "ok")
            #expect(try await harness.send("GET", "/readyz").json["status"] as? String == "ready")
            _ = try await harness.signedIn()
            _ = try await harness.refresh("lkr_x")
            let metrics = try await harness.send("GET", "/metrics").text
            #expect(
                metrics.contains(#"latchkey_sign_ins_total{provider="apple",outcome="new_user"} 1"#)
                    || metrics.contains(#"latchkey_sign_ins_total{outcome="new_user",provider="apple"} 1"#), "\(metrics)")
            #expect(metrics.contains("latchkey_refreshes_total"))
            #expect(metrics.contains("latchkey_provider_calls_total"))
            #expect(metrics.contains("latchkey_http_requests_total"))
        }
    }

    @Test("each counter counts every event of its own label and dimensions, however often it is reused")
    func countersAreKeptApart() {
        let metrics = ServerMetrics()
        for _ in 0..<3 { metrics.signIn(provider: "google", outcome: "ok") }
        metrics.signIn(provider: "google", outcome: "new_user")
        metrics.signIn(provider: "apple", outcome: "ok")
        metrics.refresh(outcome: "ok")
        metrics.refresh(outcome: "ok")
        let lines = Set(metrics.exposition().split(separator: "\n").map(String.init))
        #expect(lines.contains(#"latchkey_sign_ins_total{provider="google",outcome="ok"} 3"#), "\(lines)")
        #expect(lines.contains(#"latchkey_sign_ins_total{provider="google",outcome="new_user"} 1"#))
        #expect(lines.contains(#"latchkey_sign_ins_total{provider="apple",outcome="ok"} 1"#))
        #expect(lines.contains(#"latchkey_refreshes_total{outcome="ok"} 2"#))
    }

    @Test("readiness fails when the database is gone")
    func notReady() async throws {
        try await ServerHarness.with { harness in
            await harness.store.close()
            let answer = try await harness.send("GET", "/readyz")
            #expect(answer.status == 503)
        }
    }

    @Test("CORS: configured origins get headers on answers and errors alike; preflights are answered; others get none")
    func cors() async throws {
        try await RouterHarness.with(configure: { $0.corsAllowedOrigins = ["https://app.example.com", "https://admin.example.com"] }) { harness in
            let answer = try await harness.send("GET", "/healthz", headers: [("Origin", "https://admin.example.com")])
            #expect(answer.headers["access-control-allow-origin"] == "https://admin.example.com")
            let error = try await harness.send("GET", "/v1/me", headers: [("Origin", "https://app.example.com"), ("Authorization", "Bearer expired.or.bad")])
            #expect(error.status == 401)
            #expect(error.error == "invalid_token")
            #expect(error.headers["access-control-allow-origin"] == "https://app.example.com")
            let preflight = try await harness.send(
                "OPTIONS", "/v1/token", headers: [("Origin", "https://app.example.com"), ("Access-Control-Request-Method", "POST")])
            #expect(preflight.status == 204)
            #expect(preflight.headers["access-control-allow-methods"]?.contains("POST") == true)
            let foreign = try await harness.send("GET", "/healthz", headers: [("Origin", "https://evil.example")])
            #expect(foreign.headers["access-control-allow-origin"] == nil)
        }
    }

    @Test("a stolen identity token cannot be replayed by sending its own nonce claim as the raw nonce")
    func nonceReplay() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let hashed = sha256Hex("secret-raw-nonce")
            let signIn = try await harness.emulator.nativeSignIn(sub: sub, nonce: hashed)
            let replay = try await harness.post("/v1/auth/apple", json: ["identityToken": signIn.identityToken, "rawNonce": hashed])
            #expect(replay.status == 401)
            #expect(replay.error == "nonce_mismatch")
            #expect(try await harness.post("/v1/auth/apple", json: ["identityToken": signIn.identityToken, "rawNonce": "secret-raw-nonce"]).status == 200)
        }
    }

    @Test("web sign-ins redeem their code with the configured redirect URI; others are refused")
    func webSignIn() async throws {
        try await ServerHarness.with(configure: {
            $0.apple?.redirectURIs = [EmulatorHarness.redirectURI]; $0.apple?.nonceMatching = .verbatim
        }) { harness in
            let form: [(String, String)] = [
                ("client_id", Fixtures.servicesID), ("redirect_uri", EmulatorHarness.redirectURI), ("response_type", "code id_token"),
                ("response_mode", "form_post"), ("scope", "email"), ("nonce", "web-nonce"), ("email", "web@example.com"), ("action", "continue"),
            ]
            func field(_ name: String, _ html: String) -> String? {
                guard let range = html.range(of: #"name="\#(name)" value=""#) else { return nil }
                return String(html[range.upperBound...].prefix { $0 != "\"" })
            }
            let page = try await harness.emulator.send("POST", "/auth/authorize", form: form).text
            let code = try #require(field("code", page))
            let token = try #require(field("id_token", page))
            let refused = try await harness.post(
                "/v1/auth/apple", json: ["identityToken": token, "authorizationCode": code, "rawNonce": "web-nonce", "redirectUri": "https://evil.example/cb"])
            #expect(refused.status == 400)
            let answer = try await harness.post(
                "/v1/auth/apple",
                json: ["identityToken": token, "authorizationCode": code, "rawNonce": "web-nonce", "redirectUri": EmulatorHarness.redirectURI])
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try answer.decode(SignInResponse.self).user.email == "web@example.com")
        }
    }

    @Test("without Apple credentials sign-in answers 503, never 500")
    func unconfigured() async throws {
        try await RouterHarness.with(configure: { $0.apple = nil }) { harness in
            let answer = try await harness.send("POST", "/v1/auth/apple", body: #"{"identityToken":"x"}"#)
            #expect(answer.status == 503)
            #expect(answer.error == "temporarily_unavailable")
        }
    }
}

@Suite("Server: configuration")
struct ConfigurationTests {
    /// The configuration `serve` would read from these settings (dotted keys, string values).
    static func read(_ values: [String: String]) throws(LatchkeyError) -> ServerConfiguration {
        let provider = InMemoryProvider(
            values: Dictionary(
                uniqueKeysWithValues: values.map {
                    (AbsoluteConfigKey($0.key.split(separator: ".").map(String.init)), ConfigValue(.string($0.value), isSecret: false))
                }))
        return try ServerConfiguration(reading: ConfigReader(provider: provider))
    }

    func read(_ values: [String: String]) throws(LatchkeyError) -> ServerConfiguration { try Self.read(values) }

    @Test("defaults need nothing")
    func defaults() throws {
        let configuration = try read([:])
        #expect(configuration.mode == .development)
        #expect(configuration.database == .sqlite(path: "latchkey-data/latchkey.sqlite"))
        #expect(configuration.apple == nil)
    }

    @Test(
        "settings are read and validated, and errors name the setting",
        arguments: [
            (["port": "eighty"], "port"),
            (["port": "70000"], "port"),
            (["mode": "staging"], "mode"),
            (["mode": "production"], "apple"),
            (["accessToken.lifetime": "5"], "accessToken.lifetime"),
            (["database.maxWriteBatch": "0"], "database.maxWriteBatch"),
            (["database.maxWriteBatch": "10000"], "database.maxWriteBatch"),
            (["providers.validationWait": "120"], "providers.validationWait"),
            (["apple.validationWait": "120"], "providers.validationWait"),
            (["oidc.providers": "google", "oidc.google.issuer": "https://accounts.example.com"], "oidc.providers"),
            (["oidc.providers": "apple", "oidc.apple.issuer": "https://appleid.example.com"], "oidc.providers"),
            (["encryptionKey": "c2hvcnQ="], "encryption key"),
            (["database.url": "mysql://x"], "database.url"),
            (["apple.teamId": "TEAMID1234"], "apple.keyId"),
            (["apple.teamId": "TEAMID1234", "apple.keyId": "TESTKEY123", "apple.clientIds": "com.example.app"], "apple.privateKeyFile"),
            (
                ["apple.teamId": "TEAMID1234", "apple.keyId": "TESTKEY123", "apple.privateKeyFile": "/nonexistent.p8", "apple.clientIds": "a"],
                "apple.privateKeyFile"
            ),
            (["apple.teamId": "team", "apple.keyId": "TESTKEY123", "apple.privateKey": Fixtures.p8, "apple.clientIds": "a"], "apple.teamId"),
            (["apple.teamId": "TEAMID1234", "apple.keyId": "TESTKEY123", "apple.privateKey": Fixtures.p384, "apple.clientIds": "a"], "apple.privateKeyFile"),
            (
                [
                    "apple.teamId": Fixtures.teamID, "apple.keyId": Fixtures.keyID, "apple.privateKey": Fixtures.p8, "apple.clientIds": "a",
                    "apple.servicesId": "b",
                ],
                "apple.servicesId"
            ),
            (["google.clientIds": "a", "google.webClientId": "b"], "google.webClientId"),
            (["rateLimit.perIp": "0"], "rateLimit.perIp"),
            (["rateLimit.perSubject": "-30"], "rateLimit.perSubject"),
            (["publicUrl": "auth.example.com"], "publicUrl"),
            (["publicUrl": "https://auth.example.com/?tenant=1"], "publicUrl"),
            (["dpop.mode": "always"], "dpop.mode"),
            (["dpop.maxAge": "1"], "dpop.maxAge"),
            (["dpop.requireNonce": "maybe"], "dpop.requireNonce"),
            (["clients.0.clientId": "web", "clients.0.redirectUris": "https://a.example/cb", "clients.0.dpop": "sometimes"], "clients[0].dpop"),
            (["appAttest.mode": "enforce"], "appAttest.mode"),
            (["appAttest.mode": "require", "appAttest.appIds": "com.example.app"], "appAttest.appIds"),
            (["appAttest.environment": "sandbox"], "appAttest.environment"),
        ])
    func invalid(values: [String: String], setting: String) {
        do {
            _ = try read(values)
            Issue.record("accepted \(values)")
        } catch {
            #expect(error.code == .invalidConfiguration || error.code == .invalidKey)
            #expect(error.reason.contains(setting), "\(error.reason)")
        }
    }

    @Test("device binding: dpop.* and appAttest.* are read; App IDs are needed when the server is made, not when the settings are read")
    func deviceBinding() throws {
        let configuration = try read([
            "dpop.mode": "require", "dpop.maxAge": "30", "dpop.requireNonce": "true", "appAttest.mode": "report",
            "appAttest.appIds": "ABCDE12345.com.example.app,ABCDE12345.com.example.widget", "appAttest.environment": "development",
            "clients.0.clientId": "web", "clients.0.redirectUris": "https://a.example/cb", "clients.0.dpop": "allow",
        ])
        #expect(configuration.dpop.mode == .require && configuration.dpop.maximumAge == 30 && configuration.dpop.requireNonce)
        #expect(configuration.appAttest.mode == .report && configuration.appAttest.environment == .development)
        #expect(configuration.appAttest.appIDs == ["ABCDE12345.com.example.app", "ABCDE12345.com.example.widget"])
        #expect(configuration.clients.first?.dpop == .allow)
        #expect(try read([:]).appAttest.mode == .off && (try read([:])).dpop.mode == .allow)
        let noApps = try read(["appAttest.mode": "require"])
        #expect(throws: LatchkeyError.self) { try noApps.validateAppAttest() }
    }

    @Test("a full production configuration is accepted")
    func production() throws {
        let configuration = try read([
            "mode": "production", "publicUrl": "https://auth.example.com", "encryptionKey": SecretBox.generateKey(),
            "apple.teamId": Fixtures.teamID, "apple.keyId": Fixtures.keyID, "apple.privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"),
            "apple.clientIds": "com.example.app, com.example.web", "database.url": "postgres://u:p@db/latchkey", "session.reuseGrace": "5",
            "providers.validationWait": "1.5", "providers.validationInterval": "43200", "providers.unreachableGrace": "86400",
        ])
        #expect(configuration.apple?.clientIDs == ["com.example.app", "com.example.web"])
        #expect(configuration.issuer == "https://auth.example.com")
        #expect(try read(["publicUrl": "https://auth.example.com/"]).issuer == "https://auth.example.com")
        #expect(configuration.session.reuseGraceWindow == 5)
        #expect(configuration.session.providerValidationWait == 1.5)
        #expect(configuration.session.providerValidationInterval == 43_200)
        #expect(configuration.session.providerUnreachableGrace == 86_400)
        #expect(configuration.warnings.isEmpty)
    }

    @Test("apple.validationWait and its siblings still work, with a warning naming providers.*; providers.* wins when both are set")
    func deprecatedValidationSettings() throws {
        let old = try read(["apple.validationWait": "2", "apple.validationInterval": "7200", "apple.unreachableGrace": "3600"])
        #expect(old.session.providerValidationWait == 2)
        #expect(old.session.providerValidationInterval == 7200)
        #expect(old.session.providerUnreachableGrace == 3600)
        #expect(old.warnings.count == 3)
        #expect(old.warnings.allSatisfy { $0.contains("deprecated") && $0.contains("providers.") })
        let both = try read(["apple.validationWait": "2", "providers.validationWait": "4"])
        #expect(both.session.providerValidationWait == 4)
        #expect(both.warnings.isEmpty)
    }
}
