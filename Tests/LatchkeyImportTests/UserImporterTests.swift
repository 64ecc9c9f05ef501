import Foundation
import LatchkeyCore
import LatchkeyImport
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyStore
import LatchkeyTestSupport
import Testing

/// The rules of `latchkey users import`, on a real SQLite store: ids kept, never merged by e-mail, nothing moved from
/// another user, idempotent and resumable.
@Suite("Import: users a team already has")
struct UserImporterTests {
    static let apple = SourceIdentity(provider: "apple", subject: "001234.abcdef0123456789abcdef0123456789.1234", email: "x@privaterelay.appleid.com")
    static let google = SourceIdentity(provider: "google", subject: "109876543210987654321", email: "ann@example.com", emailVerified: true)

    static func run(_ store: SQLAuthStore, _ users: [SourceUser], newIDs: Bool = false, dryRun: Bool = false, batchSize: Int = 500) async throws
        -> ImportReport
    {
        var importer = UserImporter(store: store)
        importer.batchSize = batchSize
        return try await importer.run(SourceRead(users: users), options: .init(source: .firebase, dryRun: dryRun, newIDs: newIDs))
    }

    @Test("a user keeps the source's id, created time, e-mail, name and claims; Apple and Google identities; a rerun changes nothing")
    func importsAndReruns() async throws {
        try await withTemporaryStore { store in
            let created = Date(timeIntervalSince1970: 1_600_000_000)
            let ann = SourceUser(
                id: "uid-Ann_1", createdAt: created, email: "ann@example.com", emailVerified: false, givenName: "Ann", familyName: "Lee",
                claims: ["plan": .string("pro")], identities: [Self.apple, Self.google])
            let report = try await Self.run(store, [ann])
            #expect(report.summary.imported == 1 && report.summary.appleGrantsMissing == 1)
            #expect(report.users.first?.latchkeyId == "uid-Ann_1")
            let user = try #require(try await store.user(id: "uid-Ann_1"))
            #expect(user.createdAt == created && user.email == "ann@example.com" && user.emailVerified == false)
            #expect(user.givenName == "Ann" && user.claims == ["plan": .string("pro")])
            #expect(user.importedFrom?.source == "firebase" && user.importedFrom?.id == "uid-Ann_1")
            #expect(user.disabledAt == nil)
            let google = try #require(try await store.identity(provider: "google", subject: "109876543210987654321"))
            #expect(google.userID == "uid-Ann_1" && google.emailVerified == true)
            #expect(try await store.appleIdentitiesWithoutGrant() == 1)

            let again = try await Self.run(store, [ann])
            #expect(again.summary.alreadyImported == 1 && again.summary.imported == 0)
            #expect(again.users.first?.outcome == .alreadyImported && again.users.first?.latchkeyId == "uid-Ann_1")
            #expect(try await store.users(limit: 10).count == 1)
        }
    }

    @Test("never merged by e-mail; an identity on two source users goes to neither; one another Latchkey user holds is never moved")
    func conflicts() async throws {
        try await withTemporaryStore { store in
            let same1 = SourceUser(id: "a", email: "same@example.com", identities: [SourceIdentity(provider: "google", subject: "1")])
            let same2 = SourceUser(id: "b", email: "same@example.com", identities: [SourceIdentity(provider: "google", subject: "2")])
            let twice1 = SourceUser(id: "c", identities: [SourceIdentity(provider: "apple", subject: "shared")])
            let twice2 = SourceUser(
                id: "d", identities: [SourceIdentity(provider: "apple", subject: "shared"), SourceIdentity(provider: "google", subject: "4")])
            // Already in Latchkey under another user.
            let now = Date()
            try await store.createUser(
                UserAccount(id: "native", createdAt: now),
                identity: LinkedIdentity(id: "i-native", userID: "native", provider: "google", subject: "held", firstSeenAt: now, lastSignInAt: now))
            let held = SourceUser(id: "e", identities: [SourceIdentity(provider: "google", subject: "held")])
            let taken = SourceUser(id: "native", identities: [SourceIdentity(provider: "google", subject: "5")])
            let report = try await Self.run(store, [same1, same2, twice1, twice2, held, taken])
            let outcomes = Dictionary(uniqueKeysWithValues: report.users.map { ($0.sourceId, $0.outcome) })
            #expect(outcomes == ["a": .imported, "b": .imported, "c": .conflict, "d": .conflict, "e": .conflict, "native": .conflict])
            #expect(try await store.identity(provider: "apple", subject: "shared") == nil)
            #expect(try await store.identity(provider: "google", subject: "4") == nil)
            #expect(try await store.identity(provider: "google", subject: "held")?.userID == "native")
            #expect(try await store.user(id: "a")?.email == "same@example.com")
            #expect(try await store.user(id: "b")?.email == "same@example.com")
            #expect(report.users.first { $0.sourceId == "c" }?.reason?.contains("source user d") == true)
        }
    }

    @Test("disabled users come in disabled; no federated identity is skipped with its e-mail; bad ids and claims are reported")
    func edges() async throws {
        try await withTemporaryStore { store in
            let disabled = SourceUser(id: "off", disabled: true, identities: [SourceIdentity(provider: "google", subject: "9")])
            let password = SourceUser(id: "pw", email: "pw@example.com", emailVerified: true, otherMethods: ["password"])
            let badID = SourceUser(id: "has space", identities: [SourceIdentity(provider: "google", subject: "10")])
            let reserved = SourceUser(id: "claims", claims: ["sub": .string("x")], identities: [SourceIdentity(provider: "google", subject: "11")])
            let emptySubject = SourceUser(id: "empty", identities: [SourceIdentity(provider: "google", subject: "")])
            let report = try await Self.run(store, [disabled, password, badID, reserved, emptySubject, disabled])
            #expect(report.users.map(\.outcome) == [.imported, .skipped, .invalid, .imported, .invalid, .invalid])
            #expect(try await store.user(id: "off")?.disabledAt != nil)
            #expect(report.summary.disabled == 1)
            let skipped = try #require(report.users.first { $0.sourceId == "pw" })
            #expect(skipped.email == "pw@example.com" && skipped.emailVerified == true && skipped.reason?.contains("password") == true)
            #expect(report.users.first { $0.sourceId == "has space" }?.reason?.contains("--new-ids") == true)
            #expect(try await store.user(id: "claims")?.claims == nil)
            #expect(report.users.first { $0.sourceId == "claims" }?.reason?.contains("without its claims") == true)

            // With new ids the odd id is fine, and the report maps it; a rerun finds it by its source id.
            let renamed = try await Self.run(store, [badID], newIDs: true)
            let newID = try #require(renamed.users.first?.latchkeyId)
            #expect(newID != "has space" && renamed.users.first?.outcome == .imported)
            #expect(try await store.user(id: newID)?.importedFrom?.id == "has space")
            #expect(try await Self.run(store, [badID], newIDs: true).users.first?.latchkeyId == newID)
        }
    }

    @Test("a dry run writes nothing; a run stopped after its first batch continues where it stopped")
    func dryRunAndResume() async throws {
        try await withTemporaryStore { store in
            let users = (0..<25).map { SourceUser(id: "u\($0)", identities: [SourceIdentity(provider: "google", subject: "g\($0)")]) }
            let dry = try await Self.run(store, users, dryRun: true)
            #expect(dry.summary.imported == 25 && dry.dryRun)
            #expect(try await store.users(limit: 100).isEmpty)
            // The first batches commit each in its own transaction: a run killed after 10 users left those.
            _ = try await Self.run(store, Array(users.prefix(10)), batchSize: 4)
            let resumed = try await Self.run(store, users, batchSize: 4)
            #expect(resumed.summary.alreadyImported == 10 && resumed.summary.imported == 15)
            #expect(try await store.users(limit: 100).count == 25)
        }
    }
}
