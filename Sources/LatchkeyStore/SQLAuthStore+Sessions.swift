public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// Sessions and their refresh tokens (``SessionStore``); rotation is in `SQLAuthStore+Rotation.swift`.
extension SQLAuthStore {
    public func createSession(_ family: SessionFamily, firstToken: RefreshTokenRecord) async throws {
        try await sqlWrite { db in
            try await Self.insertSessions([family]).run(on: db)
            try await Self.insertTokens([firstToken]).run(on: db)
        }
    }

    public func refreshToken(hash: String) async throws -> (RefreshTokenRecord, SessionFamily)? {
        try await Self.translatingErrors { try await tokenLookups.submit(hash) }
    }

    public func rotate(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval, accepting: (@Sendable (SessionFamily) -> Bool)?,
        reuse: ReuseNotice?
    ) async throws -> RotationResult {
        let request = RotationRequest(
            presentedHash: presentedHash, successor: successor, now: now, graceWindow: graceWindow, accepting: accepting, reuse: reuse)
        return try await Self.translatingErrors { try await rotations.submit(request) }
    }

    /// The most rotations one transaction has handled so far.
    var largestRotationGroup: Int { rotations.largestGroup }
    /// The most token look-ups one query has answered so far.
    var largestLookupGroup: Int { tokenLookups.largestGroup }
    /// How many token look-ups have been answered so far.
    var tokenLookupCount: Int { tokenLookups.handledRequests }

    /// How stale `sessions.last_used_at` may be.
    static let lastUseResolution: TimeInterval = 60

    public func session(id: String) async throws -> SessionFamily? {
        try await read { db in try await db.raw("SELECT * FROM sessions WHERE id = \(bind: id)").first().map(Self.session) }
    }

    public func sessions(userID: String) async throws -> [SessionFamily] {
        try await read { db in try await db.raw("SELECT * FROM sessions WHERE user_id = \(bind: userID) ORDER BY created_at").all().map(Self.session) }
    }

    public func revokeSessions(identityID: String, reason: String, at: Date) async throws -> Int {
        try await revokeSessions(Self.sessionsOfIdentity(identityID), reason: reason, at: at)
    }

    public func revokeSessions(identityID: String, createdBefore: Date, reason: String, at: Date) async throws -> Int {
        try await revokeSessions(Self.sessionsOfIdentity(identityID), createdBefore: createdBefore, reason: reason, at: at)
    }

    /// The condition on `sessions` that picks a user's sessions.
    static func sessionsOfUser(_ userID: String) -> BoundStatement { "user_id = \(bind: userID)" }

    /// The condition on `sessions` that picks the sessions an identity started. They are found among its user's
    /// (through the index on `user_id`): sessions have no index of their own on `identity_id`, which every
    /// sign-in would write to for the sake of rare revocations (migration 7).
    static func sessionsOfIdentity(_ identityID: String) -> BoundStatement {
        "user_id = (SELECT user_id FROM identities WHERE id = \(bind: identityID)) AND identity_id = \(bind: identityID)"
    }

    private func revokeSessions(_ matching: BoundStatement, createdBefore: Date = .distantFuture, reason: String, at: Date) async throws -> Int {
        let revoke = Self.revokeOpenSessions(matching, createdBefore: createdBefore, reason: reason, at: at)
        return try await sqlWrite { db in try await revoke.all(on: db).count }
    }

    /// Revokes the sessions `matching` picks that are still open and began before `createdBefore`; returns their ids.
    static func revokeOpenSessions(_ matching: BoundStatement, createdBefore: Date = .distantFuture, reason: String, at: Date) -> BoundStatement {
        let before = min(createdBefore, Date(timeIntervalSince1970: 1e12)).millis
        let revoke: BoundStatement = "UPDATE sessions SET revoked_at = \(bind: at.millis), revocation_reason = \(bind: reason) WHERE "
        let open: BoundStatement = " AND revoked_at IS NULL AND created_at < \(bind: before) RETURNING id"
        return revoke + matching + open
    }

    /// The columns of `sessions`, in the table's order: the one list of them outside the migrations.
    /// ``sessionValues(_:)`` gives a family's values in this order; `insertSessions` and
    /// `PostgresHandle.tokenWithSessionColumns` name the columns from here, and the positional decode in
    /// `PostgresHandle.tokensWithSessions` reads them in this order (a test round-trips a family with every field set
    /// through a rotation on both databases).
    static let sessionColumns: SQLColumns = [
        "id", "user_id", "identity_id", "client_id", "created_at", "last_used_at", "absolute_expires_at", "revoked_at", "revocation_reason", "user_agent",
        "idp", "dpop_jkt", "attested",
    ]

    /// A family's values in the order of ``sessionColumns``.
    static func sessionValues(_ family: SessionFamily) -> [any StatementValue] {
        [
            family.id, family.userID, family.identityID, family.clientID, family.createdAt.millis, family.lastUsedAt.millis,
            family.absoluteExpiresAt.millis, family.revokedAt?.millis, family.revocationReason, family.userAgent, family.idp,
            family.dpopThumbprint, family.attested ? 1 : nil,
        ]
    }

    /// One `INSERT` of sessions (at least one).
    static func insertSessions(_ families: [SessionFamily]) -> BoundStatement {
        "INSERT INTO sessions (\(columns: sessionColumns)) VALUES \(rows: families.map(sessionValues))"
    }

    /// The columns of `refresh_tokens`, in the table's order, as ``sessionColumns`` is for `sessions`.
    static let refreshTokenColumns: SQLColumns = ["hash", "session_id", "parent_hash", "created_at", "idle_expires_at", "rotated_at", "successor_hash"]

    /// A token's values in the order of ``refreshTokenColumns``.
    static func refreshTokenValues(_ token: RefreshTokenRecord) -> [any StatementValue] {
        [token.hash, token.familyID, token.parentHash, token.createdAt.millis, token.idleExpiresAt.millis, token.rotatedAt?.millis, token.successorHash]
    }

    /// One `INSERT` of refresh tokens (at least one).
    static func insertTokens(_ tokens: [RefreshTokenRecord]) -> BoundStatement {
        "INSERT INTO refresh_tokens (\(columns: refreshTokenColumns)) VALUES \(rows: tokens.map(refreshTokenValues))"
    }

    static func session(_ row: any SQLRow) throws -> SessionFamily {
        SessionFamily(
            id: try row.decode(column: "id", as: String.self), userID: try row.decode(column: "user_id", as: String.self),
            identityID: try row.decode(column: "identity_id", as: String?.self), clientID: try row.decode(column: "client_id", as: String.self),
            createdAt: try row.date("created_at"), lastUsedAt: try row.date("last_used_at"), absoluteExpiresAt: try row.date("absolute_expires_at"),
            revokedAt: try row.optionalDate("revoked_at"), revocationReason: try row.decode(column: "revocation_reason", as: String?.self),
            userAgent: try row.decode(column: "user_agent", as: String?.self), idp: try row.decode(column: "idp", as: String?.self),
            dpopThumbprint: try row.decode(column: "dpop_jkt", as: String?.self), attested: try row.flag("attested") == true
        )
    }
}
