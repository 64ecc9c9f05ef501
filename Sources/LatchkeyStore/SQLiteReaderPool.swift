import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Logging
import NIOCore
import NIOPosix
import SQLKit
import SQLiteKit
import SQLiteNIO
import Synchronization

/// SQLite reader connections, each lent to one read at a time. A statement that starts on a connection where
/// another statement is still running joins that statement's read transaction, and so its older snapshot: it
/// would miss rows committed in between, such as the successor of a refresh token that was just rotated.
final class ReaderPool: Sendable {
    private struct State {
        /// The connections reads use now; others were replaced and are closed when given back.
        var current: [SQLiteConnection]
        var idle: [SQLiteConnection]
        var waiting: [CheckedContinuation<SQLiteConnection?, Never>] = []
        var closed = false

        /// An idle reader, or `.some(nil)` once closed; nil while all are lent out.
        mutating func lend() -> SQLiteConnection?? {
            if closed { return .some(nil) }
            if let reader = idle.popLast() { return .some(reader) }
            return nil
        }
    }
    private let state: Mutex<State>

    init(_ readers: [SQLiteConnection]) {
        state = Mutex(State(current: readers, idle: readers))
    }

    /// A reader for the caller alone, waiting for one if all are lent out; nil once the pool is closed.
    func take() async -> SQLiteConnection? {
        if let ready = state.withLock({ $0.lend() }) { return ready }
        return await withCheckedContinuation { continuation in
            let ready = state.withLock { state in
                let ready = state.lend()
                if ready == nil { state.waiting.append(continuation) }
                return ready
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    func give(back reader: SQLiteConnection) {
        enum Next { case close, handOver(CheckedContinuation<SQLiteConnection?, Never>), keep }
        let next: Next = state.withLock { state in
            guard !state.closed, state.current.contains(where: { $0 === reader }) else { return .close }
            if !state.waiting.isEmpty { return .handOver(state.waiting.removeFirst()) }
            state.idle.append(reader)
            return .keep
        }
        switch next {
        case .close: _ = reader.close()
        case .handOver(let waiter): waiter.resume(returning: reader)
        case .keep: break
        }
    }

    /// Puts fresh readers in place of the current ones; returns the idle old ones to close (the lent ones are
    /// closed when given back).
    func replace(with fresh: [SQLiteConnection]) -> [SQLiteConnection] {
        let (old, handed) = state.withLock { state in
            let old = state.idle
            state.current = fresh
            state.idle = fresh
            var handed: [(CheckedContinuation<SQLiteConnection?, Never>, SQLiteConnection)] = []
            while !state.waiting.isEmpty, let reader = state.idle.popLast() {
                handed.append((state.waiting.removeFirst(), reader))
            }
            return (old, handed)
        }
        for (waiter, reader) in handed { waiter.resume(returning: reader) }
        return old
    }

    /// Closes the pool: waiting reads get nil, and the idle readers are returned to close.
    func close() -> [SQLiteConnection] {
        let (idle, waiting) = state.withLock { state in
            state.closed = true
            defer {
                state.idle = []
                state.waiting = []
            }
            return (state.idle, state.waiting)
        }
        for waiter in waiting { waiter.resume(returning: nil) }
        return idle
    }
}
