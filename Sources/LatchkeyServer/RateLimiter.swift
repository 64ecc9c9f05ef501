import Foundation
import Synchronization

/// Fixed one-minute windows per key; enough to stop hammering, cheap enough for every request.
final class RateLimiter: Sendable {
    /// 8 bytes: a window's bucket in the table is 16 with its key, where a `TimeInterval` start and an `Int` count made
    /// it 24 (a refresh is a key of its own, so a busy server holds a minute's refreshes here).
    private struct Window {
        /// Whole seconds since 1970 (`UInt32` lasts until 2106).
        var start: UInt32
        var count: UInt32

        /// Whether the window is still open at `second` (one that starts later, after the clock stepped back, is).
        func isOpen(at second: UInt32) -> Bool { second - min(second, start) < 60 }
    }

    private struct Table {
        /// Keyed by the key's hash (SipHash with this process's random seed): a few dozen bytes a key, whatever its length.
        var windows: [Int: Window] = [:]
        /// Finished windows are dropped when the table reaches this size, which then becomes twice what is left: the table
        /// holds about the last minute's keys and shrinks after a burst, at a constant cost per request.
        var pruneAt = RateLimiter.smallestPrune
    }

    static let smallestPrune = 1_024
    /// At most this many keys. Past it, with half of them or more in windows still open, the table starts over.
    static let capacity = 100_000

    private let limit: Int
    private let table = Mutex(Table())

    init(perMinute limit: Int) { self.limit = limit }

    /// Counts a request for `key`; returns the seconds to wait when over the limit, nil when allowed.
    func check(_ key: String, now: TimeInterval = Date().timeIntervalSince1970) -> Int? {
        guard limit > 0 else { return nil }
        let key = key.hashValue
        let second = UInt32(clamping: Int(now))
        return table.withLock { table in
            if table.windows.count >= table.pruneAt {
                let full = table.windows.count >= Self.capacity
                table.windows = table.windows.filter { $0.value.isOpen(at: second) }
                if full && table.windows.count >= Self.capacity / 2 { table.windows = [:] }
                table.pruneAt = min(Self.capacity, max(Self.smallestPrune, 2 * table.windows.count))
            }
            var window = table.windows[key] ?? Window(start: second, count: 0)
            if !window.isOpen(at: second) { window = Window(start: second, count: 0) }
            if window.count < .max { window.count += 1 }
            table.windows[key] = window
            return Int(window.count) > limit ? max(1, min(60, Int(ceil(60 - (now - Double(window.start)))))) : nil
        }
    }

    /// Keys the table holds now, windows finished or not.
    var keysHeld: Int { table.withLock { $0.windows.count } }
}
