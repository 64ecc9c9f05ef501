import Foundation
import LatchkeyStore

/// A migrated SQLite store in a new file under the temporary directory: the store tests use when they need one and no
/// database server. ``withTemporaryStore(_:)`` closes it and deletes its files.
public func withTemporaryStore<T>(_ body: (SQLAuthStore) async throws -> T) async throws -> T {
    let path = NSTemporaryDirectory() + "latchkey-test-\(UUID().uuidString).sqlite"
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let store = try await SQLAuthStore.open(.sqlite(path: path))
    do {
        try await store.migrate()
        let result = try await body(store)
        await store.close()
        return result
    } catch {
        await store.close()
        throw error
    }
}
