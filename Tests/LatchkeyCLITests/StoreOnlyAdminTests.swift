import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyStore
import LatchkeyTestSupport
import Testing

@Suite("CLI: administration with the store's settings only", .serialized)
struct StoreOnlyAdminTests {
    @Test("with no provider configured, users delete still deletes: the provider revocation waits in the outbox for a server that has the secrets")
    func deletionWithoutProviderSecrets() async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = SecretBox.generateKey()
        let database = directory + "/latchkey.sqlite"
        // Only what the store needs: where it is and the key that seals what is in it.
        try CLI.write(["mode": "production", "encryptionKey": key, "database": ["url": database]], to: directory + "/admin.json")
        let config = directory + "/admin.json"
        #expect(try await CLI.run(["migrate", "--config", config]).status == 0)

        let store = try await SQLAuthStore.open(.sqlite(path: database))
        let now = Date()
        let user = UserAccount(id: newIdentifier(), createdAt: now, email: "ops@example.com")
        let identity = LinkedIdentity(id: newIdentifier(), userID: user.id, provider: "apple", subject: "000123.ops.0456", firstSeenAt: now, lastSignInAt: now)
        try await store.createUser(user, identity: identity)
        try await store.saveProviderGrant(
            ProviderGrant(
                identityID: identity.id, provider: "apple", clientID: "com.example.app", sealedRefreshToken: try SecretBox(base64Key: key).seal("r-apple"),
                lastValidatedAt: now, createdAt: now))

        let deleted = try await CLI.run(["users", "delete", user.id, "--config", config, "--json"])
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(deleted.json["revocationsPending"] as? Int == 1, "\(deleted.stdout)")
        #expect(try await store.user(id: user.id) == nil)
        let owed = try await store.outboxItems()
        #expect(owed.map(\.provider) == ["apple"])
        #expect(owed.first?.completedAt == nil)
        await store.close()
    }
}
