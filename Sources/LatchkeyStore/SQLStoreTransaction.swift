import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import SQLKit

/// ``StoreTransaction`` on one SQL transaction (a job of the write batcher); Core's one-change conveniences on
/// ``TransactionalStore`` run these operations too, each in a transaction of its own.
struct SQLStoreTransaction: StoreTransaction {
    let db: any SQLDatabase
    let postgres: Bool

    func audit(_ event: AuditEvent) async throws {
        try await SQLAuthStore.insertAudits([event]).run(on: db)
    }

    func enqueue(_ deliveries: [WebhookDelivery]) async throws {
        try await SQLAuthStore.insertWebhookDeliveries(deliveries, db)
    }

    func session(id: String) async throws -> SessionFamily? {
        try await db.raw("SELECT * FROM sessions WHERE id = \(bind: id)").first().map(SQLAuthStore.session)
    }

    func revokeSession(id: String, reason: String, at: Date) async throws -> Bool {
        // One statement: PostgreSQL re-checks `revoked_at` on a row a concurrent revocation just changed, so an earlier
        // reason (reuse detected, say) is never overwritten.
        try await db.raw(
            """
            UPDATE sessions SET revoked_at = \(bind: at.millis), revocation_reason = \(bind: reason)
            WHERE id = \(bind: id) AND revoked_at IS NULL RETURNING id
            """
        ).first() != nil
    }

    func revokeSessions(userID: String, reason: String, at: Date) async throws -> Int {
        try await SQLAuthStore.revokeOpenSessions(SQLAuthStore.sessionsOfUser(userID), reason: reason, at: at).all(on: db).count
    }

    func revokeSessions(identityID: String, createdBefore: Date, reason: String, at: Date) async throws -> Int {
        try await SQLAuthStore.revokeOpenSessions(SQLAuthStore.sessionsOfIdentity(identityID), createdBefore: createdBefore, reason: reason, at: at)
            .all(on: db).count
    }

    func addIdentity(_ identity: LinkedIdentity) async throws {
        guard try await db.raw("SELECT id FROM users WHERE id = \(bind: identity.userID)").first() != nil else { throw AuthStoreError.notFound }
        try await SQLAuthStore.insertIdentities([identity]).run(on: db)
    }

    func updateIdentity(_ identity: LinkedIdentity) async throws -> Bool {
        !(try await (SQLAuthStore.updateIdentities([identity]) + " RETURNING identities.id").all(on: db).isEmpty)
    }

    func unlinkIdentity(id: String, userID: String, reason: String, at: Date) async throws -> IdentityUnlink {
        // The count and the delete in one transaction, the user's row locked on PostgreSQL (SQLite has one writer):
        // two unlinks racing cannot both see a second identity and leave the user with none.
        try await lockUser(userID)
        let linked = try await db.raw("SELECT id FROM identities WHERE user_id = \(bind: userID)").all().map {
            try $0.decode(column: "id", as: String.self)
        }
        guard linked.contains(id) else { return .notFound }
        guard linked.count > 1 else { return .lastIdentity }
        let grant = try await db.raw("SELECT * FROM provider_grants WHERE identity_id = \(bind: id)").first().map(SQLAuthStore.providerGrant)
        _ = try await dropIdentity(id, reason: reason, at: at)
        return .unlinked(grant)
    }

    func removeIdentity(id: String, userID: String, reason: String, at: Date, deletingUserIfLast: Bool) async throws -> IdentityRemoval {
        // The user's row locked on PostgreSQL (SQLite has one writer): a link's insert, which takes a key-share lock on
        // it, waits for this transaction, or this one waits for the link and then counts its identity.
        try await lockUser(userID)
        let found = try await db.raw("SELECT id FROM identities WHERE id = \(bind: id) AND user_id = \(bind: userID)").first()
        guard found != nil else { return IdentityRemoval(removed: false, sessionsRevoked: 0, userDeleted: false) }
        let revoked = try await dropIdentity(id, reason: reason, at: at)
        guard deletingUserIfLast, try await db.raw("SELECT id FROM identities WHERE user_id = \(bind: userID) LIMIT 1").first() == nil else {
            return IdentityRemoval(removed: true, sessionsRevoked: revoked, userDeleted: false)
        }
        return IdentityRemoval(removed: true, sessionsRevoked: revoked, userDeleted: try await deleteUser(id: userID))
    }

    func deleteIdentity(id: String) async throws -> Bool {
        try await db.raw("DELETE FROM provider_grants WHERE identity_id = \(bind: id)").run()
        try await db.raw("DELETE FROM apple_transfers WHERE identity_id = \(bind: id)").run()
        return !(try await db.raw("DELETE FROM identities WHERE id = \(bind: id) RETURNING id").all().isEmpty)
    }

    func saveProviderGrant(_ grant: ProviderGrant) async throws {
        try await SQLAuthStore.upsertGrants([grant]).run(on: db)
    }

    func deleteProviderGrant(identityID: String, sealedRefreshToken: String) async throws -> Bool {
        !(try await db.raw(
            "DELETE FROM provider_grants WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken) RETURNING identity_id"
        ).all().isEmpty)
    }

    func deleteUser(id: String) async throws -> Bool {
        // Explicit deletes, child tables first: correct whether or not foreign keys cascade.
        try await db.raw("DELETE FROM refresh_tokens WHERE session_id IN (SELECT id FROM sessions WHERE user_id = \(bind: id))").run()
        try await db.raw("DELETE FROM sessions WHERE user_id = \(bind: id)").run()
        try await db.raw("DELETE FROM provider_grants WHERE identity_id IN (SELECT id FROM identities WHERE user_id = \(bind: id))").run()
        try await db.raw("DELETE FROM apple_transfers WHERE identity_id IN (SELECT id FROM identities WHERE user_id = \(bind: id))").run()
        try await db.raw("DELETE FROM identities WHERE user_id = \(bind: id)").run()
        return !(try await db.raw("DELETE FROM users WHERE id = \(bind: id) RETURNING id").all().isEmpty)
    }

    func setUserClaims(userID: String, claims: [String: JSONValue]?) async throws -> Bool {
        let document = try claims.flatMap { $0.isEmpty ? nil : String(decoding: try LeanJSONEncoder().encode($0), as: UTF8.self) }
        return !(try await db.raw("UPDATE users SET claims = \(bind: document) WHERE id = \(bind: userID) RETURNING id").all().isEmpty)
    }

    func revokeInvite(id: String, at: Date) async throws -> Bool {
        let found = try await db.raw("SELECT id FROM invites WHERE id = \(bind: id)").first() != nil
        if found { try await db.raw("UPDATE invites SET revoked_at = \(bind: at.millis) WHERE id = \(bind: id) AND revoked_at IS NULL").run() }
        return found
    }

    func createInvite(_ invite: Invite) async throws {
        try await db.raw(
            """
            INSERT INTO invites (code_hash, id, created_at, expires_at, max_uses, uses, revoked_at, note)
            VALUES (\(bind: invite.codeHash), \(bind: invite.id), \(bind: invite.createdAt.millis), \(bind: invite.expiresAt?.millis), \(bind: invite.maxUses),
              \(bind: invite.uses), \(bind: invite.revokedAt?.millis), \(bind: invite.note))
            """
        ).run()
    }

    func retryWebhookDelivery(id: String, at: Date) async throws -> Bool {
        try await !db.raw(
            """
            UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = \(bind: at.millis), finished_at = NULL
            WHERE id = \(bind: id) AND status = 'failed' RETURNING id
            """
        ).all().isEmpty
    }

    /// Revokes the open sessions the identity began (for `reason`) and deletes it with its grant; how many sessions.
    private func dropIdentity(_ id: String, reason: String, at: Date) async throws -> Int {
        let revoked = try await SQLAuthStore.revokeOpenSessions(SQLAuthStore.sessionsOfIdentity(id), reason: reason, at: at).all(on: db).count
        try await db.raw("DELETE FROM provider_grants WHERE identity_id = \(bind: id)").run()
        try await db.raw("DELETE FROM apple_transfers WHERE identity_id = \(bind: id)").run()
        try await db.raw("DELETE FROM identities WHERE id = \(bind: id)").run()
        return revoked
    }

    private func lockUser(_ userID: String) async throws {
        if postgres { try await db.raw("SELECT id FROM users WHERE id = \(bind: userID) FOR UPDATE").run() }
    }
}

extension SQLAuthStore {
    public func write<T: Sendable>(_ body: @escaping @Sendable (any StoreTransaction) async throws -> T) async throws -> T {
        let postgres = backend.isPostgres
        return try await sqlWrite { db in try await body(SQLStoreTransaction(db: db, postgres: postgres)) }
    }
}
