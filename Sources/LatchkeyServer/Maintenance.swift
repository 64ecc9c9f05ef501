public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import Logging
import ServiceLifecycle

/// Signing-key lifecycle: one active key; rotation turns it into a retiring key that stays published
/// until every token it signed has expired, then retired.
public enum KeyMaintenance {
    /// Creates the first key when there is none; retires keys whose overlap has passed.
    ///
    /// `overlap`: how long after its successor was made this server still needs a retiring key (the successor's
    /// propagation delay, an access token's lifetime and leeway, by this server's settings). A key is retired only
    /// past both that and its stored `retireAfter`, which whoever rotated (`latchkey keys rotate` on an admin's
    /// machine, say) computed from its own settings and clock.
    public static func ensureActiveKey(store: any SigningKeyStore, box: SecretBox, now: Date, overlap: TimeInterval = 0) async throws {
        let keys = try await store.signingKeys()
        let successor = keys.filter { $0.state == .active }.map(\.createdAt).max() ?? .distantPast
        for var key in keys
        where key.state == .retiring && (key.retireAfter ?? .distantPast) <= now && successor.addingTimeInterval(overlap) <= now {
            key.state = .retired
            try await store.saveSigningKey(key)
        }
        if !keys.contains(where: { $0.state == .active }) {
            // Instances starting together on an empty database: one key wins, and every instance loads that one.
            _ = try await store.saveFirstSigningKey(try AccessTokenKeys.generateRecord(box: box, now: now))
        }
    }

    /// Makes a new active key. It is published at once and signs after each instance's propagation delay (every
    /// instance has loaded it by then); the previous one signs until then and keeps verifying until `overlap` after
    /// now (``ServerConfiguration/signingKeyOverlap``, the same span ``ensureActiveKey(store:box:now:overlap:)`` keeps it for).
    @discardableResult
    public static func rotate(store: any SigningKeyStore, box: SecretBox, now: Date, overlap: TimeInterval) async throws -> SigningKeyRecord {
        let previous = try await store.signingKeys().filter { $0.state == .active }
        // The new key first: an instance that looked in between would otherwise find no active key and make its own.
        let fresh = try AccessTokenKeys.generateRecord(box: box, now: now)
        try await store.saveSigningKey(fresh)
        for var key in previous {
            key.state = .retiring
            key.retireAfter = now.addingTimeInterval(overlap)
            try await store.saveSigningKey(key)
        }
        return fresh
    }
}

/// Periodic upkeep, every `maintenance.interval`: reloading signing keys (another instance or the CLI may have
/// rotated them), expired-record sweeps (every 120th interval), and owed provider calls. Each runs in its own loop,
/// so a slow provider or a long sweep never delays a key reload (a new key's propagation delay counts on it).
struct MaintenanceService: Service, CustomStringConvertible {
    let server: LatchkeyServer

    /// The name swift-service-lifecycle logs for this service (at debug level, for each service): the default would
    /// print the whole server, configuration and secrets included.
    var description: String { "MaintenanceService" }

    func run() async throws {
        let interval = Duration.milliseconds(Int64(server.configuration.maintenanceInterval * 1000))
        // Three loops: a sweep waiting on a lock, or an owed call waiting on a provider, must not hold up key reloads.
        await withDiscardingTaskGroup { group in
            group.addTask { await every(interval) { await keys() } }
            group.addTask { await every(interval * Self.sweepEvery) { await sweep() } }
            group.addTask { await every(interval) { await outbox() } }
        }
    }

    /// `work` is cancelled by a graceful shutdown: an owed call to a provider that is down could hold the process for
    /// minutes, and a cancelled call is retried after its lease.
    private func every(_ interval: Duration, _ work: @escaping @Sendable () async -> Void) async {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await cancelWhenGracefulShutdown { await work() }
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            } catch {
                return
            }
        }
    }

    /// Sweeps about once an hour at the default interval (and once at start).
    static let sweepEvery = 120

    func keys() async {
        await report {
            try await KeyMaintenance.ensureActiveKey(
                store: server.store, box: server.box, now: server.timeSource.now, overlap: server.configuration.signingKeyOverlap)
            try await server.accessKeys.load(try await server.store.signingKeys(), box: server.box)
        }
    }

    /// One instance of a fleet sweeps per period: a sweep reads whole tables. The margin of one interval keeps an
    /// instance's own next sweep from falling just inside the period it recorded.
    func sweep() async {
        let period = server.configuration.maintenanceInterval * Double(Self.sweepEvery - 1)
        await report {
            // Idle guests go only in the sweep this instance won, so a fleet deletes each once.
            guard try await server.store.sweep(now: server.timeSource.now, unlessSweptWithin: period) != nil else { return }
            if server.configuration.session.anonymous.enabled { try await server.sessions.guests.sweep() }
        }
    }

    func outbox() async {
        await report { _ = try await server.sessions.grants.processOutbox(lease: server.configuration.outboxLease) }
    }

    private func report(_ work: () async throws -> Void) async {
        do {
            try await work()
        } catch is CancellationError {
            return  // shutting down
        } catch {
            server.logger.warning("maintenance failed; will retry", metadata: ["error": "\(Self.describe(error))"])
        }
    }

    /// What failed, for the operator: store and Latchkey errors say it themselves; others by type only (their text may hold data).
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as AuthStoreError: error.description
        case let error as LatchkeyError: "\(error.errorCode): \(error.reason)"
        default: String(describing: type(of: error))
        }
    }
}
