import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyStore
import LatchkeyTestSupport
import Testing

@Suite("CLI: doctor and administration", .serialized)
struct DoctorAndAdminTests {
    static func goodConfig(baseURL: String = "https://appleid.apple.com") -> [String: Any] {
        [
            "mode": "production", "publicUrl": "https://auth.example.com", "encryptionKey": SecretBox.generateKey(),
            "apple": [
                "teamId": Fixtures.teamID, "keyId": Fixtures.keyID, "privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"),
                "clientIds": "\(Fixtures.bundleID),\(Fixtures.servicesID)", "baseUrl": baseURL,
                "redirectUris": "https://app.example.com/callback", "notificationUrl": "https://auth.example.com/v1/apple/notifications",
            ] as [String: Any],
        ]
    }

    func doctor(_ config: [String: Any], live: Bool = false) async throws -> CLI.Result {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try CLI.write(config, to: directory + "/latchkey.json")
        return try await CLI.run(["doctor", "--config", directory + "/latchkey.json", "--json"] + (live ? ["--live"] : []))
    }

    func findings(_ result: CLI.Result) -> [[String: String]] {
        (result.json["findings"] as? [[String: Any]] ?? []).map { $0.compactMapValues { $0 as? String } }
    }

    @Test("a good set-up has no errors, and no key it does not read")
    func good() async throws {
        let result = try await doctor(Self.goodConfig())
        #expect(result.status == 0, "\(result.stdout)")
        #expect(result.json["errors"] as? Int == 0)
        #expect(!findings(result).contains { $0["message"]?.contains("not a setting") == true }, "\(result.stdout)")
    }

    @Test("misspelt keys in the file and LATCHKEY_* variables that name no setting are warnings with the nearest real name")
    func misspeltSettings() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var config = Self.goodConfig()
        var apple = config["apple"] as! [String: Any]
        apple["teamID"] = apple.removeValue(forKey: "teamId")
        config["apple"] = apple
        config["acessToken"] = ["lifetime": 300]
        config["zzz"] = "unrelated"
        try CLI.write(config, to: directory + "/latchkey.json")
        let result = try await CLI.run(
            ["doctor", "--config", directory + "/latchkey.json", "--json"],
            environment: ["LATCHKEY_ACESS_TOKEN_LIFETIME": "300", "LATCHKEY_RATE_LIMIT_PER_IP": "10"])
        let messages = findings(result).filter { $0["status"] == "warning" }.compactMap { $0["message"] }
        #expect(messages.contains { $0.contains("apple.teamID, which is not a setting; did you mean apple.teamId?") }, "\(messages)")
        #expect(messages.contains { $0.contains("acessToken.lifetime, which is not a setting; did you mean accessToken.lifetime?") }, "\(messages)")
        #expect(messages.contains { $0.hasSuffix("zzz, which is not a setting") }, "\(messages)")
        #expect(
            messages.contains { $0.contains("LATCHKEY_ACESS_TOKEN_LIFETIME is not a setting; did you mean LATCHKEY_ACCESS_TOKEN_LIFETIME") },
            "\(messages)")
        // A variable that is a setting is not flagged.
        #expect(!messages.contains { $0.contains("LATCHKEY_RATE_LIMIT_PER_IP") }, "\(messages)")
        // serve refuses the set-up (apple.teamId is missing) and says what the file has instead.
        let serve = try await CLI.run(["serve", "--config", directory + "/latchkey.json"], directory: directory)
        #expect(serve.status == 1)
        #expect(serve.stderr.contains("apple.teamId is missing") && serve.stderr.contains("did you mean apple.teamId?"), "\(serve.stderr)")
    }

    static let misconfigurations: [(String, String, String, String)] = [
        ("teamId", "apple.teamId", "team-1", "10 upper-case"),
        ("keyId", "apple.keyId", "abc", "10 upper-case"),
        ("privateKeyFile", "apple.privateKeyFile", "/nonexistent/AuthKey.p8", "cannot be read"),
        ("privateKeyFile", "apple.privateKeyFile", Fixtures.path("p384.p8"), "P-384"),
        ("privateKeyFile", "apple.privateKeyFile", Fixtures.path("AuthKey_TESTKEY123.pub.pem"), "public key"),
        ("clientIds", "apple.clientIds", "\(Fixtures.teamID).com.example.app", "Team ID"),
        ("clientIds", "apple.clientIds", "not a bundle id", "does not look like"),
        ("redirectUris", "apple.redirectUris", "https://localhost/callback", "localhost"),
        ("redirectUris", "apple.redirectUris", "https://10.0.0.1/callback", "IP address"),
        ("redirectUris", "apple.redirectUris", "http://app.example.com/callback", "not HTTPS"),
        ("notificationUrl", "apple.notificationUrl", "http://auth.example.com/v1/apple/notifications", "not HTTPS"),
    ]

    @Test("each misconfiguration is an error finding that says what to fix", arguments: misconfigurations)
    func misconfigured(field: String, check: String, value: String, mention: String) async throws {
        var config = Self.goodConfig()
        var apple = config["apple"] as! [String: Any]
        apple[field] = value
        config["apple"] = apple
        let result = try await doctor(config)
        #expect(result.status == 1, "\(result.stdout)")
        let finding = findings(result).first { $0["check"] == check && $0["status"] == "error" }
        #expect(finding?["message"]?.contains(mention) == true, "\(findings(result))")
        #expect(finding?["fix"] != nil)
    }

    @Test("nonce matching that lets a stolen token carry its own proof is a warning in doctor", arguments: ["verbatim", "hashed_or_verbatim"])
    func weakNonceMatching(mode: String) async throws {
        var config = Self.goodConfig()
        var apple = config["apple"] as! [String: Any]
        apple["nonceMatching"] = mode
        config["apple"] = apple
        let result = try await doctor(config)
        #expect(result.status == 0, "\(result.stdout)")
        let warning = findings(result).first { $0["check"] == "config" && $0["status"] == "warning" }
        #expect(warning?["message"]?.contains("apple.nonceMatching is \(mode)") == true, "\(findings(result))")
        #expect(!findings(try await doctor(Self.goodConfig())).contains { $0["check"] == "config" && $0["status"] == "warning" })
    }

    @Test("production without an encryption key or public URL, and a bad key, are errors; missing Apple settings are named")
    func productionAndMissing() async throws {
        var config = Self.goodConfig()
        config["encryptionKey"] = "c2hvcnQ="
        config["publicUrl"] = "http://auth.example.com"
        let result = try await doctor(config)
        #expect(result.status == 1)
        #expect(findings(result).contains { $0["check"] == "encryptionKey" && $0["status"] == "error" })
        #expect(findings(result).contains { $0["check"] == "publicUrl" && $0["status"] == "error" })
        // Both set: the file is the key `serve` uses, so it is the one checked.
        let keyDirectory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: keyDirectory) }
        let keyFile = keyDirectory + "/encryption.key"
        try "c2hvcnQ=".write(toFile: keyFile, atomically: true, encoding: .utf8)
        var both = Self.goodConfig()
        both["encryptionKeyFile"] = keyFile
        #expect(findings(try await doctor(both)).contains { $0["check"] == "encryptionKey" && $0["status"] == "error" })
        let empty = try await doctor(["mode": "development"])
        #expect(
            Set(findings(empty).filter { $0["status"] == "error" }.compactMap { $0["check"] }).isSuperset(of: [
                "apple.teamId", "apple.keyId", "apple.privateKeyFile", "apple.clientIds",
            ]))
        let human = try await CLI.run(["doctor"])
        #expect(human.stdout.contains("error   apple.teamId: not set"))
        #expect(human.stdout.contains("fix:"))
    }

    @Test("--live proves the client secret against the emulator, and lists causes when it is refused")
    func live() async throws {
        try await EmulatorHarness.with { harness in
            let accepted = try await doctor(Self.goodConfig(baseURL: harness.emulator.baseURL), live: true)
            #expect(accepted.status == 0, "\(accepted.stdout)")
            #expect(findings(accepted).filter { $0["check"] == "live" && $0["status"] == "ok" }.count == 2)

            var wrongKey = Self.goodConfig(baseURL: harness.emulator.baseURL)
            var apple = wrongKey["apple"] as! [String: Any]
            apple["keyId"] = "OTHERKEY00"
            wrongKey["apple"] = apple
            let refused = try await doctor(wrongKey, live: true)
            #expect(refused.status == 1)
            let finding = try #require(findings(refused).first { $0["check"] == "live" && $0["status"] == "error" })
            #expect(finding["message"]?.contains("invalid_client") == true)
            #expect(finding["fix"]?.contains("OTHERKEY00") == true)
            #expect(finding["fix"]?.contains("DER") == true)
        }
    }

    @Test("a set-up without Apple but with other providers has no Apple errors; --live reads each provider's discovery and keys")
    func otherProviders() async throws {
        try await EmulatorHarness.with { harness in
            let google: [String: Any] = [
                "clientIds": "1234-abc.apps.googleusercontent.com", "discoveryUrl": harness.emulator.baseURL + "/google/.well-known/openid-configuration",
            ]
            let config: [String: Any] = [
                "mode": "development", "google": google,
                "dropbox": ["appKey": EmulatorHarness.providerClientID, "apiUrl": harness.emulator.baseURL + "/dropbox", "acceptAccessTokens": true],
                "facebook": ["appId": "1234", "jwksUrl": harness.emulator.baseURL + "/facebook/.well-known/oauth/openid/jwks/"],
            ]
            let result = try await doctor(config, live: true)
            #expect(result.status == 0, "\(result.stdout)")
            let found = findings(result)
            #expect(found.contains { $0["check"] == "providers" && $0["status"] == "ok" && $0["message"]?.contains("apple") == true })
            #expect(!found.contains { $0["check"]?.hasPrefix("apple.") == true && $0["status"] == "error" }, "\(found)")
            #expect(found.contains { $0["check"] == "live" && $0["status"] == "ok" && $0["message"]?.contains("signing key") == true }, "\(found)")
            #expect(found.contains { $0["check"] == "dropbox.acceptAccessTokens" && $0["status"] == "warning" })
            #expect(found.contains { $0["check"] == "live" && $0["status"] == "ok" && $0["message"]?.hasPrefix("Dropbox accepted the client") == true })
            #expect(found.contains { $0["check"] == "facebook.appSecret" && $0["status"] == "warning" })
            #expect(found.contains { $0["check"] == "live" && $0["status"] == "ok" && $0["message"]?.hasPrefix("Facebook: Limited Login keys read") == true })

            var unreachable = config
            unreachable["google"] = ["clientIds": "1234-abc.apps.googleusercontent.com", "discoveryUrl": harness.emulator.baseURL + "/nothing-here"]
            let broken = try await doctor(unreachable, live: true)
            #expect(broken.status == 1)
            #expect(findings(broken).contains { $0["check"] == "live" && $0["status"] == "error" && $0["fix"]?.contains("google") == true })
        }
    }

    @Test("provider modules: doctor lists each, and --live sees whether GitHub, Discord and X accept the client and reads GitLab's discovery")
    func modules() async throws {
        try await EmulatorHarness.with { harness in
            let base = harness.emulator.baseURL
            let id = EmulatorHarness.providerClientID
            var config: [String: Any] = [
                "mode": "development", "github": ["clientId": id, "clientSecret": id + "-secret", "baseUrl": base + "/github", "apiUrl": base + "/github/api"],
                "gitlab": ["clientIds": id, "baseUrl": base + "/gitlab"], "discord": ["clientId": id, "baseUrl": base + "/discord"],
                "x": ["clientId": id, "clientSecret": id + "-secret", "authorizeUrl": base + "/x/i/oauth2/authorize", "apiUrl": base + "/x"],
            ]
            let result = try await doctor(config, live: true)
            #expect(result.status == 0, "\(result.stdout)")
            let found = findings(result)
            for check in ["github", "gitlab", "discord", "x"] { #expect(found.contains { $0["check"] == check }, "\(check)") }
            let live = found.filter { $0["check"] == "live" && $0["status"] == "ok" }.compactMap { $0["message"] }
            for name in ["GitHub accepted the client", "Discord accepted the client", "X accepted the client", "GitLab: discovery read"] {
                #expect(live.contains { $0.hasPrefix(name) }, "\(name) in \(live)")
            }

            config["github"] = ["clientId": id, "clientSecret": "wrong", "baseUrl": base + "/github", "apiUrl": base + "/github/api"]
            let refused = try await doctor(config, live: true)
            #expect(refused.status == 1)
            #expect(findings(refused).contains { $0["check"] == "live" && $0["status"] == "error" && $0["message"]?.contains("github.*") == true })
        }
    }

    @Test("invites create prints a code once, list shows uses and state, revoke ends it; mistakes exit 1 or 64")
    func invites() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try CLI.write(["mode": "development", "signup": ["mode": "invite"], "database": ["url": directory + "/latchkey.sqlite"]], to: directory + "/c.json")
        let config = ["--config", directory + "/c.json"]
        #expect(try await CLI.run(["migrate"] + config, directory: directory).status == 0)
        let created = try await CLI.run(["invites", "create", "--uses", "3", "--note", "beta"] + config, directory: directory)
        #expect(created.status == 0, "\(created.stderr)")
        let code = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(code.hasPrefix("inv_") && code.count == 36, "\(created.stdout)")
        #expect(created.stderr.contains("3 use(s)"))
        let json = try await CLI.run(["invites", "create", "--json", "--expires-in", "60"] + config, directory: directory).json
        let second = try #require(json["id"] as? String)
        #expect((json["code"] as? String)?.hasPrefix("inv_") == true)
        #expect(json["expiresAt"] is Int)

        #expect(try await CLI.run(["invites", "revoke", second] + config, directory: directory).status == 0)
        // Audited as DELETE /admin/v1/invites/{id} audits it.
        let store = try await SQLAuthStore.open(.sqlite(path: directory + "/latchkey.sqlite"))
        let audited = try await store.auditEvents(userID: nil, limit: 50)
        await store.close()
        #expect(audited.contains { $0.kind == "admin_invite_revoked" && $0.detail == "by=cli invite=\(second)" }, "\(audited.map(\.kind))")
        // Made through the same administration service as POST /admin/v1/invites, so audited as it is.
        #expect(audited.filter { $0.kind == "admin_invite_created" && $0.detail.hasPrefix("by=cli invite=") }.count == 2, "\(audited.map(\.kind))")
        let listed = try await CLI.run(["invites", "list", "--json"] + config, directory: directory).json["invites"] as? [[String: Any]] ?? []
        #expect(listed.count == 2)
        #expect(listed.first { $0["id"] as? String == second }?["state"] as? String == "revoked")
        #expect(listed.first { $0["id"] as? String != second }?["note"] as? String == "beta")
        #expect(!(try await CLI.run(["invites", "list"] + config, directory: directory).stdout.contains(code)), "codes are never shown again")

        let missing = try await CLI.run(["invites", "revoke", "no-such-invite"] + config, directory: directory)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no invite no-such-invite"))
        #expect(try await CLI.run(["invites", "create", "--uses", "0"] + config, directory: directory).status == 64)
    }

    @Test("keys, users and sessions commands work on the configured store; deletion revokes at Apple")
    func administration() async throws {
        try await EmulatorHarness.with { harness in
            let directory = CLI.directory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let key = SecretBox.generateKey()
            var config = Self.goodConfig(baseURL: harness.emulator.baseURL)
            config["mode"] = "development"
            config["encryptionKey"] = key
            config["database"] = ["url": directory + "/latchkey.sqlite"]
            try CLI.write(config, to: directory + "/latchkey.json")
            let configPath = directory + "/latchkey.json"

            #expect(try await CLI.run(["migrate", "--config", configPath]).status == 0)
            #expect(try await CLI.run(["users", "list", "--config", configPath]).stdout.contains("no users"))
            let keys = try await CLI.run(["keys", "list", "--config", configPath, "--json"]).json["keys"] as? [[String: Any]] ?? []
            #expect(keys.count == 1)
            let rotated = try await CLI.run(["keys", "rotate", "--config", configPath, "--json"]).json["activeKeyId"] as? String
            let after = try await CLI.run(["keys", "list", "--config", configPath, "--json"]).json["keys"] as? [[String: Any]] ?? []
            #expect(after.count == 2)
            #expect(after.first { $0["keyId"] as? String == rotated }?["state"] as? String == "active")
            #expect(after.contains { $0["state"] as? String == "retiring" })

            // Seed a user with a session and a sealed Apple token, as a sign-in would.
            let store = try await SQLAuthStore.open(.sqlite(path: directory + "/latchkey.sqlite"))
            let now = Date()
            let user = UserAccount(id: newIdentifier(), createdAt: now, email: "cli@example.com")
            let identity = LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: "apple", subject: "000123.cli.0456", firstSeenAt: now, lastSignInAt: now)
            try await store.createUser(user, identity: identity)
            try await store.saveProviderGrant(
                ProviderGrant(
                    identityID: identity.id, provider: "apple", clientID: Fixtures.bundleID,
                    sealedRefreshToken: try SecretBox(base64Key: key).seal("r-apple-token"),
                    lastValidatedAt: now, createdAt: now))
            let family = SessionFamily(
                id: newIdentifier(), userID: user.id, identityID: identity.id, clientID: Fixtures.bundleID, createdAt: now, lastUsedAt: now,
                absoluteExpiresAt: now.addingTimeInterval(3600))
            try await store.createSession(
                family,
                firstToken: RefreshTokenRecord(hash: "h", familyID: family.id, parentHash: nil, createdAt: now, idleExpiresAt: now.addingTimeInterval(3600)))
            await store.close()

            #expect(try await CLI.run(["users", "list", "--config", configPath]).stdout.contains("cli@example.com"))
            let shown = try await CLI.run(["users", "show", user.id, "--config", configPath, "--json"]).json
            #expect((shown["identities"] as? [[String: Any]])?.first?["subject"] as? String == "000123.cli.0456")
            #expect(try await CLI.run(["users", "show", "nobody", "--config", configPath]).status == 1)
            #expect(try await CLI.run(["sessions", "revoke", "--user", user.id, "--config", configPath, "--json"]).json["revokedSessions"] as? Int == 1)
            let reopened = try await SQLAuthStore.open(.sqlite(path: directory + "/latchkey.sqlite"))
            let audited = try await reopened.auditEvents(userID: user.id, limit: 50)
            await reopened.close()
            #expect(audited.contains { $0.kind == "admin_sessions_revoked" && $0.detail == "by=cli sessions=1" }, "\(audited.map(\.kind))")
            let deleted = try await CLI.run(["users", "delete", user.id, "--config", configPath, "--json"])
            #expect(deleted.json["appleTokensRevoked"] as? Int == 1, "\(deleted.stdout)\(deleted.stderr)")
            #expect(try await harness.requestLog().contains { $0["endpoint"] as? String == "/auth/revoke" && $0["status"] as? Int == 200 })
            #expect(try await CLI.run(["users", "list", "--config", configPath]).stdout.contains("no users"))
            #expect(try await CLI.run(["users", "delete", user.id, "--config", configPath]).status == 1)
            let afterDeletion = try await SQLAuthStore.open(.sqlite(path: directory + "/latchkey.sqlite"))
            let deletionAudits = try await afterDeletion.auditEvents(userID: user.id, limit: 50)
            await afterDeletion.close()
            #expect(deletionAudits.contains { $0.kind == "admin_user_deleted" && $0.detail == "by=cli revoked=1 queued=0" }, "\(deletionAudits.map(\.kind))")
            // Revoking the sessions of a user there is not fails, as DELETE /admin/v1/users/{id}/sessions answers 404.
            let unknown = try await CLI.run(["sessions", "revoke", "--user", user.id, "--config", configPath])
            #expect(unknown.status == 1 && unknown.stderr.contains("no user"), "\(unknown.stdout)\(unknown.stderr)")
        }
    }

    @Test("administration commands refuse an SQLite path with no database, and create nothing there")
    func missingDatabase() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let mistyped = directory + "/latchky.sqlite"
        try CLI.write(["mode": "development", "database": ["url": mistyped]], to: directory + "/c.json")
        for command in [["keys", "rotate"], ["keys", "list"], ["users", "list"], ["sessions", "revoke", "--user", "u"], ["invites", "create"]] {
            let result = try await CLI.run(command + ["--config", directory + "/c.json"], directory: directory)
            #expect(result.status == 64, "\(command): \(result.stderr)")
            #expect(result.stderr.contains("no database at \(mistyped)"), "\(result.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["c.json"])
    }

    @Test("bad configuration files exit 64 with one line that names the problem, not the usage text")
    func badConfig() async throws {
        let missing = try await CLI.run(["users", "list", "--config", "/nonexistent.json"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("does not exist"))
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "{ not json".write(toFile: directory + "/bad.json", atomically: true, encoding: .utf8)
        let notJSON = try await CLI.run(["keys", "list", "--config", directory + "/bad.json"])
        #expect(notJSON.status == 64)
        #expect(notJSON.stderr.contains("not valid JSON"))
        // Valid JSON in a shape the loader cannot take is not called invalid JSON.
        try #"{"email": {"servers": [["smtp.example.com", 25]]}}"#.write(toFile: directory + "/shape.json", atomically: true, encoding: .utf8)
        let shape = try await CLI.run(["keys", "list", "--config", directory + "/shape.json"])
        #expect(shape.status == 64)
        #expect(!shape.stderr.contains("not valid JSON") && shape.stderr.contains("is valid JSON, but") && shape.stderr.contains("email"), "\(shape.stderr)")
        try CLI.write(["port": "eighty"], to: directory + "/port.json")
        let badPort = try await CLI.run(["migrate", "--config", directory + "/port.json"])
        #expect(badPort.status == 64)
        #expect(badPort.stderr.contains("port"))
        for result in [missing, notJSON, shape, badPort] {
            #expect(!result.stderr.contains("Usage:"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
    }
}
