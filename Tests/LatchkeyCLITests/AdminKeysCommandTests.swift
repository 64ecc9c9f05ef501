import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("CLI: admin keys", .serialized)
struct AdminKeysCommandTests {
    @Test("create prints the key alone, once; list never shows it; revoke ends it; --dev works on serve --dev's database")
    func lifecycle() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // serve --dev keeps its database and key under latchkey-data/ in the folder it runs in; migrate makes the same.
        #expect(try await CLI.run(["migrate"], directory: directory).status == 0)
        let made = try await CLI.run(["admin-keys", "create", "--name", "backend", "--dev"], directory: directory)
        #expect(made.status == 0, "\(made.stderr)")
        let key = made.stdout.trimmingCharacters(in: .newlines)
        #expect(made.stdout == key + "\n")
        #expect(key.hasPrefix("lka_") && key.count == 47)
        let reader = try await CLI.run(["admin-keys", "create", "--name", "support", "--read-only", "--dev", "--json"], directory: directory)
        #expect(reader.json["readOnly"] as? Bool == true)
        #expect((reader.json["key"] as? String)?.hasPrefix("lka_") == true)

        let taken = try await CLI.run(["admin-keys", "create", "--name", "backend", "--dev", "--json"], directory: directory)
        #expect(taken.status == 1)
        #expect(taken.json["error"] as? String == "name_taken")
        #expect(try await CLI.run(["admin-keys", "create", "--name", "no spaces", "--dev"], directory: directory).status == 64)

        let listed = try await CLI.run(["admin-keys", "list", "--dev", "--json"], directory: directory)
        let keys = listed.json["keys"] as? [[String: Any]] ?? []
        #expect(keys.map { $0["name"] as? String } == ["backend", "support"])
        #expect(!listed.stdout.contains(key))
        #expect(try await CLI.run(["admin-keys", "list", "--dev"], directory: directory).stdout.contains("support  read-only"))

        #expect(try await CLI.run(["admin-keys", "revoke", "support", "--dev"], directory: directory).status == 0)
        #expect(try await CLI.run(["admin-keys", "revoke", "nobody", "--dev"], directory: directory).status == 1)
        let after = try await CLI.run(["admin-keys", "list", "--dev", "--json"], directory: directory).json["keys"] as? [[String: Any]] ?? []
        #expect(after.last?["revokedAt"] != nil)
        #expect(after.first?["revokedAt"] == nil)

        let both = try await CLI.run(["admin-keys", "list", "--dev", "--config", directory + "/none.json"], directory: directory)
        #expect(both.status == 64)
        #expect(both.stderr.contains("--dev"))
    }
}
