import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Logging
import SQLKit
import Synchronization
import Testing

@testable import LatchkeyStore

/// PostgreSQL's errors as the server sends them (raised with a chosen SQLSTATE), and what the store makes of them.
@Suite("Store: PostgreSQL errors", .enabled(if: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] != nil))
struct RolledBackGroupTests {
    @Test(
        "a group PostgreSQL rolls back (deadlock) runs again one request at a time; timeouts and a read-only database are outages (503, readiness fails); a vanished row is notFound"
    )
    func rolledBackGroups() async throws {
        let url = try #require(ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"])
        let backend = try PostgresBackend(url: url, maximumBatch: 8, logger: Logger(label: "latchkey.test"))
        do {
            func serverError(_ state: String) async throws -> any Error {
                do {
                    try await backend.read { db in
                        try await db.raw("DO $$ BEGIN RAISE EXCEPTION 'raised by a test' USING ERRCODE = '\(unsafeRaw: state)'; END $$").run()
                    }
                } catch {
                    return error
                }
                throw AuthStoreError.unavailable("SQLSTATE \(state) was not raised")
            }
            let deadlock = try await serverError("40P01")
            #expect(!WriteBatcher.isOutage(deadlock))
            #expect(SQLAuthStore.translate(deadlock) as? AuthStoreError != nil)
            for state in ["57014", "55P03", "08006", "25006", "58030"] { #expect(WriteBatcher.isOutage(try await serverError(state)), "\(state)") }
            #expect(SQLAuthStore.translate(try await serverError("23503")) as? AuthStoreError == .notFound)

            // A database that takes no writes (a former primary after a failover): writes and readiness are 503s, not 500s.
            let name = "readonly_" + UUID().uuidString.prefix(8).lowercased()
            try await backend.read { db in try await db.raw("CREATE DATABASE \(unsafeRaw: name)").run() }
            var components = try #require(URLComponents(string: url))
            components.path = "/" + name
            let fresh = try await SQLAuthStore.open(.postgres(url: try #require(components.string)))
            try await fresh.migrate()
            try await fresh.ping()
            try await backend.read { db in try await db.raw("ALTER DATABASE \(unsafeRaw: name) SET default_transaction_read_only = on").run() }
            await fresh.close()
            let readOnly = try await SQLAuthStore.open(.postgres(url: try #require(components.string)))
            await #expect(throws: AuthStoreError.self) { try await readOnly.ping() }
            let write = await #expect(throws: AuthStoreError.self) { try await readOnly.audit(AuditEvent(at: Date(), userID: "u", kind: "k")) }
            if case .unavailable = write {} else { Issue.record("a write to a read-only database: \(String(describing: write))") }
            await readOnly.close()
            try await backend.read { db in try await db.raw("DROP DATABASE \(unsafeRaw: name)").run() }

            // Any group of more than one fails as a whole, as a deadlock with another instance would fail it.
            let attempts = Mutex<[Int]>([])
            let groups = RequestGroups<Int, Int>(
                limit: 16, maximumJobs: 1,
                runner: { work in
                    // The first group forms only once every request waits.
                    try await Task.sleep(for: .milliseconds(50))
                    return try await backend.read(work)
                },
                process: { requests, _ in
                    attempts.withLock { $0.append(requests.count) }
                    if requests.count > 1 { throw deadlock }
                    return requests.map { $0 * 10 }
                })
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for request in 1...6 { group.addTask { try await groups.submit(request) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.sorted() == [10, 20, 30, 40, 50, 60])
            #expect(attempts.withLock { $0 } == [6, 1, 1, 1, 1, 1, 1], "one group of six, rolled back, then each alone")
        } catch {
            await backend.shutdown()
            throw error
        }
        await backend.shutdown()
    }
}
