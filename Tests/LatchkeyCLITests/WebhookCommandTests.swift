import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("CLI: webhooks commands and doctor's webhook checks", .serialized)
struct WebhookCommandTests {
    @Test("webhooks secret prints whsec_ and 32 random bytes, alone on its line")
    func secret() async throws {
        let first = try await CLI.run(["webhooks", "secret"])
        let second = try await CLI.run(["webhooks", "secret"])
        #expect(first.status == 0)
        let secret = first.stdout.trimmingCharacters(in: .newlines)
        #expect(first.stdout == secret + "\n")
        #expect(try WebhookSignature.key(fromSecret: secret).get().count == 32)
        #expect(secret != second.stdout.trimmingCharacters(in: .newlines))
    }

    @Test("list counts each endpoint's deliveries, retry refuses an unknown id, test refuses a missing index and reports an endpoint that is down")
    func listTestRetry() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let secret = WebhookEndpoint.generateSecret()
        let down = "http://127.0.0.1:\(Fleet.freePort())/hooks"
        let config: [String: Any] = [
            "mode": "development", "encryptionKey": SecretBox.generateKey(), "database": ["url": directory + "/latchkey.sqlite"],
            "webhooks": [["url": down, "secret": secret], ["url": "https://backend.example/hooks", "secret": secret, "events": "user.deleted"]],
        ]
        try CLI.write(config, to: directory + "/latchkey.json")
        let path = directory + "/latchkey.json"
        #expect(try await CLI.run(["migrate", "--config", path]).status == 0)

        let listed = try await CLI.run(["webhooks", "list", "--config", path, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let endpoints = listed.json["endpoints"] as? [[String: Any]] ?? []
        #expect(endpoints.map { $0["url"] as? String } == [down, "https://backend.example/hooks"])
        #expect(endpoints.map { $0["pending"] as? Int } == [0, 0])
        #expect(endpoints.last?["events"] as? [String] == ["user.deleted"])
        #expect(!listed.stdout.contains(secret.dropFirst(6)))

        let retried = try await CLI.run(["webhooks", "retry", "msg_nothing.0", "--config", path, "--json"])
        #expect(retried.status == 1)
        #expect(retried.json["error"] as? String == "not_found")

        let missing = try await CLI.run(["webhooks", "test", "7", "--config", path])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("webhooks[7]"))
        let unreachable = try await CLI.run(["webhooks", "test", "0", "--config", path, "--json"])
        #expect(unreachable.status == 1)
        #expect(unreachable.json["error"] as? String == "endpoint_unreachable", "\(unreachable.stdout)")
    }

    @Test("doctor names a webhook URL that is not https or loopback, and a secret that is not whsec_, without printing the secret")
    func doctor() async throws {
        func findings(_ webhooks: [[String: String]]) async throws -> (CLI.Result, [[String: String]]) {
            let directory = CLI.directory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try CLI.write(["mode": "development", "webhooks": webhooks], to: directory + "/latchkey.json")
            let result = try await CLI.run(["doctor", "--config", directory + "/latchkey.json", "--json"])
            return (result, (result.json["findings"] as? [[String: Any]] ?? []).map { $0.compactMapValues { $0 as? String } })
        }
        let (badURL, urlFindings) = try await findings([["url": "http://backend.example/hooks", "secret": WebhookEndpoint.generateSecret()]])
        #expect(badURL.status == 1)
        #expect(urlFindings.contains { $0["status"] == "error" && $0["message"]?.contains("webhooks[0].url") == true }, "\(urlFindings)")
        let (badSecret, secretFindings) = try await findings([["url": "https://b.example/", "secret": "hunter2-hunter2"]])
        #expect(badSecret.status == 1)
        #expect(secretFindings.contains { $0["status"] == "error" && $0["message"]?.contains("webhooks[0].secret") == true }, "\(secretFindings)")
        #expect(!badSecret.stdout.contains("hunter2"))
        let (_, good) = try await findings([["url": "https://c.example/", "secret": WebhookEndpoint.generateSecret(), "events": "user.deleted"]])
        #expect(good.contains { $0["check"] == "webhooks[0]" && $0["status"] == "ok" && $0["message"]?.contains("user.deleted") == true }, "\(good)")
    }
}
