import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Every provider through HTTP: the emulator mints what each provider's app SDK hands an app, the app sends it
/// to `POST /v1/auth/{provider}` as it would.
@Suite("Server: every provider end to end")
struct ProviderEndToEndTests {
    static func newUser(_ harness: ServerHarness, _ fields: [String: any Sendable] = [:]) async throws -> [String: Any] {
        let answer = try await harness.emulator.createUserAnswer(["email": "u-\(UUID().uuidString.prefix(8))@example.com"].merging(fields) { $1 })
        return try #require(answer["subjects"] as? [String: Any])
    }

    @Test("expired and re-signed ID tokens, a replayed ID token, a replayed code and a wrong verifier are refused")
    func refusals() async throws {
        try await ServerHarness.with { harness in
            let subjects = try await Self.newUser(harness)
            // Expired: the server's clock is two hours ahead of the token.
            let stale = try await ProviderContractTests.body("microsoft", .idToken, harness, subjects: subjects)
            harness.clock.advance(7200)
            let expired = try await harness.post("/v1/auth/microsoft", json: stale)
            #expect(expired.error == "token_expired", "\(expired.text)")
            harness.clock.advance(-7200)

            // Another token's signature over these claims.
            let body = try await ProviderContractTests.body("oidc", .idToken, harness, subjects: subjects)
            let other = try await ProviderContractTests.body("oidc", .idToken, harness, subjects: try await Self.newUser(harness))
            let token = try #require(body["idToken"] as? String)
            let forged =
                token.split(separator: ".").prefix(2).joined(separator: ".") + "." + (try #require((other["idToken"] as? String)?.split(separator: ".").last))
            let refused = try await harness.post("/v1/auth/oidc", json: ["idToken": forged, "rawNonce": body["rawNonce"] as? String ?? ""])
            #expect(refused.status == 401)
            #expect(refused.error == "invalid_signature", "\(refused.text)")

            #expect(try await harness.post("/v1/auth/oidc", json: body).status == 200)
            #expect(try await harness.post("/v1/auth/oidc", json: body).error == "token_already_used")

            let code = try await ProviderContractTests.body("dropbox", .authorizationCode, harness, subjects: subjects)
            #expect(try await harness.post("/v1/auth/dropbox", json: code).status == 200)
            let replayed = try await harness.post("/v1/auth/dropbox", json: code)
            #expect(replayed.status == 400)
            #expect(replayed.error == "invalid_grant")

            var wrongVerifier = try await ProviderContractTests.body("microsoft", .authorizationCode, harness, subjects: subjects)
            wrongVerifier["codeVerifier"] = PKCE.makeVerifier()
            let mismatch = try await harness.post("/v1/auth/microsoft", json: wrongVerifier)
            #expect(mismatch.status == 400)
            #expect(mismatch.error == "invalid_grant")

            let bogus = try await harness.post("/v1/auth/facebook", json: ["accessToken": "EAAnot-a-real-token"])
            #expect(bogus.status == 400)
            #expect(bogus.error == "invalid_grant")
        }
    }

    @Test("Microsoft: a tenant microsoft.tenants does not allow is refused")
    func wrongTenant() async throws {
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            configuration.providerModules = configuration.providerModules.map { module in
                guard let microsoft = module as? MicrosoftModule else { return module }
                let authority = String(microsoft.configuration.discoveryURL.dropLast("/common/v2.0/.well-known/openid-configuration".count))
                return MicrosoftModule(.microsoft(clientIDs: [EmulatorHarness.providerClientID], tenants: ["organizations"], authority: authority))
            }
        }
        try await ServerHarness.with(configure: configure) { harness in
            let personal = try await Self.newUser(harness)  // the consumers tenant by default
            let refused = try await harness.post(
                "/v1/auth/microsoft", json: try await ProviderContractTests.body("microsoft", .idToken, harness, subjects: personal))
            #expect(refused.status == 401)
            #expect(refused.error == "unexpected_issuer", "\(refused.text)")
            let work = try await Self.newUser(harness, ["microsoftTenant": "72f988bf-86f1-41af-91ab-2d7cd011db47"])
            #expect(
                try await harness.post("/v1/auth/microsoft", json: try await ProviderContractTests.body("microsoft", .idToken, harness, subjects: work)).status
                    == 200)
        }
    }

    @Test("a generic provider whose discovery names another issuer than configured is the operator's problem (502), named")
    func issuerMismatch() async throws {
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            guard let index = configuration.openIDProviders.firstIndex(where: { $0.name == "oidc" }),
                let issuer = configuration.openIDProviders[index].expectedIssuer
            else { return }
            var mismatched = OpenIDProviderConfiguration.generic(name: "oidc", issuer: issuer + "/", clientIDs: [EmulatorHarness.providerClientID])
            mismatched.discoveryURL = issuer + "/.well-known/openid-configuration"
            configuration.openIDProviders[index] = mismatched
        }
        try await ServerHarness.with(configure: configure) { harness in
            let answer = try await harness.post(
                "/v1/auth/oidc", json: try await ProviderContractTests.body("oidc", .idToken, harness, subjects: try await Self.newUser(harness)))
            #expect(answer.status == 502)
            #expect(answer.error == "invalid_configuration")
            #expect((answer.json["error_description"] as? String)?.contains("oidc.oidc.issuer") == true, "\(answer.text)")
        }
    }

    @Test("a grant the user revoked at the provider ends that identity's sessions at the next daily validation")
    func revokedAtProvider() async throws {
        try await ServerHarness.with { harness in
            let subjects = try await Self.newUser(harness)
            let body = try await ProviderContractTests.body("facebook", .accessToken, harness, subjects: subjects)
            let session = try await harness.post("/v1/auth/facebook", json: body).decode(SignInResponse.self)
            let token = try #require(body["accessToken"] as? String)
            #expect(try await harness.emulator.send("DELETE", "/facebook/me/permissions?access_token=\(token)").status == 200)
            #expect(try await harness.refresh(session.refreshToken).status == 200)  // not due yet: validated at sign-in
            harness.clock.advance(25 * 3600)
            let answer = try await harness.refresh(session.refreshToken)
            #expect(answer.error == "invalid_grant", "\(answer.text)")
            #expect((answer.json["error_description"] as? String)?.contains("Facebook") == true)
            #expect(try await harness.send("GET", "/v1/me", bearer: session.accessToken).status == 401)
        }
    }

    @Test("a provider that rotates refresh tokens: each daily validation stores the new one, so the next one still passes")
    func rotatingProvider() async throws {
        var emulator = EmulatorHarness.configuration()
        emulator.oidcRotatesRefreshTokens = true
        try await ServerHarness.with(emulator: emulator) { harness in
            let subjects = try await Self.newUser(harness)
            let session = try await harness.post(
                "/v1/auth/oidc", json: try await ProviderContractTests.body("oidc", .authorizationCode, harness, subjects: subjects))
            #expect(session.status == 200, "\(session.text)")
            var refreshToken = try session.decode(SignInResponse.self).refreshToken
            let subject = try #require(subjects["oidc"] as? String)
            let identity = try #require(try await harness.store.identity(provider: "oidc", subject: subject))
            var stored = try #require(try await harness.store.providerGrant(identityID: identity.id)).sealedRefreshToken
            for day in 1...3 {
                harness.clock.advance(25 * 3600)
                let answer = try await harness.refresh(refreshToken)
                #expect(answer.status == 200, "day \(day): \(answer.text)")
                refreshToken = try answer.decode(TokenPairResponse.self).refreshToken
                // A validation slower than `validationWait` (a loaded machine) finishes after the refresh has answered.
                let previous = stored
                try await poll(until: "day \(day): the provider's new token to be stored", within: .seconds(10)) {
                    stored = try #require(try await harness.store.providerGrant(identityID: identity.id), "day \(day)").sealedRefreshToken
                    return stored != previous
                }
            }
        }
    }

    @Test("deleting an account whose Google grant was revoked already: Google's invalid_token leaves nothing owed")
    func deletionAfterRevocationAtProvider() async throws {
        try await ServerHarness.with { harness in
            let subjects = try await Self.newUser(harness)
            let tokens = try await harness.post(
                "/v1/auth/google", json: try await ProviderContractTests.body("google", .authorizationCode, harness, subjects: subjects)
            ).decode(
                SignInResponse.self)
            let subject = try #require(subjects["google"] as? String)
            let identity = try #require(try await harness.store.identity(provider: "google", subject: subject))
            let sealed = try #require(try await harness.store.providerGrant(identityID: identity.id)).sealedRefreshToken
            let providerToken = try SecretBox(base64Key: harness.encryptionKey).open(sealed)
            #expect(try await harness.emulator.send("POST", "/google/revoke", form: [("token", providerToken)]).status == 200)

            let deletion = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(deletion.status == 200, "\(deletion.text)")
            #expect(deletion.json["tokensRevoked"] as? Int == 1)
            #expect(deletion.json["revocationsPending"] as? Int == 0)
            #expect(try await harness.store.outboxItems().allSatisfy { $0.completedAt != nil })
        }
    }

    @Test("deleting the account revokes the grant at every provider that has a revocation endpoint")
    func deletionRevokesEverywhere() async throws {
        try await ServerHarness.with { harness in
            let subjects = try await Self.newUser(harness)
            let first = try await harness.post(
                "/v1/auth/google", json: try await ProviderContractTests.body("google", .authorizationCode, harness, subjects: subjects))
            let tokens = try first.decode(SignInResponse.self)
            let linking: [(String, CredentialKind)] = [
                ("microsoft", .authorizationCode), ("oidc", .authorizationCode), ("facebook", .accessToken), ("dropbox", .authorizationCode),
                ("line", .authorizationCode),
            ]
            for (provider, credential) in linking {
                let linked = try await harness.post(
                    "/v1/me/identities/\(provider)", json: try await ProviderContractTests.body(provider, credential, harness, subjects: subjects),
                    bearer: tokens.accessToken)
                #expect(linked.status == 200, "\(provider): \(linked.text)")
            }
            _ = try await harness.emulator.send("DELETE", "/emulator/requests")
            let deletion = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(deletion.status == 200, "\(deletion.text)")
            #expect(deletion.json["tokensRevoked"] as? Int == 6)  // Microsoft has no revocation endpoint: its grant is forgotten
            #expect(deletion.json["revocationsPending"] as? Int == 0)
            let calls = try await harness.emulator.requestLog().compactMap { entry -> String? in
                guard let endpoint = entry["endpoint"] as? String, entry["status"] as? Int == 200 else { return nil }
                return "\(entry["method"] ?? "") \(endpoint)"
            }
            for expected in [
                "POST /google/revoke", "POST /oidc/revoke", "DELETE /facebook/me/permissions", "POST /dropbox/2/auth/token/revoke",
                "POST /line/oauth2/v2.1/revoke",
            ] {
                #expect(calls.contains(expected), "\(expected) missing from \(calls)")
            }
        }
    }
}
