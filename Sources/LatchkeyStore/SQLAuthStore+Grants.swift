public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// Tokens held at providers (``ProviderGrantStore``) and the calls to providers still owed (``OutboxStore``).
extension SQLAuthStore {
    public func providerGrant(identityID: String) async throws -> ProviderGrant? {
        try await read { db in
            try await db.raw("SELECT * FROM provider_grants WHERE identity_id = \(bind: identityID)").first().map(Self.providerGrant)
        }
    }

    static func providerGrant(_ row: any SQLRow) throws -> ProviderGrant {
        ProviderGrant(
            identityID: try row.decode(column: "identity_id", as: String.self), provider: try row.decode(column: "provider", as: String.self),
            clientID: try row.decode(column: "client_id", as: String.self),
            sealedRefreshToken: try row.decode(column: "sealed_refresh_token", as: String.self),
            lastValidatedAt: try row.date("last_validated_at"), createdAt: try row.date("created_at")
        )
    }

    public func markProviderGrantValidated(identityID: String, sealedRefreshToken: String, at: Date, replacingWith newSealedRefreshToken: String?)
        async throws -> Bool
    {
        try await sqlWrite { db in
            try await db.raw(
                """
                UPDATE provider_grants SET last_validated_at = \(bind: at.millis), validation_claimed_until = NULL,
                  sealed_refresh_token = \(bind: newSealedRefreshToken ?? sealedRefreshToken)
                WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken) RETURNING identity_id
                """
            ).first() != nil
        }
    }

    public func claimProviderValidation(identityID: String, sealedRefreshToken: String, dueBefore: Date, now: Date, until: Date) async throws -> Bool {
        // One conditional UPDATE: PostgreSQL re-checks the condition on a row a concurrent claim just changed, so one caller wins.
        try await sqlWrite { db in
            try await db.raw(
                """
                UPDATE provider_grants SET validation_claimed_until = \(bind: until.millis)
                WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken)
                  AND last_validated_at <= \(bind: dueBefore.millis)
                  AND (validation_claimed_until IS NULL OR validation_claimed_until <= \(bind: now.millis))
                RETURNING identity_id
                """
            ).first() != nil
        }
    }

    public func postponeProviderValidation(identityID: String, until: Date) async throws {
        try await sqlWrite { db in
            try await db.raw("UPDATE provider_grants SET validation_claimed_until = \(bind: until.millis) WHERE identity_id = \(bind: identityID)").run()
        }
    }

    // MARK: Outbox

    public func enqueue(_ item: OutboxItem) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO outbox (id, kind, provider, client_id, sealed_payload, attempts, next_attempt_at, last_error, created_at, completed_at)
                VALUES (\(bind: item.id), \(bind: item.kind), \(bind: item.provider), \(bind: item.clientID), \(bind: item.sealedPayload), \(bind: item.attempts),
                  \(bind: item.nextAttemptAt.millis), \(bind: item.lastError), \(bind: item.createdAt.millis), \(bind: item.completedAt?.millis))
                """
            ).run()
        }
    }

    public func claimDueOutboxItems(now: Date, limit: Int, leaseUntil: Date) async throws -> [OutboxItem] {
        // PostgreSQL: rows another instance is claiming right now are skipped, not waited for. SQLite has one writer.
        let skipLocked = backend.isPostgres ? " FOR UPDATE SKIP LOCKED" : ""
        return try await sqlWrite { db in
            try await db.raw(
                """
                UPDATE outbox SET next_attempt_at = \(bind: leaseUntil.millis)
                WHERE id IN (SELECT id FROM outbox WHERE completed_at IS NULL AND next_attempt_at <= \(bind: now.millis)
                  ORDER BY next_attempt_at LIMIT \(bind: limit)\(unsafeRaw: skipLocked))
                RETURNING *
                """
            )
            .all().map(Self.outboxItem)
        }
    }

    public func updateOutboxItem(_ item: OutboxItem) async throws {
        // A finished item stays finished: an instance whose lease ran out mid-call may report late.
        try await sqlWrite { db in
            try await db.raw(
                """
                UPDATE outbox SET attempts = \(bind: item.attempts), next_attempt_at = \(bind: item.nextAttemptAt.millis), last_error = \(bind: item.lastError),
                  completed_at = \(bind: item.completedAt?.millis) WHERE id = \(bind: item.id) AND completed_at IS NULL
                """
            ).run()
        }
    }

    public func outboxItems() async throws -> [OutboxItem] {
        try await read { db in try await db.raw("SELECT * FROM outbox ORDER BY created_at").all().map(Self.outboxItem) }
    }

    static func outboxItem(_ row: any SQLRow) throws -> OutboxItem {
        OutboxItem(
            id: try row.decode(column: "id", as: String.self), kind: try row.decode(column: "kind", as: String.self),
            provider: try row.decode(column: "provider", as: String.self), clientID: try row.decode(column: "client_id", as: String.self),
            sealedPayload: try row.decode(column: "sealed_payload", as: String.self),
            attempts: try row.decode(column: "attempts", as: Int.self), nextAttemptAt: try row.date("next_attempt_at"),
            lastError: try row.decode(column: "last_error", as: String?.self), createdAt: try row.date("created_at"),
            completedAt: try row.optionalDate("completed_at")
        )
    }
}
