import Foundation
import LatchkeyCore
import LatchkeyStore
import LatchkeyTestSupport
import Testing

@Suite("Store: migrating databases made by earlier versions")
struct StoreMigrationTests {
    /// `store-v2.sqlite` was written by Latchkey before providers were named (schema version 2): one Apple user
    /// with a grant sealed under `key`, a session, an owed revocation and a used sign-in token.
    static let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

    @Test("a version 2 file migrates in place: grants and owed calls become Apple's, nothing is lost, new features work on it")
    func fromVersion2() async throws {
        let directory = NSTemporaryDirectory() + "latchkey-migration-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/latchkey.sqlite"
        try FileManager.default.copyItem(atPath: Fixtures.path("store-v2.sqlite"), toPath: path)

        let store = try await SQLAuthStore.open(.sqlite(path: path))
        #expect(try await store.appliedMigrations() == [1, 2])
        try await store.migrate()
        #expect(try await store.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])

        let identity = try #require(try await store.identity(provider: "apple", subject: "001234.abcdef.1234"))
        #expect(identity.userID == "user-1")
        #expect(identity.isPrivateEmail == true)
        #expect(identity.claims.isEmpty)
        let grant = try #require(try await store.providerGrant(identityID: identity.id))
        #expect(grant.provider == "apple")
        #expect(try SecretBox(base64Key: Self.key).open(grant.sealedRefreshToken) == "apple-refresh-token")
        let owed = try #require(try await store.outboxItems().first)
        #expect(owed.provider == "apple")
        #expect(owed.kind == "apple_revocation")
        #expect(try await store.session(id: "session-1")?.identityID == identity.id)
        // The used token kept its record through the table's rebuild (version 6).
        #expect(
            try await !store.recordSignInToken(
                provider: "apple", subject: "001234.abcdef.1234", tokenHash: "token-hash-1", expiresAt: Date(timeIntervalSince1970: 1_790_000_600)))

        // What version 3 added works on the migrated file.
        var google = LinkedIdentity(
            id: "identity-2", userID: "user-1", provider: "google", subject: "1087", claims: ["hd": "example.com"], firstSeenAt: Date(), lastSignInAt: Date())
        try await store.addIdentity(google)
        google.claims["azp"] = "web"
        try await store.updateIdentity(google)
        #expect(try await store.identity(provider: "google", subject: "1087")?.claims == ["hd": "example.com", "azp": "web"])
        await #expect(throws: AuthStoreError.duplicate) { try await store.addIdentity(google) }
        await store.close()
    }
}
