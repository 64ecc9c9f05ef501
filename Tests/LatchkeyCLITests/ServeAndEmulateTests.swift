import Foundation
import LatchkeyCore
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("CLI: serve, migrate and emulate refuse what they cannot run")
struct ServeAndEmulateTests {
    @Test("serve refuses production mode without Apple credentials, an encryption key and a public URL")
    func productionRefusal() throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try CLI.run(["serve", "--port", "0"], environment: ["LATCHKEY_MODE": "production"], directory: directory)
        #expect(result.status == 64)
        #expect(result.stderr.contains("production mode needs Apple credentials"), "\(result.stderr)")
        let noKey = try CLI.run(["serve", "--port", "0"], environment: [
            "LATCHKEY_MODE": "production", "LATCHKEY_APPLE_TEAM_ID": Fixtures.teamID, "LATCHKEY_APPLE_KEY_ID": Fixtures.keyID,
            "LATCHKEY_APPLE_PRIVATE_KEY_FILE": Fixtures.path("AuthKey_TESTKEY123.p8"), "LATCHKEY_APPLE_CLIENT_IDS": Fixtures.bundleID,
        ], directory: directory)
        #expect(noKey.status == 64)
        #expect(noKey.stderr.contains("encryption key"), "\(noKey.stderr)")
    }

    @Test("serve names a bad environment setting")
    func badSetting() throws {
        let result = try CLI.run(["serve"], environment: ["LATCHKEY_ACCESS_TOKEN_LIFETIME": "forever"], directory: CLI.directory())
        #expect(result.status == 64)
        #expect(result.stderr.contains("accessToken.lifetime"), "\(result.stderr)")
    }

    @Test("migrate creates the schema and reports its version")
    func migrate() throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try CLI.run(["migrate"], environment: ["LATCHKEY_DATABASE_URL": directory + "/db.sqlite"], directory: directory)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("schema version 1"))
    }

    @Test("emulate needs a team, and checks its options")
    func emulateUsage() throws {
        let missing = try CLI.run(["emulate"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("--generate"))
        let style = try CLI.run(["emulate", "--generate", CLI.directory(), "--boolean-style", "yes"])
        #expect(style.status == 64)
        let event = try CLI.run(["emulate", "--generate", CLI.directory(), "--account-deletion-event", "gone"])
        #expect(event.status == 64)
        let badKey = try CLI.run(["emulate", "--team-id", Fixtures.teamID, "--key-id", Fixtures.keyID, "--key-file", Fixtures.path("AuthKey_TESTKEY123.pub.pem"), "--port", "0"])
        #expect(badKey.status == 64)
        #expect(badKey.stderr.contains("P-256"))
    }

    @Test("token verify with an issuer URL reads its discovery document, and refuses one naming another issuer (RFC 8414)")
    func discovery() async throws {
        try await EmulatorHarness.with { harness in
            let token = Fixtures.appleKey.sign(claims: appleClaims(issuedAt: Date()))
            let foreign = try CLI.run(["token", "verify", token, "--provider", harness.emulator.googleBaseURL, "--audience", "x"])
            #expect(foreign.status == 1)
            #expect(foreign.stdout.contains("must be identical"), "\(foreign.stdout)")
            let noDiscovery = try CLI.run(["token", "verify", token, "--provider", harness.emulator.baseURL + "/nothing", "--audience", "x"])
            #expect(noDiscovery.status == 1)
            #expect(noDiscovery.stdout.contains("discovery document"))
        }
    }

    @Test("a provider answer larger than the cap is refused, not read")
    func responseCap() async throws {
        try await EmulatorHarness.with { harness in
            let transport = AsyncHTTPClientTransport(maximumResponseBytes: 64)
            await #expect(throws: LatchkeyError(.invalidProviderResponse, "")) {
                _ = try await transport.send(OutboundRequest(url: harness.emulator.baseURL + "/auth/keys"))
            }
        }
    }
}
