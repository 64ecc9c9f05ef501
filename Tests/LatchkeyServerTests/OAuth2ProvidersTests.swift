import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Discord and X: modules on the shared OAuth 2.0 code provider, against the emulator's stand-ins.
@Suite("Server: Discord and X")
struct OAuth2ProvidersTests {
    @Test("discord.* and x.* settings: the client id alone configures a public client; other settings without it are named")
    func settings() throws {
        let configuration = try ConfigurationTests.read(["discord.clientId": "1234", "x.clientId": "xid", "x.clientSecret": "xs"])
        #expect(configuration.providerNames == ["discord", "x"])
        let discord = try #require(configuration.providerModules.first as? DiscordModule)
        #expect(discord.clientSecret == nil && discord.baseURL == "https://discord.com")
        let x = try #require(configuration.providerModules.last as? XModule)
        #expect(x.clientSecret?.revealed == "xs" && x.apiURL == "https://api.x.com")
        #expect(x.findings.contains { $0.level == .warning && $0.message.contains("no e-mail") })
        for (values, setting) in [
            (["discord.clientSecret": "s"], "discord.clientId"), (["x.apiUrl": "https://api.x.com"], "x.clientId"),
            (["discord.clientId": "1", "discord.baseUrl": "discord.com"], "discord.baseUrl"),
        ] {
            #expect("\(values)") {
                try ConfigurationTests.read(values)
            } throws: {
                ($0 as? LatchkeyError)?.reason.contains(setting) == true
            }
        }
    }

    static func code(_ harness: ServerHarness, _ provider: String, sub: String) async throws -> [String: String] {
        let verifier = PKCE.makeVerifier()
        let minted = try await harness.emulator.providerSignIn(provider, sub: sub, ["codeChallenge": PKCE.challenge(for: verifier)])
        return ["authorizationCode": try #require(minted["authorizationCode"] as? String), "codeVerifier": verifier]
    }

    @Test(
        "a code signs in with the provider's id as subject (Discord's verified e-mail, none from X); a replay is refused",
        arguments: ["discord", "x"])
    func signIn(provider: String) async throws {
        try await ServerHarness.with { harness in
            let email = "\(provider)-\(UUID().uuidString.prefix(8))@example.com"
            let answer = try await harness.emulator.createUserAnswer(["email": email, "givenName": "Ada", "familyName": "Lovelace"])
            let sub = try #require((answer["subjects"] as? [String: Any])?[provider] as? String)
            let code = try await Self.code(harness, provider, sub: sub)
            let first = try await harness.post("/v1/auth/\(provider)", json: code)
            #expect(first.status == 200, "\(first.text)")
            let user = try first.decode(SignInResponse.self).user
            #expect(user.identities.first?.subject == sub && user.identities.first?.provider == provider)
            #expect(user.email == (provider == "discord" ? email : nil))
            #expect(user.emailVerified == (provider == "discord" ? true : nil))
            let replayed = try await harness.post("/v1/auth/\(provider)", json: code)
            #expect(replayed.status == 400 && replayed.error == "invalid_grant", "\(replayed.text)")
        }
    }

    @Test("the refresh token is the grant: validation stores the rotated one, deletion revokes it at the provider", arguments: ["discord", "x"])
    func grant(provider: String) async throws {
        try await ServerHarness.with { harness in
            let subjects = try await ProviderEndToEndTests.newUser(harness)
            let sub = try #require(subjects[provider] as? String)
            let session = try await harness.post("/v1/auth/\(provider)", json: try await Self.code(harness, provider, sub: sub))
            let tokens = try session.decode(SignInResponse.self)
            let box = try SecretBox(base64Key: harness.encryptionKey)
            let identity = try #require(try await harness.store.identity(provider: provider, subject: sub))
            let grant = try box.open(try #require(try await harness.store.providerGrant(identityID: identity.id)).sealedRefreshToken)
            let link = try #require(harness.server.providers[provider])
            guard case .replaced(let rotated) = await link.validate(refreshToken: grant, clientID: EmulatorHarness.providerClientID) else {
                Issue.record("\(provider) rotates refresh tokens: validation must answer the new one")
                return
            }
            #expect(await link.validate(refreshToken: grant, clientID: EmulatorHarness.providerClientID) == .revoked, "the rotated-away token is dead")

            _ = try await harness.emulator.send("DELETE", "/emulator/requests")
            let deletion = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(deletion.status == 200, "\(deletion.text)")
            let calls = try await harness.emulator.requestLog().compactMap { $0["endpoint"] as? String }
            #expect(calls.contains(provider == "discord" ? "/discord/api/oauth2/token/revoke" : "/x/2/oauth2/revoke"), "\(calls)")
            // The stored grant was the sign-in's; the rotated token is revoked only if it had been stored. Revoke it too.
            try await link.revoke(refreshToken: rotated, clientID: EmulatorHarness.providerClientID)
            #expect(await link.validate(refreshToken: rotated, clientID: EmulatorHarness.providerClientID) == .revoked)
        }
    }
}
