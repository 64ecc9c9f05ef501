import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// GitLab: an OpenID Connect module whose issuer is the instance's base URL, against the emulator's `/gitlab`.
@Suite("Server: GitLab")
struct GitLabProviderTests {
    @Test("gitlab.* settings: application ids, and a self-managed instance's base URL as the issuer")
    func settings() throws {
        let configuration = try ConfigurationTests.read(["gitlab.clientIds": "app-1, app-2", "gitlab.baseUrl": "https://gitlab.example.com/"])
        let module = try #require(configuration.providerModules.first as? GitLabModule)
        #expect(module.clientIDs == ["app-1", "app-2"] && module.baseURL == "https://gitlab.example.com" && module.clientSecret == nil)
        #expect(module.findings.first?.message.contains("https://gitlab.example.com") == true)
        for (values, setting) in [
            (["gitlab.clientSecret": "s"], "gitlab.clientIds"), (["gitlab.clientIds": " , "], "gitlab.clientIds"),
            (["gitlab.clientIds": "a", "gitlab.baseUrl": "gitlab.example.com"], "gitlab.baseUrl"),
        ] {
            #expect("\(values)") {
                try ConfigurationTests.read(values)
            } throws: {
                ($0 as? LatchkeyError)?.reason.contains(setting) == true
            }
        }
    }

    @Test("an ID token for another application is refused, naming gitlab.clientIds; deletion revokes the grant at /oauth/revoke")
    func audienceAndRevocation() async throws {
        var emulator = EmulatorHarness.configuration()
        emulator.addClientEverywhere("com.example.stranger")
        try await ServerHarness.with(emulator: emulator) { harness in
            let subjects = try await ProviderEndToEndTests.newUser(harness)
            let foreign = try await ProviderContractTests.body("gitlab", .idToken, harness, subjects: subjects, clientID: "com.example.stranger")
            let refused = try await harness.post("/v1/auth/gitlab", json: foreign)
            #expect(refused.status == 401 && refused.error == "unexpected_audience", "\(refused.text)")
            #expect((refused.json["error_description"] as? String)?.contains("gitlab.clientIds") == true, "\(refused.text)")

            let signedIn = try await harness.post(
                "/v1/auth/gitlab", json: try await ProviderContractTests.body("gitlab", .authorizationCode, harness, subjects: subjects))
            #expect(signedIn.status == 200, "\(signedIn.text)")
            let tokens = try signedIn.decode(SignInResponse.self)
            #expect(tokens.user.identities.first?.subject == subjects["gitlab"] as? String)
            _ = try await harness.emulator.send("DELETE", "/emulator/requests")
            let deletion = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(deletion.status == 200 && deletion.json["tokensRevoked"] as? Int == 1, "\(deletion.text)")
            let calls = try await harness.emulator.requestLog().compactMap { $0["endpoint"] as? String }
            #expect(calls.contains("/gitlab/oauth/revoke"), "\(calls)")
        }
    }
}
