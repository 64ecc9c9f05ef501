import Foundation
import Testing

/// `latchkey users import` as an operator runs it: exit codes, the report, a rerun, and a run killed midway.
@Suite("CLI: users import")
struct ImportCommandTests {
    static func fixture(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("LatchkeyImportTests/Fixtures/\(name)").path
    }

    @Test("imports a Firebase export with a report, reruns as already_imported, --strict exits 1 on conflicts, an unreadable source exits 1")
    func exitCodesAndReport() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["LATCHKEY_DATABASE_URL": directory + "/db.sqlite"]
        let report = directory + "/report.json"
        let first = try await CLI.run(
            ["users", "import", "--from", "firebase", Self.fixture("firebase-users.json"), "--report", report], environment: environment)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("4 imported (1 disabled)"))
        let written = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: report))) as? [String: Any])
        let users = try #require(written["users"] as? [[String: Any]])
        #expect(users.count == 6 && users.contains { $0["outcome"] as? String == "skipped" && $0["email"] != nil })

        let again = try await CLI.run(["users", "import", "--from", "firebase", Self.fixture("firebase-users.json"), "--json"], environment: environment)
        #expect(again.status == 0 && again.json["alreadyImported"] as? Int == 4 && again.json["imported"] as? Int == 0)

        // The Auth0 export holds the same Google and Apple accounts: conflicts, never moved; --strict says so with 1.
        let auth0 = ["users", "import", "--from", "auth0", Self.fixture("auth0-users.ndjson.gz")]
        #expect(try await CLI.run(auth0 + ["--dry-run"], environment: environment).status == 0)
        let strict = try await CLI.run(auth0 + ["--strict"], environment: environment)
        #expect(strict.status == 1 && strict.stdout.contains("conflict"))

        let old = try await CLI.run(["users", "import", "--from", "firebase", Self.fixture("firebase-old-apple.json")], environment: environment)
        #expect(old.status == 1 && old.stderr.contains("15.19.0"))
        #expect(try await CLI.run(["users", "import", "--from", "firebase", directory + "/missing.json"], environment: environment).status == 1)
        #expect(try await CLI.run(["users", "import", "--from", "okta", "x"], environment: environment).status == 64)
    }

    @Test("a run killed midway keeps the batches it committed; the next run continues and imports every user once")
    func killedMidway() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let count = 30_000
        let users = (0..<count).map { index in
            #"{"localId":"uid\#(index)","email":"u\#(index)@example.com","emailVerified":true,"createdAt":"1700000000000","#
                + #""providerUserInfo":[{"providerId":"google.com","rawId":"1\#(String(format: "%020d", index))"}]}"#
        }
        let export = directory + "/export.json"
        try Data((#"{"users":["# + users.joined(separator: ",") + "]}").utf8).write(to: URL(fileURLWithPath: export))
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LATCHKEY_") }.merging([
            "LATCHKEY_DATABASE_URL": directory + "/db.sqlite"
        ]) { $1 }

        let process = Process()
        process.executableURL = CLI.executable
        // One user per transaction: each commit waits for the disk, so the run is still going when it is killed.
        process.arguments = ["users", "import", "--from", "firebase", export, "--batch-size", "1"]
        process.environment = environment
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        let progressed = AsyncStream<Void>.makeStream()
        errors.fileHandleForReading.readabilityHandler = { handle in
            if String(decoding: handle.availableData, as: UTF8.self).contains("… ") { progressed.continuation.yield() }
        }
        try process.run()
        var iterator = progressed.stream.makeAsyncIterator()
        // Two batches committed, then kill -9.
        _ = await iterator.next()
        _ = await iterator.next()
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        errors.fileHandleForReading.readabilityHandler = nil
        #expect(process.terminationReason == .uncaughtSignal)

        let resumed = try await CLI.run(
            ["users", "import", "--from", "firebase", export, "--json"], environment: ["LATCHKEY_DATABASE_URL": directory + "/db.sqlite"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let already = try #require(resumed.json["alreadyImported"] as? Int)
        #expect(already >= 2 && already < count, "the killed run committed \(already)")
        #expect(resumed.json["imported"] as? Int == count - already)
        let third = try await CLI.run(
            ["users", "import", "--from", "firebase", export, "--json"], environment: ["LATCHKEY_DATABASE_URL": directory + "/db.sqlite"])
        #expect(third.json["alreadyImported"] as? Int == count)
    }
}
