import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("CLI: serve, migrate and emulate refuse what they cannot run")
struct ServeAndEmulateTests {
    @Test("serve refuses production mode without Apple credentials, an encryption key and a public URL")
    func productionRefusal() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try await CLI.run(["serve", "--port", "0"], environment: ["LATCHKEY_MODE": "production"], directory: directory)
        #expect(result.status == 1)
        #expect(!result.stderr.contains("Usage:"))
        #expect(result.stderr.contains("production mode needs at least one provider"), "\(result.stderr)")
        let noKey = try await CLI.run(
            ["serve", "--port", "0"],
            environment: [
                "LATCHKEY_MODE": "production", "LATCHKEY_APPLE_TEAM_ID": Fixtures.teamID, "LATCHKEY_APPLE_KEY_ID": Fixtures.keyID,
                "LATCHKEY_APPLE_PRIVATE_KEY_FILE": Fixtures.path("AuthKey_TESTKEY123.p8"), "LATCHKEY_APPLE_CLIENT_IDS": Fixtures.bundleID,
            ], directory: directory)
        #expect(noKey.status == 1)
        #expect(noKey.stderr.contains("encryption key"), "\(noKey.stderr)")
    }

    @Test("serve names a bad environment setting")
    func badSetting() async throws {
        let result = try await CLI.run(["serve"], environment: ["LATCHKEY_ACCESS_TOKEN_LIFETIME": "forever"], directory: CLI.directory())
        #expect(result.status == 1)
        #expect(result.stderr.contains("accessToken.lifetime"), "\(result.stderr)")
    }

    @Test("serve exits 64 with usage only for usage errors")
    func usageErrors() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for arguments in [["serve", "--no-such-flag"], ["serve", "--port", "eighty"], ["serve", "--config", directory + "/missing.json"]] {
            let result = try await CLI.run(arguments, directory: directory)
            #expect(result.status == 64, "\(arguments)")
            #expect(result.stderr.contains("Usage:") || result.stderr.contains("does not exist"), "\(result.stderr)")
        }
        // An emulator address that no connection can reach is refused before anything starts.
        for (arguments, mention) in [
            (["serve", "--dev", "--emulator-port", "0"], "--emulator-port"), (["serve", "--dev", "--emulator-port", "70000"], "--emulator-port"),
            (["serve", "--dev", "--emulator-url", "http://127.0.0.1:99999"], "--emulator-url"),
        ] {
            let result = try await CLI.run(arguments, directory: directory)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(mention), "\(arguments): \(result.stderr)")
        }
    }

    @Test("serve exits 1 with one line naming the problem: a port in use, a database it cannot open, an unreadable key file, a folder it cannot make")
    func runFailures() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = try ListeningSocket()
        let portInUse = try await CLI.run(["serve", "--port", String(socket.port)], directory: directory)
        #expect(portInUse.status == 1)
        #expect(
            portInUse.stderr.hasSuffix("latchkey serve: cannot listen on 127.0.0.1:\(socket.port): the port is already in use (set --port or port)\n"),
            "\(portInUse.stderr)")

        try FileManager.default.createDirectory(atPath: directory + "/a-directory.sqlite", withIntermediateDirectories: true)
        let database = try await CLI.run(
            ["serve", "--port", "0"], environment: ["LATCHKEY_DATABASE_URL": directory + "/a-directory.sqlite"], directory: directory)
        #expect(database.status == 1)
        #expect(database.stderr.contains("could not open the database at sqlite:\(directory)/a-directory.sqlite"), "\(database.stderr)")
        #expect(oneLine(database.stderr))

        let key = try await CLI.run(
            ["serve", "--port", "0"],
            environment: [
                "LATCHKEY_APPLE_TEAM_ID": Fixtures.teamID, "LATCHKEY_APPLE_KEY_ID": Fixtures.keyID, "LATCHKEY_APPLE_CLIENT_IDS": Fixtures.bundleID,
                "LATCHKEY_APPLE_PRIVATE_KEY_FILE": directory + "/AuthKey_missing.p8",
            ], directory: directory)
        #expect(key.status == 1)
        #expect(key.stderr == "latchkey serve: setting apple.privateKeyFile points at \(directory)/AuthKey_missing.p8, which cannot be read\n")

        // --dev keeps its team beside the database: here under a path whose parent is a file, so Foundation refuses to
        // make the folder. Its error is said in words with the path, not as Foundation's error dump.
        #expect(FileManager.default.createFile(atPath: directory + "/a-file", contents: Data("x".utf8)))
        let team = try await CLI.run(
            ["serve", "--dev", "--port", "0"], environment: ["LATCHKEY_DATABASE_URL": directory + "/a-file/latchkey.sqlite"], directory: directory)
        #expect(team.status == 1)
        #expect(oneLine(team.stderr), "\(team.stderr)")
        #expect(team.stderr == "latchkey serve: Not a directory (\(directory)/a-file/dev-team)\n", "\(team.stderr)")
    }

    #if os(Linux)
        @Test("serve started under a low soft limit on open files raises it to the hard limit: every connection is a file")
        func openFileLimit() async throws {
            let fleet = try await Fleet(instances: 1, start: false, sqlite: true)
            defer { fleet.stop() }
            try await fleet.start(0, openFileSoftLimit: 256)
            let pid = try #require(fleet.processID(0))
            let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
            let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
            let numbers = line.split(separator: " ").compactMap { Int($0) }
            #expect(numbers.count == 2, "\(line)")
            // The hard limit, or 65,536 when it is higher.
            #expect(numbers.first == numbers.last.map { min($0, 65_536) }, "\(line)")
            #expect((numbers.first ?? 0) > 256, "\(line)")
            #expect(try await fleet.get(0, "/healthz").status == 200)
        }

        @Test("out of file descriptors while the store opens its connections: a refusal naming the database, never a crash")
        func tooFewDescriptors() async throws {
            // Between these limits the writer, then one reader or another, cannot open (about 13 descriptors go to the
            // runtime and the event loops first); from about 28 the store opens.
            var refused = 0
            for limit in 16...27 {
                let result = try await CLI.run(["migrate"], directory: CLI.directory(), openFileLimit: limit)
                #expect([0, 64].contains(result.status), "limit \(limit): \(result.status) \(result.stderr)")
                if result.status == 64 {
                    refused += 1
                    #expect(result.stderr.contains("could not open"), "limit \(limit): \(result.stderr)")
                    #expect(!result.stderr.contains("Usage:"), "limit \(limit): \(result.stderr)")
                }
            }
            #expect(refused > 0)
        }
    #endif

    private func oneLine(_ text: String) -> Bool {
        text.split(separator: "\n").filter { $0.hasPrefix("latchkey serve:") }.count == 1 && !text.contains("Usage:")
    }

    @Test("log.format json writes one JSON object per line; log.level filters; deprecated and misspelt settings are announced")
    func logSettings() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = try ListeningSocket()
        let json = try await CLI.run(
            ["serve", "--port", String(socket.port)],
            environment: ["LATCHKEY_LOG_FORMAT": "json", "LATCHKEY_HTTP_TRUST_FORWARDED_FOR": "true", "LATCHKEY_ACESS_TOKEN_LIFETIME": "60"],
            directory: directory)
        let lines = json.stderr.split(separator: "\n").map(String.init)
        let logLines = lines.dropLast()  // the last line is the one-line failure
        #expect(logLines.count >= 2, "\(json.stderr)")
        for line in logLines {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
            #expect(object["level"] is String && object["label"] is String && object["message"] is String && object["time"] is String)
        }
        #expect(logLines.contains { $0.contains("http.trustForwardedFor is deprecated") })
        #expect(logLines.contains { $0.contains("LATCHKEY_ACESS_TOKEN_LIFETIME is not a setting; did you mean LATCHKEY_ACCESS_TOKEN_LIFETIME") })
        #expect(lines.last?.hasPrefix("latchkey serve: cannot listen") == true)

        // --dev points Apple at its emulator but keeps the other apple.* settings, which are checked as usual.
        let dev = try await CLI.run(
            ["serve", "--dev", "--port", String(socket.port), "--emulator-port", String(try ListeningSocket().port)],
            environment: ["LATCHKEY_APPLE_NONCE_MATCHING": "verbatim"], directory: directory)
        #expect(dev.stderr.contains("apple.nonceMatching is verbatim"), "\(dev.stderr)")

        let quiet = try await CLI.run(["serve", "--port", String(socket.port)], environment: ["LATCHKEY_LOG_LEVEL": "error"], directory: directory)
        #expect(quiet.stderr.split(separator: "\n").count == 1, "\(quiet.stderr)")
        let bad = try await CLI.run(["serve"], environment: ["LATCHKEY_LOG_LEVEL": "loud"], directory: directory)
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("setting log.level is \"loud\""))
    }

    @Test("doctor and serve read the same files the same way")
    func doctorAgreesWithServe() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = try ListeningSocket()
        // A JSON array of client ids: both read it.
        try CLI.write(
            [
                "port": socket.port, "apple.teamId": Fixtures.teamID, "apple.keyId": Fixtures.keyID,
                "apple.privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"), "apple.clientIds": [Fixtures.bundleID, Fixtures.servicesID],
            ], to: directory + "/array.json")
        let doctor = try await CLI.run(["doctor", "--json", "--config", directory + "/array.json"], directory: directory)
        let findings = doctor.json["findings"] as? [[String: Any]] ?? []
        let clientIDs = findings.filter { $0["check"] as? String == "apple.clientIds" && $0["status"] as? String == "ok" }
        #expect(clientIDs.count == 2, "\(doctor.stdout)")
        #expect(!findings.contains { $0["check"] as? String == "config" && $0["status"] as? String == "error" }, "\(doctor.stdout)")
        // serve gets past configuration and stops only at the port it was told to use.
        let serve = try await CLI.run(["serve", "--config", directory + "/array.json"], directory: directory)
        #expect(serve.stderr.contains("the port is already in use"), "\(serve.stderr)")

        // A value serve refuses is an error for doctor too, naming the same setting.
        try CLI.write(["port": "eighty"], to: directory + "/bad.json")
        let refused = try await CLI.run(["serve", "--config", directory + "/bad.json"], directory: directory)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("setting port"))
        let diagnosed = try await CLI.run(["doctor", "--json", "--config", directory + "/bad.json"], directory: directory)
        #expect(diagnosed.status == 1)
        #expect(diagnosed.stdout.contains("latchkey serve refuses this configuration: setting port"), "\(diagnosed.stdout)")
    }

    @Test("clients[] is read from a JSON array of objects in the file, and from the environment by index")
    func clientsFromFileAndEnvironment() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = try ListeningSocket()
        let good: [String: Any] = [
            "port": socket.port,
            "clients": [
                ["clientId": "com.example.app", "redirectUris": ["com.example.app:/oauth2redirect", "http://127.0.0.1/callback"]],
                ["clientId": "web", "type": "confidential", "clientSecret": "0123456789abcdef-secret", "redirectUris": ["https://www.example.com/cb"]],
            ],
        ]
        try CLI.write(good, to: directory + "/clients.json")
        let serve = try await CLI.run(["serve", "--config", directory + "/clients.json"], directory: directory)
        #expect(serve.stderr.contains("the port is already in use"), "\(serve.stderr)")

        // doctor lists the clients, and warns that Apple refuses a web callback on loopback.
        var withApple = good
        withApple.merge([
            "apple.teamId": Fixtures.teamID, "apple.keyId": Fixtures.keyID, "apple.privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"),
            "apple.clientIds": [Fixtures.bundleID, Fixtures.servicesID], "apple.servicesId": Fixtures.servicesID,
        ]) { $1 }
        try CLI.write(withApple, to: directory + "/apple.json")
        let doctor = try await CLI.run(["doctor", "--json", "--config", directory + "/apple.json"], directory: directory)
        let findings = doctor.json["findings"] as? [[String: Any]] ?? []
        #expect(findings.filter { $0["check"] as? String == "clients" && $0["status"] as? String == "ok" }.count == 2, "\(doctor.stdout)")
        let callback = findings.first { $0["check"] as? String == "publicUrl" }
        #expect(callback?["status"] as? String == "warning", "\(doctor.stdout)")
        #expect((callback?["message"] as? String)?.contains("/oauth2/callback/apple, which Apple refuses") == true)
        withApple["publicUrl"] = "https://auth.example.com"
        try CLI.write(withApple, to: directory + "/apple.json")
        let fixed = try await CLI.run(["doctor", "--json", "--config", directory + "/apple.json"], directory: directory)
        let register = (fixed.json["findings"] as? [[String: Any]] ?? []).first { $0["check"] as? String == "apple.servicesId" }
        #expect((register?["message"] as? String)?.contains("https://auth.example.com/oauth2/callback/apple") == true, "\(fixed.stdout)")

        var bad = good
        bad["clients"] = [["clientId": "com.example.app", "redirectUris": ["http://www.example.com/cb"]]]
        try CLI.write(bad, to: directory + "/bad-clients.json")
        let refused = try await CLI.run(["serve", "--config", directory + "/bad-clients.json"], directory: directory)
        #expect(refused.status == 1)
        #expect(
            refused.stderr.contains("setting clients[0].redirectUris has http://www.example.com/cb: plain http is allowed only on loopback"),
            "\(refused.stderr)")

        let environment = try await CLI.run(
            ["serve", "--port", String(socket.port)],
            environment: [
                "LATCHKEY_CLIENTS_0_CLIENT_ID": "web", "LATCHKEY_CLIENTS_0_TYPE": "confidential", "LATCHKEY_CLIENTS_0_REDIRECT_URIS": "https://a.example/cb",
            ],
            directory: directory)
        #expect(environment.stderr.contains("setting clients[0].clientSecret is missing"), "\(environment.stderr)")
    }

    @Test("the demo, the README's main command, plays the whole lifecycle offline")
    func demo() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try await CLI.run(["demo"], directory: directory)
        #expect(result.status == 0, "\(result.stderr)")
        for step in [
            "nonce_required", "token_already_used", "isNewUser false", "identities: apple + google", "same user: true", "POST /auth/revoke → 200",
            "POST /google/revoke → 200", "got webhook user.deleted (reason user_request, signature verified", "nonce_mismatch", "Done.",
            "isAnonymous true", "identity_in_use · mergeable true", "(the same as his iPad's: true)", "got webhook user.merged",
        ] {
            #expect(result.stdout.contains(step), "\(step) is missing from the demo's output")
        }
    }

    @Test("migrate creates the schema and reports its version")
    func migrate() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try await CLI.run(["migrate"], environment: ["LATCHKEY_DATABASE_URL": directory + "/db.sqlite"], directory: directory)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("schema version 15"))
    }

    @Test("emulate needs a team, and checks its options")
    func emulateUsage() async throws {
        let missing = try await CLI.run(["emulate"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("--generate"))
        let style = try await CLI.run(["emulate", "--generate", CLI.directory(), "--boolean-style", "yes"])
        #expect(style.status == 64)
        let event = try await CLI.run(["emulate", "--generate", CLI.directory(), "--account-deletion-event", "gone"])
        #expect(event.status == 64)
        let badKey = try await CLI.run([
            "emulate", "--team-id", Fixtures.teamID, "--key-id", Fixtures.keyID, "--key-file", Fixtures.path("AuthKey_TESTKEY123.pub.pem"), "--port", "0",
        ])
        #expect(badKey.status == 64)
        #expect(badKey.stderr.contains("P-256"))
    }

    @Test("token verify with an issuer URL reads its discovery document, and refuses one naming another issuer (RFC 8414)")
    func discovery() async throws {
        try await EmulatorHarness.with { harness in
            let token = Fixtures.appleKey.sign(claims: appleClaims(issuedAt: Date()))
            let foreign = try await CLI.run(["token", "verify", token, "--provider", harness.emulator.googleBaseURL, "--audience", "x"])
            #expect(foreign.status == 1)
            #expect(foreign.stdout.contains("must be identical"), "\(foreign.stdout)")
            let noDiscovery = try await CLI.run(["token", "verify", token, "--provider", harness.emulator.baseURL + "/nothing", "--audience", "x"])
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

/// A TCP socket listening on a free loopback port, closed on deinit: a port that is certainly in use.
final class ListeningSocket {
    let descriptor: Int32
    let port: Int

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(descriptor, 1) == 0 else { throw HarnessError("cannot listen on loopback") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}
