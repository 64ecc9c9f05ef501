import Foundation
import LatchkeyEmulator
import LatchkeyTestSupport
import Testing

/// `latchkey apple transfer` and what `doctor` says about imports and transfers, against the emulator.
@Suite("CLI: apple transfer and doctor's store findings")
struct TransferCommandTests {
    @Test("prepare refuses the team's own id (64), prepares, status counts, complete moves under the recipient's settings; doctor counts each stage")
    func prepareStatusComplete() async throws {
        try await EmulatorHarness.with { emulator in
            let directory = CLI.directory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let sub = try await emulator.createUser(email: "ann@example.com")
            let export = #"{"users":[{"localId":"ann","email":"ann@example.com","providerUserInfo":[{"providerId":"apple.com","rawId":"\#(sub)"}]}]}"#
            try Data(export.utf8).write(to: URL(fileURLWithPath: directory + "/export.json"))
            var config = DoctorAndAdminTests.goodConfig(baseURL: emulator.emulator.baseURL)
            config["database"] = ["url": directory + "/db.sqlite"]
            try CLI.write(config, to: directory + "/sending.json")
            let sending = ["--config", directory + "/sending.json"]
            #expect(try await CLI.run(["users", "import", "--from", "firebase", directory + "/export.json"] + sending).status == 0)

            func findings(_ file: String) async throws -> [[String: String]] {
                let result = try await CLI.run(["doctor", "--config", file, "--json"])
                return (result.json["findings"] as? [[String: Any]] ?? []).map { $0.compactMapValues { $0 as? String } }
            }
            #expect(try await findings(directory + "/sending.json").contains { $0["check"] == "store.appleGrants" && $0["status"] == "warning" })

            let own = try await CLI.run(["apple", "transfer", "prepare", "--target-team", Fixtures.teamID] + sending)
            #expect(own.status == 64 && own.stderr.contains("own id"))
            let prepared = try await CLI.run(["apple", "transfer", "prepare", "--target-team", "RECIPIENT1", "--json"] + sending)
            #expect(prepared.status == 0, "\(prepared.stderr)")
            #expect(prepared.json["prepared"] as? Int == 1)
            let status = try await CLI.run(["apple", "transfer", "status", "--json"] + sending)
            #expect(status.json["prepared"] as? Int == 1 && status.json["left"] as? Int == 1 && status.json["targetTeam"] as? String == "RECIPIENT1")
            #expect(try await findings(directory + "/sending.json").contains { $0["check"] == "apple.transfer" && $0["status"] == "warning" })

            // The app moves; the recipient's settings complete the move.
            let moved = try await emulator.send("POST", "/emulator/apple/transfers", json: ["clientId": Fixtures.bundleID, "toTeamId": "RECIPIENT1"])
            try Data(try #require(moved.json["privateKey"] as? String).utf8).write(to: URL(fileURLWithPath: directory + "/recipient.p8"))
            var apple = try #require(config["apple"] as? [String: Any])
            apple["teamId"] = "RECIPIENT1"
            apple["keyId"] = try #require(moved.json["keyId"] as? String)
            apple["privateKeyFile"] = directory + "/recipient.p8"
            config["apple"] = apple
            try CLI.write(config, to: directory + "/recipient.json")
            let recipient = ["--config", directory + "/recipient.json"]
            #expect(try await CLI.run(["apple", "transfer", "complete", "--dry-run", "--json"] + recipient).json["moved"] as? Int == 1)
            let complete = try await CLI.run(["apple", "transfer", "complete", "--json"] + recipient)
            #expect(complete.status == 0 && complete.json["moved"] as? Int == 1, "\(complete.stdout) \(complete.stderr)")
            let after = try await CLI.run(["apple", "transfer", "status"] + recipient)
            #expect(after.stdout.contains("moved: 1; left: 0") && after.stdout.contains("60 day(s) left"), "\(after.stdout)")
            #expect(try await findings(directory + "/recipient.json").contains { $0["check"] == "apple.transfer" && $0["status"] == "ok" })
        }
    }
}

/// What `doctor` says about e-mail codes and App Review access.
@Suite("CLI: doctor and e-mail codes")
struct EmailDoctorTests {
    @Test("an App Review access that expires within 7 days is a warning, an expired one an error; no SMTP server is a warning")
    func reviewAccess() async throws {
        let soon = Date().addingTimeInterval(3 * 86_400).formatted(.iso8601)
        let past = Date().addingTimeInterval(-86_400).formatted(.iso8601)
        var config = DoctorAndAdminTests.goodConfig()
        config["email"] = [
            "from": "sign-in@example.com",
            "reviewAccess": [
                ["address": "soon@example.com", "code": "12345678", "expiresAt": soon], ["address": "gone@example.com", "code": "87654321", "expiresAt": past],
            ],
        ]
        let result = try await DoctorAndAdminTests().doctor(config)
        let findings = (result.json["findings"] as? [[String: Any]] ?? []).map { $0.compactMapValues { $0 as? String } }
        #expect(findings.contains { $0["check"] == "email.reviewAccess" && $0["status"] == "warning" && $0["message"]?.contains("soon@example.com") == true })
        #expect(findings.contains { $0["check"] == "email.reviewAccess" && $0["status"] == "error" && $0["message"]?.contains("gone@example.com") == true })
        #expect(findings.contains { $0["check"] == "email" && $0["status"] == "warning" })
        #expect(result.status == 1)
        #expect(!result.stdout.contains("12345678") && !result.stdout.contains("87654321"))
    }
}
