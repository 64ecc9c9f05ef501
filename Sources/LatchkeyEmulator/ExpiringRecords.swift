import Foundation

/// Records that expire (authorization codes, access tokens) by key, each forgotten `retention` after it expires.
///
/// Until it is forgotten, an expired record answers as it always did (Apple's "the code expired" in the request log,
/// Facebook's "Session has expired"); from then on it answers as an unknown one. Lookups apply that rule themselves,
/// so what a client sees depends on the emulator's clock only, never on when a sweep ran. A sweep removes the
/// forgotten records, oldest first, from one queue per lifetime: each queue is in expiry order while the clock moves
/// forward (a record issued after the clock was moved back waits behind older ones, and goes with them), so a sweep
/// looks at nothing it does not remove but the head of each queue, and adding a record costs O(1) amortised.
struct ExpiringRecords<Record: Sendable>: Sendable {
    private struct Entry: Sendable {
        var record: Record
        let forgottenAt: Date
    }

    private var entries: [String: Entry] = [:]
    private var queues: [TimeInterval: ExpiryQueue] = [:]
    let retention: TimeInterval

    init(retention: TimeInterval) { self.retention = max(0, retention) }

    /// How many records are held, forgotten ones a sweep has not removed yet included.
    var count: Int { entries.count }

    /// The record under `key`; nil when there is none, or when it was forgotten by `now`.
    func record(_ key: String, now: Date) -> Record? {
        guard let entry = entries[key], now < entry.forgottenAt else { return nil }
        return entry.record
    }

    /// Changes the record under `key` unless there is none or it was forgotten by `now`.
    mutating func update(_ key: String, now: Date, _ change: (inout Record) -> Void) {
        guard let forgottenAt = entries[key]?.forgottenAt, now < forgottenAt else { return }
        change(&entries[key]!.record)
    }

    /// Adds `record`, which expires at `expiresAt`, `lifetime` after it was issued (records of one lifetime share a
    /// queue, which keeps them in expiry order).
    mutating func insert(_ record: Record, key: String, expiresAt: Date, lifetime: TimeInterval) {
        let forgottenAt = expiresAt.addingTimeInterval(retention)
        entries[key] = Entry(record: record, forgottenAt: forgottenAt)
        queues[lifetime, default: ExpiryQueue()].append(key: key, forgottenAt: forgottenAt)
    }

    /// Removes the records forgotten by `now` and returns them, for the caller to drop from its indexes.
    mutating func sweep(now: Date) -> [Record] {
        var removed: [Record] = []
        for index in queues.values.indices {
            while let (key, forgottenAt) = queues.values[index].first, forgottenAt <= now {
                queues.values[index].removeFirst()
                if let entry = entries[key], entry.forgottenAt == forgottenAt {
                    entries[key] = nil
                    removed.append(entry.record)
                }
            }
        }
        return removed
    }
}

/// Keys in the order they were added, with the time each is forgotten: an array read from `head`, compacted once
/// half of it has been read, so both ends cost O(1) amortised.
struct ExpiryQueue: Sendable {
    private var items: [(key: String, forgottenAt: Date)] = []
    private var head = 0

    var first: (key: String, forgottenAt: Date)? { head < items.count ? items[head] : nil }

    mutating func append(key: String, forgottenAt: Date) { items.append((key, forgottenAt)) }

    mutating func removeFirst() {
        head += 1
        if head == items.count {
            items = []
            head = 0
        } else if head >= 1_024, head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
    }
}
