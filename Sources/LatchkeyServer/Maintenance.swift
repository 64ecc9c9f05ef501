public import Foundation
public import LatchkeyCore
import Logging
import ServiceLifecycle

/// Signing-key lifecycle: one active key; rotation turns it into a retiring key that stays published
/// until every token it signed has expired, then retired.
public enum KeyMaintenance {
    /// Creates the first key when there is none; retires keys whose overlap has passed.
    public static func ensureActiveKey(store: any AuthStore, box: SecretBox, now: Date) async throws {
        let keys = try await store.signingKeys()
        for var key in keys where key.state == .retiring && (key.retireAfter ?? .distantPast) <= now {
            key.state = .retired
            try await store.saveSigningKey(key)
        }
        if !keys.contains(where: { $0.state == .active }) {
            try await store.saveSigningKey(try AccessTokenKeys.generateRecord(box: box, now: now))
        }
    }

    /// Makes a new active key; the previous one keeps verifying for `overlap`.
    @discardableResult
    public static func rotate(store: any AuthStore, box: SecretBox, now: Date, overlap: TimeInterval) async throws -> SigningKeyRecord {
        for var key in try await store.signingKeys() where key.state == .active {
            key.state = .retiring
            key.retireAfter = now.addingTimeInterval(overlap)
            try await store.saveSigningKey(key)
        }
        let fresh = try AccessTokenKeys.generateRecord(box: box, now: now)
        try await store.saveSigningKey(fresh)
        return fresh
    }
}

/// Periodic upkeep: owed Apple revocations, expired tokens, key reload (other instances may rotate).
struct MaintenanceService: Service {
    let server: LatchkeyServer

    func run() async throws {
        var ticks = 0
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await tick(ticks)
            ticks += 1
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(30)) }
            } catch {
                return
            }
        }
    }

    func tick(_ count: Int) async {
        do {
            _ = try await server.sessions.grants.processOutbox()
            try await KeyMaintenance.ensureActiveKey(store: server.store, box: server.box, now: server.timeSource.now)
            try await server.accessKeys.load(try await server.store.signingKeys(), box: server.box)
            if count % 120 == 0 { try await server.store.sweep(now: server.timeSource.now) }
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
