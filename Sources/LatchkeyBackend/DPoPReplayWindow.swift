import Foundation
import Synchronization

/// The DPoP proofs taken lately, so that none is taken twice (RFC 9449 §11.1): each is remembered until it is too old
/// to be accepted anyway, and at most `capacity` are, the oldest forgotten first when more arrive.
///
/// Forgetting early only matters for a proof replayed within its window after `capacity` newer ones: the proof still
/// names its token's key, method and URL. Refusing new proofs instead would turn a busy minute into an outage.
final class DPoPReplayWindow: Sendable {
    private struct State {
        /// When each remembered proof may be forgotten.
        var expiries: [String: Date] = [:]
        /// The proofs in the order they were taken; entries before `head` are gone.
        var order: [(key: String, expiry: Date)] = []
        var head = 0

        var count: Int { expiries.count }

        /// Forgets the oldest entry.
        mutating func dropOldest() {
            let oldest = order[head]
            head += 1
            // A key taken again after it expired has a newer entry further on: only its own entry removes it.
            if expiries[oldest.key] == oldest.expiry { expiries[oldest.key] = nil }
            if head >= 1024 && head * 2 >= order.count {
                order.removeFirst(head)
                head = 0
            }
        }
    }

    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// Remembers `key` until `expiry`; false when it is remembered already (a replay).
    func insert(_ key: String, until expiry: Date, now: Date) -> Bool {
        state.withLock { state in
            while state.head < state.order.count, state.order[state.head].expiry <= now { state.dropOldest() }
            if let seen = state.expiries[key], seen > now { return false }
            while state.count >= capacity, state.head < state.order.count { state.dropOldest() }
            state.expiries[key] = expiry
            state.order.append((key, expiry))
            return true
        }
    }

    /// How many proofs are remembered.
    var count: Int { state.withLock { $0.count } }
}
