import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Logging
import SQLKit
import Synchronization
import Testing

@testable import LatchkeyStore

@Suite("SQLite readers")
struct SQLiteReaderTests {
    private static func openBackend() async throws -> SQLiteBackend {
        let path = ScratchDirectory.make("latchkey-readers") + "/store.sqlite"
        return try await SQLiteBackend.open(path: path, maximumBatch: 8, logger: Logger(label: "test"))
    }

    @Test("each read has a reader to itself: reads beyond the readers wait for one, and all finish")
    func readersAreLentOneReadAtATime() async throws {
        let backend = try await Self.openBackend()
        // A statement started beside another on one connection shares its older snapshot (the rotation bug):
        // so no two reads may hold the same reader, and at most `readerCount` reads run at once.
        let running = Tally()
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<(SQLiteBackend.readerCount + 3) {
                group.addTask {
                    try await backend.read { database in
                        running.enter()
                        defer { running.leave() }
                        try await Task.sleep(for: .milliseconds(100))
                        return try await database.raw("SELECT 1 AS one").first()?.decode(column: "one", as: Int.self) ?? 0
                    }
                }
            }
            var answered = 0
            for try await one in group { answered += one }
            #expect(answered == SQLiteBackend.readerCount + 3)
        }
        #expect(running.most <= SQLiteBackend.readerCount)
        await backend.shutdown()
    }

    @Test("a read waiting for a reader when the store closes fails as unavailable instead of hanging")
    func waitingReadFailsOnClose() async throws {
        let backend = try await Self.openBackend()
        let held = Tally()
        // The readers stay lent until the store has closed, however slowly the machine runs the steps between.
        let closed = ClosedFlag()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<SQLiteBackend.readerCount {
                group.addTask {
                    try await backend.read { _ in
                        held.enter()
                        while !closed.isSet { try await Task.sleep(for: .milliseconds(5)) }
                    }
                }
            }
            while held.now < SQLiteBackend.readerCount { try await Task.sleep(for: .milliseconds(5)) }
            let waiting = Task { try await backend.read { _ in 1 } }
            try await Task.sleep(for: .milliseconds(50))
            await backend.shutdown()
            closed.set()
            let error = await #expect(throws: AuthStoreError.self) { try await waiting.value }
            guard case .unavailable = error else {
                Issue.record("expected .unavailable, got \(String(describing: error))")
                return
            }
            try await group.waitForAll()
        }
    }
}

/// How many reads are inside their body now, and the most at once.
private final class Tally: Sendable {
    private let state = Mutex((now: 0, most: 0))
    var now: Int { state.withLock { $0.now } }
    var most: Int { state.withLock { $0.most } }
    func enter() {
        state.withLock { state in
            state.now += 1
            state.most = max(state.most, state.now)
        }
    }
    func leave() { state.withLock { $0.now -= 1 } }
}
