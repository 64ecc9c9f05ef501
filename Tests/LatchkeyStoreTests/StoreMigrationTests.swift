import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import SQLKit
import Testing

@testable import LatchkeyStore

@Suite("Store: migrating databases made by earlier versions")
struct StoreMigrationTests {
    /// `store-v2.sqlite` was written by Latchkey before providers were named (schema version 2): one Apple user
    /// with a grant sealed under `key`, a session, an owed revocation and a used sign-in token.
    static let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

    /// A new directory holding a copy of `store-v2.sqlite` as `latchkey.sqlite`.
    static func copyOfVersion2() throws -> String {
        let directory = NSTemporaryDirectory() + "latchkey-migration-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Fixtures.path("store-v2.sqlite"), toPath: directory + "/latchkey.sqlite")
        return directory
    }

    @Test("a version 2 file migrates in place: grants and owed calls become Apple's, nothing is lost, new features work on it")
    func fromVersion2() async throws {
        let directory = try Self.copyOfVersion2()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/latchkey.sqlite"

        let store = try await SQLAuthStore.open(.sqlite(path: path))
        #expect(try await store.appliedMigrations() == [1, 2])
        try await store.migrate()
        #expect(try await store.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])

        let identity = try #require(try await store.identity(provider: "apple", subject: "001234.abcdef.1234"))
        #expect(identity.userID == "user-1")
        #expect(identity.isPrivateEmail == true)
        #expect(identity.claims == [LinkedIdentity.AppleClaim.isPrivateEmail: "true", LinkedIdentity.AppleClaim.realUserStatus: "2"])
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

    @Test("version 11 moves every Apple fact into the identity's claims and empties the columns; a row an earlier release writes still reads whole")
    func appleFactsIntoClaims() async throws {
        let directory = try Self.copyOfVersion2()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/latchkey.sqlite"
        let store = try await SQLAuthStore.open(.sqlite(path: path))
        // Every Apple column set, as a release before version 11 left them.
        try await store.longWrite { db in
            try await db.raw("UPDATE identities SET transfer_subject = '000999.previous.team', email_forwarding_enabled = 0 WHERE id = 'identity-1'").run()
        }
        try await store.migrate()

        let migrated = try #require(try await store.identity(provider: "apple", subject: "001234.abcdef.1234"))
        #expect(migrated.isPrivateEmail == true)
        #expect(migrated.realUserStatus == 2)
        #expect(migrated.transferSubject == "000999.previous.team")
        #expect(migrated.emailForwardingEnabled == false)
        #expect(migrated.email == "ann@privaterelay.appleid.com")
        #expect(migrated.givenName == "Ann")
        let columns = try await store.longWrite { db in
            try await db.raw("SELECT is_private_email, real_user_status, transfer_subject, email_forwarding_enabled FROM identities").first()
        }
        let row = try #require(columns)
        for column in ["is_private_email", "real_user_status", "transfer_subject", "email_forwarding_enabled"] {
            #expect(try row.decodeNil(column: column), "\(column)")
        }

        // An earlier release beside this one in a fleet writes the columns only, with claims of its own.
        try await store.longWrite { db in
            try await db.raw(
                """
                INSERT INTO identities (id, user_id, provider, subject, email, is_private_email, real_user_status, transfer_subject,
                  email_forwarding_enabled, claims, first_seen_at, last_sign_in_at)
                VALUES ('identity-3', 'user-1', 'apple', '009876.fedcba.9876', 'bo@privaterelay.appleid.com', 1, 1, NULL, 1, '{"org_id":"org-1"}', 1, 1)
                """
            ).run()
        }
        let written = try #require(try await store.identity(provider: "apple", subject: "009876.fedcba.9876"))
        #expect(written.isPrivateEmail == true)
        #expect(written.realUserStatus == 1)
        #expect(written.transferSubject == nil)
        #expect(written.emailForwardingEnabled == true)
        #expect(written.claims["org_id"] == "org-1")
        // The claims win over a column an earlier release changed afterwards only where they hold the fact.
        var changed = written
        changed.emailForwardingEnabled = false
        try await store.updateIdentity(changed)
        #expect(try await store.identity(provider: "apple", subject: "009876.fedcba.9876")?.emailForwardingEnabled == false)
        await store.close()
    }

    @Test(
        "version 11's move of Apple's facts runs on each database: values into the claims beside the ones there, columns emptied",
        arguments: StoreConformanceTests.kinds)
    func appleFactsMoveOnEachDatabase(_ kind: StoreConformanceTests.Kind) async throws {
        let path = NSTemporaryDirectory() + "latchkey-test-\(UUID().uuidString).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let location: StoreLocation =
            kind == .postgres ? .postgres(url: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"]!) : .sqlite(path: path)
        let store = try await SQLAuthStore.open(location)
        try await store.migrate()
        let id = UUID().uuidString
        let subject = "000777.\(id).1"
        try await store.longWrite { db in
            try await db.raw("INSERT INTO users (id, created_at) VALUES (\(bind: id), 1)").run()
            try await db.raw(
                """
                INSERT INTO identities (id, user_id, provider, subject, is_private_email, real_user_status, transfer_subject, email_forwarding_enabled,
                  claims, first_seen_at, last_sign_in_at)
                VALUES (\(bind: id), \(bind: id), 'apple', \(bind: subject), 0, 2, 'old "team" sub', 1, '{"org_id":"org-9"}', 1, 1)
                """
            ).run()
            try await Migrations.moveAppleFactsToClaims(db)
        }
        let moved = try await store.longWrite { db in
            try await db.raw("SELECT * FROM identities WHERE id = \(bind: id)").first()
        }
        let row = try #require(moved)
        for column in ["is_private_email", "real_user_status", "transfer_subject", "email_forwarding_enabled"] {
            #expect(try row.decodeNil(column: column), "\(column)")
        }
        #expect(
            try SQLAuthStore.identity(row).claims == [
                "org_id": "org-9", "is_private_email": "false", "real_user_status": "2", "transfer_sub": #"old "team" sub"#, "email_forwarding_enabled": "true",
            ])
        await store.close()
    }
}
