import Foundation
import LatchkeyCore
import LatchkeyStore
import Testing

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
