import Foundation
import LatchkeyCore
import LatchkeyJOSE
import PostgresNIO
import SQLKit

/// One presentation of a refresh token, waiting for its group.
struct RotationRequest: Sendable {
    let presentedHash: String
    let successor: RefreshTokenRecord
    let now: Date
    let graceWindow: TimeInterval
    let accepting: (@Sendable (SessionFamily) -> Bool)?
    /// What revoking the session for reuse writes with it.
    let reuse: ReuseNotice?
}

extension SQLAuthStore {
    /// Rotates a group of presented tokens in the caller's transaction with a few statements, whatever the group's
    /// size: one read of the presented tokens and their sessions, then one write of each kind that is needed (on
    /// PostgreSQL one statement for them all). Retries (a read of their successors) and sessions revoked for reuse
    /// take statements of their own.
    /// The requests are judged in order by ``RotationRule`` on the rows read, so a token presented twice in one
    /// group gets exactly what it would have got in two transactions.
    static func rotate(_ requests: [RotationRequest], onPostgres: Bool, _ db: any SQLDatabase) async throws -> [RotationResult] {
        // Sorted, so that instances locking the same rows on PostgreSQL lock them in the same order.
        let presented = Set(requests.map(\.presentedHash)).sorted()
        var tokens: [String: RefreshTokenRecord] = [:]
        var families: [String: SessionFamily] = [:]
        func load(_ hashes: [String], locking: Bool) async throws {
            for (token, family) in try await tokensWithSessions(hashes, locking: locking, db) {
                tokens[token.hash] = token
                families[family.id] = family
            }
        }
        try await load(presented, locking: onPostgres)
        // A retry needs to know whether its successor is still unused: a statement of its own, because on PostgreSQL
        // the locking read above does not see a successor that the transaction it waited for has just inserted.
        let successors = Set(tokens.values.compactMap { $0.rotatedAt == nil ? nil : $0.successorHash }).subtracting(tokens.keys).sorted()
        if !successors.isEmpty { try await load(successors, locking: false) }
        let storedTokens = tokens
        let storedFamilies = families
        let results = requests.map {
            RotationRule.apply(
                presentedHash: $0.presentedHash, successor: $0.successor, now: $0.now, graceWindow: $0.graceWindow, tokens: &tokens, families: &families,
                accepting: $0.accepting)
        }
        // A successor must be new: one that names a stored token fails, as its INSERT would have alone.
        for (request, result) in zip(requests, results) where storedTokens[request.successor.hash] != nil {
            if case .rotated = result { throw AuthStoreError.duplicate }
        }

        let changedTokens = tokens.values.sorted { $0.hash < $1.hash }
        let rotated = changedTokens.filter { storedTokens[$0.hash].map { $0.rotatedAt == nil } ?? false && $0.rotatedAt != nil }
        let added = changedTokens.filter { storedTokens[$0.hash] == nil }
        let changedFamilies = families.values.sorted { $0.id < $1.id }
        let revoked = changedFamilies.filter { storedFamilies[$0.id]?.revokedAt == nil && $0.revokedAt != nil }
        // The session's last use is kept to the minute: most rotations skip this write.
        let used = changedFamilies.filter { family in
            storedFamilies[family.id].map { family.lastUsedAt.timeIntervalSince($0.lastUsedAt) >= lastUseResolution } ?? false
        }

        var writes: [BoundStatement] = []
        if !rotated.isEmpty {
            writes.append(
                """
                UPDATE refresh_tokens SET rotated_at = v.column2, successor_hash = v.column3
                FROM (VALUES \(rows: rotated.map { [$0.hash, $0.rotatedAt?.millis, $0.successorHash] })) AS v WHERE refresh_tokens.hash = v.column1
                """)
        }
        if !used.isEmpty {
            writes.append(
                """
                UPDATE sessions SET last_used_at = v.column2
                FROM (VALUES \(rows: used.map { [$0.id, $0.lastUsedAt.millis] })) AS v WHERE sessions.id = v.column1
                """)
        }
        if !added.isEmpty {
            writes.append(insertTokens(added))
        }
        if onPostgres, writes.count > 1 {
            // One round trip: PostgreSQL runs statements in WITH together (they touch different rows).
            let steps: [any SQLExpression] = writes.dropLast().enumerated().map { index, write in
                let step: SQLQueryString = "w\(unsafeRaw: String(index)) AS (\(write))"
                return step
            }
            try await db.raw("WITH \(SQLList(steps)) \(writes[writes.count - 1])").run()
        } else {
            for write in writes { try await write.run(on: db) }
        }
        for family in revoked {
            try await db.raw(
                """
                UPDATE sessions SET revoked_at = \(bind: family.revokedAt?.millis), revocation_reason = \(bind: family.revocationReason) WHERE id = \(bind: family.id)
                """
            ).run()
        }
        var records = ChangeRecords()
        for (request, result) in zip(requests, results) {
            guard case .reuseDetected(let family) = result, let reuse = request.reuse else { continue }
            let more = reuse.records(for: family)
            records.audits += more.audits
            records.deliveries += more.deliveries
        }
        if !records.audits.isEmpty { try await insertAudits(records.audits).run(on: db) }
        try await insertWebhookDeliveries(records.deliveries, db)
        return results
    }
}

extension SQLAuthStore {
    /// The token and session of each hash (nil for an unknown one), in one query.
    static func tokensWithSessions(hashes: [String], _ db: any SQLDatabase) async throws -> [(RefreshTokenRecord, SessionFamily)?] {
        var found: [String: (RefreshTokenRecord, SessionFamily)] = [:]
        for pair in try await tokensWithSessions(Array(Set(hashes)), locking: false, db) { found[pair.0.hash] = pair }
        return hashes.map { found[$0] }
    }

    /// The tokens of `hashes` that exist, each with its session; with `locking` (PostgreSQL only), their rows stay
    /// locked, in hash order, until the transaction ends.
    private static func tokensWithSessions(_ hashes: [String], locking: Bool, _ db: any SQLDatabase) async throws -> [(RefreshTokenRecord, SessionFamily)] {
        if let postgres = db as? PostgresHandle { return try await postgres.tokensWithSessions(hashes, locking: locking) }
        let matching: BoundStatement = " WHERE t.hash IN (\(binds: hashes))"
        return try await (tokenWithSession + matching).all(on: db).map(tokenWithSession)
    }

    /// A refresh token and its session in one row: the session's columns as they are, the token's prefixed `t_`, and
    /// the user's claims (for the access token a rotation mints).
    static let tokenWithSession = """
        SELECT s.*, \(refreshTokenColumns.list(table: "t", alias: "t_")), u.claims AS u_claims, u.is_anonymous AS u_is_anonymous
        FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id LEFT JOIN users u ON u.id = s.user_id
        """

    static func tokenWithSession(_ row: any SQLRow) throws -> (RefreshTokenRecord, SessionFamily) {
        var family = try session(row)
        family.userClaims = try row.decode(column: "u_claims", as: String?.self).flatMap(claims)
        family.userIsAnonymous = try row.flag("u_is_anonymous") == true
        let token = RefreshTokenRecord(
            hash: try row.decode(column: "t_hash", as: String.self), familyID: family.id,
            parentHash: try row.decode(column: "t_parent_hash", as: String?.self), createdAt: try row.date("t_created_at"),
            idleExpiresAt: try row.date("t_idle_expires_at"), rotatedAt: try row.optionalDate("t_rotated_at"),
            successorHash: try row.decode(column: "t_successor_hash", as: String?.self))
        return (token, family)
    }
}

extension PostgresHandle {
    /// The token and session of each hash that exists, in one query whose text does not depend on how many hashes
    /// there are; with `locking`, the rows of the tokens and their sessions stay locked (in hash order) until the transaction ends.
    func tokensWithSessions(_ hashes: [String], locking: Bool) async throws -> [(RefreshTokenRecord, SessionFamily)] {
        let query: PostgresQuery =
            locking
            ? "\(unescaped: Self.tokenWithSessionColumns) WHERE t.hash = ANY(\(hashes)) ORDER BY t.hash FOR UPDATE OF t, s"
            : "\(unescaped: Self.tokenWithSessionColumns) WHERE t.hash = ANY(\(hashes))"
        var pairs: [(RefreshTokenRecord, SessionFamily)] = []
        for try await row in try await connection.query(query, logger: logger) {
            // Positional, for speed: the session's values in the order of `SQLAuthStore.sessionColumns`, then the
            // token's in the order of `SQLAuthStore.refreshTokenColumns` (see `tokenWithSessionColumns`). A change to
            // either list changes this tuple and the initializers below with it.
            let (
                id, userID, identityID, clientID, created, lastUsed, absoluteExpiry, revoked, reason, userAgent, idp, dpopThumbprint, attested,
                hash, familyID, parent, tokenCreated, idleExpiry, rotated, successor, claims, anonymous
            ) =
                try row.decode(
                    (
                        String, String, String?, String, Int64, Int64, Int64, Int64?, String?, String?, String?, String?, Int?, String, String, String?, Int64,
                        Int64, Int64?, String?, String?, Int?
                    ).self)
            let family = SessionFamily(
                id: id, userID: userID, identityID: identityID, clientID: clientID, createdAt: Date(millis: created), lastUsedAt: Date(millis: lastUsed),
                absoluteExpiresAt: Date(millis: absoluteExpiry), revokedAt: revoked.map(Date.init(millis:)), revocationReason: reason, userAgent: userAgent,
                idp: idp, userClaims: claims.flatMap(SQLAuthStore.claims), userIsAnonymous: (anonymous ?? 0) != 0, dpopThumbprint: dpopThumbprint,
                attested: (attested ?? 0) != 0)
            let token = RefreshTokenRecord(
                hash: hash, familyID: familyID, parentHash: parent, createdAt: Date(millis: tokenCreated), idleExpiresAt: Date(millis: idleExpiry),
                rotatedAt: rotated.map(Date.init(millis:)), successorHash: successor)
            pairs.append((token, family))
        }
        return pairs
    }

    /// Every column of the session, then every column of the token, each in its list's order, then the user's claims:
    /// the order the positional decode above reads them.
    static let tokenWithSessionColumns = """
        SELECT \(SQLAuthStore.sessionColumns.list(table: "s")), \(SQLAuthStore.refreshTokenColumns.list(table: "t")), u.claims, u.is_anonymous
        FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id LEFT JOIN users u ON u.id = s.user_id
        """
}
