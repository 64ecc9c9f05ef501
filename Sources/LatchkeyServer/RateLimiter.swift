import Foundation
import Synchronization

/// Fixed one-minute windows per key; enough to stop hammering, cheap enough for every request.
final class RateLimiter: Sendable {
    private struct Window {
        var start: TimeInterval
        var count: Int
    }

    private let limit: Int
    /// Keyed by the key's hash (SipHash with this process's random seed): a few dozen bytes a key, whatever its length.
    private let windows = Mutex<[Int: Window]>([:])

    init(perMinute limit: Int) { self.limit = limit }

    /// Counts a request for `key`; returns the seconds to wait when over the limit, nil when allowed.
    func check(_ key: String, now: TimeInterval = Date().timeIntervalSince1970) -> Int? {
        guard limit > 0 else { return nil }
        let key = key.hashValue
        return windows.withLock { windows in
            // Bounded: past the cap, drop finished windows, and if that is not enough, start over.
            if windows.count >= 100_000 {
                windows = windows.filter { now - $0.value.start < 60 }
                if windows.count >= 50_000 { windows.removeAll(keepingCapacity: true) }
            }
            var window = windows[key] ?? Window(start: now, count: 0)
            if now - window.start >= 60 { window = Window(start: now, count: 0) }
            window.count += 1
            windows[key] = window
            return window.count > limit ? max(1, Int(ceil(60 - (now - window.start)))) : nil
        }
    }
}
