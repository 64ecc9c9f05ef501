import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Logging
import SQLKit
import Testing

@testable import LatchkeyStore

@Suite("Store: outages become temporarily unavailable")
struct StoreOutageTests {
    @Test("a PostgreSQL server that cannot be reached is AuthStoreError.unavailable, naming the driver's reason")
    func unreachablePostgres() async throws {
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        let store = try await SQLAuthStore.open(.postgres(url: "postgres://latchkey@127.0.0.1:1/latchkey"))
        defer { Task { await store.close() } }
        let error = await #expect(throws: AuthStoreError.self) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { _ = try await store.identity(provider: "apple", subject: "x") }
                group.addTask {
                    // Only a guard against hanging forever: the store gives up after 5 s, but the CLI tests running
                    // beside this one block the two cooperative threads of a 2-core machine for long stretches.
                    try await Task.sleep(for: .seconds(180))
                    throw CancellationError()
                }
                try await group.next()
                group.cancelAll()
            }
        }
        guard case .unavailable(let reason) = error else {
            Issue.record("expected .unavailable, got \(String(describing: error))")
            return
        }
        #expect(reason.hasPrefix("PostgreSQL"))
    }
}

/// Timing on a real PostgreSQL: a load suite, run on its own (alongside the other suites the 5 s connection wait
/// can pass before a starved test gets its connection).
@Suite("Store: PostgreSQL time limits", .enabled(if: loadTestsEnabled, "a load suite: LATCHKEY_LOAD_TESTS=1"))
struct PostgresTimeLimitTests {
    @Test(
        "on PostgreSQL a request is cut short after the answer timeout (503), but migrations and sweeps run as long as they need",
        .enabled(if: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] != nil, "needs PostgreSQL (LATCHKEY_TEST_DATABASE_URL)"))
    func longTransactions() async throws {
        let url = try #require(ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"])
        // The shortest cap there is: the connection wait (5 s) bounds every request first.
        let backend = try PostgresBackend(url: url, maximumBatch: 8, answerTimeout: PostgresBackend.leaseTimeout, logger: Logger(label: "test"))
        let store = SQLAuthStore(backend: backend, location: .postgres(url: url), maximumWriteBatch: 8)
        defer { Task { await store.close() } }
        try await store.migrate()
        let longer = 6.0  // past the 5 s cap
        let request = Task { try await backend.read { db in try await db.raw("SELECT pg_sleep(\(bind: longer))").run() } }
        let longWork = Task {
            try await backend.longTransaction { db in
                try await db.raw("SELECT pg_sleep(\(bind: longer))").run()
                return 1
            }
        }
        await #expect(throws: AuthStoreError.self) { try await request.value }
        #expect(try await longWork.value == 1)
    }

    @Test(
        "on PostgreSQL a write batch is given up after 10 s, a read after 30 s: the writes queued behind a batch wait for it too",
        .enabled(if: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] != nil, "needs PostgreSQL (LATCHKEY_TEST_DATABASE_URL)"))
    func writesGiveUpSooner() async throws {
        let url = try #require(ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"])
        let backend = try PostgresBackend(url: url, maximumBatch: 8, logger: Logger(label: "test"))
        defer { Task { await backend.shutdown() } }
        let longer = 11.0  // past the write cap, within the read cap
        let clock = ContinuousClock()
        let start = clock.now
        let write = Task { try await backend.batcher.submit { db in try await db.raw("SELECT pg_sleep(\(bind: longer))").run() } }
        let read = Task { try await backend.read { db in try await db.raw("SELECT pg_sleep(\(bind: longer))").run() } }
        await #expect(throws: AuthStoreError.self) { try await write.value }
        let writeGaveUp = clock.now - start
        #expect(writeGaveUp >= .seconds(10) && writeGaveUp < .seconds(11), "\(writeGaveUp)")
        try await read.value
    }
}
