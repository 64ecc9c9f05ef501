public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import SQLKit

/// Imports and app transfers: the transaction's operations for both, and what `latchkey apple transfer` reads.
extension SQLStoreTransaction {
    func setUserDisabled(userID: String, at: Date?) async throws -> Bool {
        !(try await db.raw("UPDATE users SET disabled_at = \(bind: at?.millis) WHERE id = \(bind: userID) RETURNING id").all().isEmpty)
    }

    func existingUserIDs(_ ids: [String]) async throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        let rows = try await db.raw("SELECT id FROM users WHERE id IN (\(binds: ids))").all()
        return Set(try rows.map { try $0.decode(column: "id", as: String.self) })
    }

    func importedUserIDs(source: String, sourceIDs: [String]) async throws -> [String: String] {
        guard !sourceIDs.isEmpty else { return [:] }
        let rows = try await db.raw(
            "SELECT id, imported_id FROM users WHERE imported_source = \(bind: source) AND imported_id IN (\(binds: sourceIDs))"
        ).all()
        var found: [String: String] = [:]
        for row in rows { found[try row.decode(column: "imported_id", as: String.self)] = try row.decode(column: "id", as: String.self) }
        return found
    }

    func identityOwners(_ keys: [ProviderAccountKey]) async throws -> [ProviderAccountKey: String] {
        guard !keys.isEmpty else { return [:] }
        let lookup: BoundStatement =
            "SELECT provider, subject, user_id FROM identities WHERE (provider, subject) IN (VALUES \(rows: keys.map { [$0.provider, $0.subject] }))"
        let rows = try await lookup.all(on: db)
        var owners: [ProviderAccountKey: String] = [:]
        for row in rows {
            let key = ProviderAccountKey(
                provider: try row.decode(column: "provider", as: String.self), subject: try row.decode(column: "subject", as: String.self))
            owners[key] = try row.decode(column: "user_id", as: String.self)
        }
        return owners
    }

    func insertAccounts(_ accounts: [NewAccount]) async throws {
        guard !accounts.isEmpty else { return }
        let users = try accounts.map { account -> [any StatementValue] in
            let user = account.user
            let claims = try user.claims.flatMap { $0.isEmpty ? nil : String(decoding: try LeanJSONEncoder().encode($0), as: UTF8.self) }
            return [
                user.id, user.createdAt.millis, user.email, user.emailVerified.flag, user.givenName, user.familyName, claims, user.disabledAt?.millis,
                user.importedFrom?.source, user.importedFrom?.id, user.importedFrom?.at.millis, user.isAnonymous ? 1 : nil,
            ]
        }
        let insert: BoundStatement = """
            INSERT INTO users (id, created_at, email, email_verified, given_name, family_name, claims, disabled_at, imported_source, imported_id, imported_at,
              is_anonymous)
            VALUES \(rows: users)
            """
        try await insert.run(on: db)
        let identities = accounts.flatMap(\.identities)
        if !identities.isEmpty { try await SQLAuthStore.insertIdentities(identities).run(on: db) }
    }

    func createSession(_ start: SessionStart) async throws {
        try await SQLAuthStore.insertSessions([start.family]).run(on: db)
        try await SQLAuthStore.insertTokens([start.firstToken]).run(on: db)
    }

    func redeemInvite(codeHash: String, at: Date) async throws -> Bool {
        try await SQLAuthStore.redeemInvite(codeHash: codeHash, at: at, db)
    }

    func clearAnonymous(userID: String) async throws -> Bool {
        !(try await db.raw("UPDATE users SET is_anonymous = NULL WHERE id = \(bind: userID) AND is_anonymous = 1 RETURNING id").all().isEmpty)
    }

    func moveTransferredIdentity(_ identity: LinkedIdentity, at: Date) async throws -> Bool {
        let marked = try await db.raw(
            """
            UPDATE apple_transfers SET moved_at = \(bind: at.millis), new_subject = \(bind: identity.subject), failure = NULL
            WHERE identity_id = \(bind: identity.id) AND moved_at IS NULL RETURNING identity_id
            """
        ).all()
        guard !marked.isEmpty else { return false }
        let before = try await db.raw("SELECT user_id, email FROM identities WHERE id = \(bind: identity.id)").first()
        if let before, let old = try before.decode(column: "email", as: String?.self), let new = identity.email, old != new {
            // The user's address was this identity's old relay address: the new team's replaces it.
            let userID = try before.decode(column: "user_id", as: String.self)
            try await db.raw("UPDATE users SET email = \(bind: new) WHERE id = \(bind: userID) AND email = \(bind: old)").run()
        }
        try await db.raw(
            """
            UPDATE identities SET subject = \(bind: identity.subject), email = \(bind: identity.email), claims = \(bind: SQLAuthStore.claimsDocument(identity.claims))
            WHERE id = \(bind: identity.id)
            """
        ).run()
        // The sending team's refresh token is no use to the recipient team: the next sign-in with a code brings one.
        try await db.raw("DELETE FROM provider_grants WHERE identity_id = \(bind: identity.id)").run()
        return true
    }
}

extension SQLAuthStore {
    public func appleIdentitiesToPrepare(targetTeam: String, after: String?, limit: Int) async throws -> [LinkedIdentity] {
        try await read { db in
            try await db.raw(
                """
                SELECT i.* FROM identities i LEFT JOIN apple_transfers t ON t.identity_id = i.id
                WHERE i.provider = 'apple' AND i.id > \(bind: after ?? "")
                  AND (t.identity_id IS NULL OR (t.moved_at IS NULL AND (t.transfer_sub IS NULL OR t.target_team <> \(bind: targetTeam))))
                ORDER BY i.id LIMIT \(bind: limit)
                """
            ).all().map(Self.identity)
        }
    }

    public func saveAppleTransfer(_ record: AppleTransferRecord) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO apple_transfers (identity_id, old_subject, transfer_sub, target_team, prepared_at, moved_at, new_subject, failure, closed_at)
                VALUES (\(bind: record.identityID), \(bind: record.oldSubject), \(bind: record.transferSubject), \(bind: record.targetTeam),
                  \(bind: record.preparedAt.millis), \(bind: record.movedAt?.millis), \(bind: record.newSubject), \(bind: record.failure), NULL)
                ON CONFLICT (identity_id) DO UPDATE SET old_subject = excluded.old_subject, transfer_sub = excluded.transfer_sub,
                  target_team = excluded.target_team, prepared_at = excluded.prepared_at, moved_at = excluded.moved_at,
                  new_subject = excluded.new_subject, failure = excluded.failure, closed_at = NULL
                """
            ).run()
        }
    }

    public func unmovedAppleTransfers(after: String?, limit: Int) async throws -> [AppleTransferRecord] {
        try await read { db in
            try await db.raw(
                """
                SELECT * FROM apple_transfers WHERE transfer_sub IS NOT NULL AND moved_at IS NULL AND closed_at IS NULL
                  AND identity_id > \(bind: after ?? "") ORDER BY identity_id LIMIT \(bind: limit)
                """
            ).all().map(Self.appleTransfer)
        }
    }

    public func appleTransfer(identityID: String) async throws -> AppleTransferRecord? {
        try await read { db in
            try await db.raw("SELECT * FROM apple_transfers WHERE identity_id = \(bind: identityID)").first().map(Self.appleTransfer)
        }
    }

    public func appleTransfer(transferSubject: String) async throws -> AppleTransferRecord? {
        try await read { db in
            try await db.raw("SELECT * FROM apple_transfers WHERE transfer_sub = \(bind: transferSubject)").first().map(Self.appleTransfer)
        }
    }

    public func appleTransferSummary(countingIdentities: Bool) async throws -> AppleTransferSummary {
        try await read { db in
            let apple =
                countingIdentities
                ? try await db.raw("SELECT COUNT(*) AS n FROM identities WHERE provider = 'apple'").first()?.decode(column: "n", as: Int.self) ?? 0 : 0
            guard
                let row = try await db.raw(
                    """
                    SELECT COUNT(transfer_sub) AS prepared, COUNT(moved_at) AS moved,
                      COALESCE(SUM(CASE WHEN transfer_sub IS NULL THEN 1 ELSE 0 END), 0) AS refused,
                      COALESCE(SUM(CASE WHEN closed_at IS NOT NULL AND moved_at IS NULL THEN 1 ELSE 0 END), 0) AS closed, MIN(moved_at) AS first_moved_at
                    FROM apple_transfers
                    """
                ).first()
            else { return AppleTransferSummary(appleIdentities: apple) }
            let target = try await db.raw("SELECT target_team FROM apple_transfers ORDER BY prepared_at DESC LIMIT 1").first()?
                .decode(column: "target_team", as: String.self)
            return AppleTransferSummary(
                appleIdentities: apple, prepared: try row.decode(column: "prepared", as: Int.self), moved: try row.decode(column: "moved", as: Int.self),
                refused: try row.decode(column: "refused", as: Int.self), closed: try row.decode(column: "closed", as: Int.self), targetTeam: target,
                firstMovedAt: try row.optionalDate("first_moved_at"))
        }
    }

    public func closeAppleTransfers(at: Date) async throws -> Int {
        try await sqlWrite { db in
            try await db.raw(
                """
                UPDATE apple_transfers SET closed_at = \(bind: at.millis)
                WHERE transfer_sub IS NOT NULL AND moved_at IS NULL AND closed_at IS NULL RETURNING identity_id
                """
            ).all().count
        }
    }

    public func appleIdentitiesWithoutGrant() async throws -> Int {
        try await read { db in
            try await db.raw(
                """
                SELECT COUNT(*) AS n FROM identities i LEFT JOIN provider_grants g ON g.identity_id = i.id
                WHERE i.provider = 'apple' AND g.identity_id IS NULL
                """
            ).first()?.decode(column: "n", as: Int.self) ?? 0
        }
    }

}

extension SQLAuthStore {
    static func appleTransfer(_ row: any SQLRow) throws -> AppleTransferRecord {
        AppleTransferRecord(
            identityID: try row.decode(column: "identity_id", as: String.self), oldSubject: try row.decode(column: "old_subject", as: String.self),
            transferSubject: try row.decode(column: "transfer_sub", as: String?.self), targetTeam: try row.decode(column: "target_team", as: String.self),
            preparedAt: try row.date("prepared_at"), movedAt: try row.optionalDate("moved_at"),
            newSubject: try row.decode(column: "new_subject", as: String?.self),
            failure: try row.decode(column: "failure", as: String?.self))
    }
}

extension SQLAuthStore {
    public func countEvent(key: String, window: TimeInterval, at: Date) async throws -> Int {
        let start = Int64((at.timeIntervalSince1970 / window).rounded(.down) * window * 1000)
        return try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO rate_counters (key, window_start, count) VALUES (\(bind: key), \(bind: start), 1)
                ON CONFLICT (key) DO UPDATE SET
                  count = CASE WHEN rate_counters.window_start = excluded.window_start THEN rate_counters.count + 1 ELSE 1 END,
                  window_start = excluded.window_start
                RETURNING count
                """
            ).first()?.decode(column: "count", as: Int.self) ?? 1
        }
    }

    public func idleAnonymousUsers(before cutoff: Date, limit: Int) async throws -> [String] {
        try await read { db in
            try await db.raw(
                """
                SELECT u.id FROM users u WHERE u.is_anonymous = 1 AND u.created_at < \(bind: cutoff.millis)
                  AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.user_id = u.id AND s.last_used_at >= \(bind: cutoff.millis))
                ORDER BY u.created_at LIMIT \(bind: limit)
                """
            ).all().map { try $0.decode(column: "id", as: String.self) }
        }
    }
}

extension SQLAuthStore {
    public func saveEmailCode(_ record: EmailCodeRecord) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO email_codes (address, code_hash, expires_at, attempts)
                VALUES (\(bind: record.address), \(bind: record.codeHash), \(bind: record.expiresAt.millis), \(bind: record.attempts))
                ON CONFLICT (address) DO UPDATE SET code_hash = excluded.code_hash, expires_at = excluded.expires_at, attempts = excluded.attempts
                """
            ).run()
        }
    }

    public func checkEmailCode(address: String, codeHash: String, at now: Date, maximumAttempts: Int) async throws -> EmailCodeCheck {
        let postgres = backend.isPostgres
        return try await sqlWrite { db in
            let lock: SQLQueryString = postgres ? " FOR UPDATE" : ""
            guard
                let row = try await db.raw("SELECT code_hash, expires_at, attempts FROM email_codes WHERE address = \(bind: address)\(lock)").first()
            else { return .none }
            guard try row.date("expires_at") > now else {
                try await db.raw("DELETE FROM email_codes WHERE address = \(bind: address)").run()
                return .none
            }
            if constantTimeEquals(try row.decode(column: "code_hash", as: String.self), codeHash) {
                try await db.raw("DELETE FROM email_codes WHERE address = \(bind: address)").run()
                return .accepted
            }
            let attempts = try row.decode(column: "attempts", as: Int.self) + 1
            if attempts >= maximumAttempts {
                try await db.raw("DELETE FROM email_codes WHERE address = \(bind: address)").run()
            } else {
                try await db.raw("UPDATE email_codes SET attempts = \(bind: attempts) WHERE address = \(bind: address)").run()
            }
            return .wrong(remaining: max(0, maximumAttempts - attempts))
        }
    }
}
