import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// GitHub, the first provider that is only a module: its settings, its sign-ins against the emulator's stand-in
/// (code with PKCE, identity from /user and /user/emails), and its grant (validated and revoked through the
/// application endpoints).
@Suite("Server: GitHub")
struct GitHubProviderTests {
    @Test("github.* settings: a client id and secret configure it; a missing or wrong setting is named")
    func settings() throws {
        let configuration = try ConfigurationTests.read([
            "github.clientId": "Iv1.abc", "github.clientSecret": "s3cret", "github.baseUrl": "https://ghe.example.com/",
            "github.apiUrl": "https://ghe.example.com/api/v3",
        ])
        let module = try #require(configuration.providerModules.first as? GitHubModule)
        #expect(module.clientID == "Iv1.abc" && module.clientSecret.revealed == "s3cret")
        #expect(module.baseURL == "https://ghe.example.com" && module.apiURL == "https://ghe.example.com/api/v3")
        #expect(configuration.providerNames == ["github"])
        #expect(module.findings.map(\.key) == ["github"])
        #expect(try ConfigurationTests.read([:]).providerModules.isEmpty)
        for (values, setting) in [
            (["github.clientId": "x"], "github.clientSecret"), (["github.clientSecret": "s"], "github.clientId"),
            (["github.clientId": "x", "github.clientSecret": "s", "github.baseUrl": "ftp://x"], "github.baseUrl"),
            (["github.clientId": "x", "github.clientSecretFile": "/nonexistent/secret"], "github.clientSecretFile"),
            (["oidc.providers": "github", "oidc.github.issuer": "https://x.example", "oidc.github.clientIds": "c"], "oidc.providers"),
        ] {
            #expect("\(values)") {
                try ConfigurationTests.read(values)
            } throws: {
                ($0 as? LatchkeyError)?.reason.contains(setting) == true
            }
        }
    }

    static func code(_ harness: ServerHarness, sub: String, verifier: String = PKCE.makeVerifier(), scopes: [String]? = nil) async throws -> [String: String] {
        var fields: [String: any Sendable] = ["codeChallenge": PKCE.challenge(for: verifier)]
        if let scopes { fields["scopes"] = scopes }
        let minted = try await harness.emulator.providerSignIn("github", sub: sub, fields)
        return ["authorizationCode": try #require(minted["authorizationCode"] as? String), "codeVerifier": verifier]
    }

    @Test("a code with its verifier signs in: the numeric id is the subject, the primary verified address the e-mail")
    func signIn() async throws {
        try await ServerHarness.with { harness in
            let email = "gh-\(UUID().uuidString.prefix(8))@example.com"
            let subjects = try #require(
                try await harness.emulator.createUserAnswer(["email": email, "givenName": "Mona", "familyName": "Lisa"])["subjects"] as? [String: Any])
            let sub = try #require(subjects["github"] as? String)
            #expect(Int(sub) != nil, "GitHub ids are integers: \(sub)")
            let answer = try await harness.post("/v1/auth/github", json: try await Self.code(harness, sub: sub))
            #expect(answer.status == 200, "\(answer.text)")
            let user = try answer.decode(SignInResponse.self).user
            #expect(user.identities.map(\.provider) == ["github"] && user.identities.first?.subject == sub)
            #expect(user.email == email && user.emailVerified == true)

            // Without user:email the address is unknown, and the sign-in still works.
            let narrow = try await harness.post("/v1/auth/github", json: try await Self.code(harness, sub: sub, scopes: ["read:user"]))
            #expect(narrow.status == 200, "\(narrow.text)")
            #expect(try narrow.decode(SignInResponse.self).user.id == user.id)
        }
    }

    @Test("refused: a replayed code, a wrong verifier, no verifier, an ID token, a wrong client secret")
    func refusals() async throws {
        try await ServerHarness.with { harness in
            let sub = try #require(try await ProviderEndToEndTests.newUser(harness)["github"] as? String)
            let code = try await Self.code(harness, sub: sub)
            #expect(try await harness.post("/v1/auth/github", json: code).status == 200)
            let replayed = try await harness.post("/v1/auth/github", json: code)
            #expect(replayed.status == 400 && replayed.error == "invalid_grant", "\(replayed.text)")

            var wrong = try await Self.code(harness, sub: sub)
            wrong["codeVerifier"] = PKCE.makeVerifier()
            #expect(try await harness.post("/v1/auth/github", json: wrong).error == "invalid_grant")
            var missing = try await Self.code(harness, sub: sub)
            missing["codeVerifier"] = nil
            #expect(try await harness.post("/v1/auth/github", json: missing).status == 400)
            let idToken = try await harness.post("/v1/auth/github", json: ["idToken": "eyJ.x.y"])
            #expect(idToken.status == 400 && (idToken.json["error_description"] as? String)?.contains("authorizationCode") == true, "\(idToken.text)")
        }
        try await ServerHarness.with(configure: { configuration in
            configuration.providerModules = configuration.providerModules.map { module in
                guard var github = module as? GitHubModule else { return module }
                github.clientSecret = Secret("not-the-secret")
                return github
            }
        }) { harness in
            let sub = try #require(try await ProviderEndToEndTests.newUser(harness)["github"] as? String)
            let answer = try await harness.post("/v1/auth/github", json: try await Self.code(harness, sub: sub))
            #expect(answer.error == "invalid_client", "\(answer.text)")
            // The app is told the operator's job, not the server's settings.
            #expect((answer.json["error_description"] as? String)?.contains("latchkey doctor") == true, "\(answer.text)")
        }
    }

    @Test("linked to an Apple user; the grant validates until revoked; deleting the account revokes it at GitHub")
    func grantLifecycle() async throws {
        try await ServerHarness.with { harness in
            let subjects = try await ProviderEndToEndTests.newUser(harness)
            let first = try await harness.post(
                "/v1/auth/google", json: try await ProviderContractTests.body("google", .authorizationCode, harness, subjects: subjects))
            let tokens = try first.decode(SignInResponse.self)
            let sub = try #require(subjects["github"] as? String)
            let linked = try await harness.post("/v1/me/identities/github", json: try await Self.code(harness, sub: sub), bearer: tokens.accessToken)
            #expect(linked.status == 200, "\(linked.text)")
            #expect(try linked.decode(UserResponse.self).identities.map(\.provider).sorted() == ["github", "google"])

            let provider = try #require(harness.server.providers["github"])
            let identity = try #require(try await harness.store.identity(provider: "github", subject: sub))
            let sealed = try #require(try await harness.store.providerGrant(identityID: identity.id)).sealedRefreshToken
            let token = try SecretBox(base64Key: harness.encryptionKey).open(sealed)
            #expect(token.hasPrefix("gho_"), "the grant is GitHub's access token")
            #expect(await provider.validate(refreshToken: token, clientID: EmulatorHarness.providerClientID) == .valid)

            _ = try await harness.emulator.send("DELETE", "/emulator/requests")
            let deletion = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(deletion.status == 200, "\(deletion.text)")
            #expect(deletion.json["revocationsPending"] as? Int == 0)
            let calls = try await harness.emulator.requestLog().compactMap { $0["endpoint"] as? String }
            #expect(calls.contains("/github/api/applications/\(EmulatorHarness.providerClientID)/grant"), "\(calls)")
            #expect(await provider.validate(refreshToken: token, clientID: EmulatorHarness.providerClientID) == .revoked)
        }
    }
}
