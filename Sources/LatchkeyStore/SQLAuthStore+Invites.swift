package import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// Invite codes (``InviteStore``).
extension SQLAuthStore {
    public func invites() async throws -> [Invite] {
        try await read { db in
            try await db.raw("SELECT * FROM invites ORDER BY created_at").all().map { row in
                Invite(
                    id: try row.decode(column: "id", as: String.self), codeHash: try row.decode(column: "code_hash", as: String.self),
                    createdAt: try row.date("created_at"), expiresAt: try row.optionalDate("expires_at"),
                    maxUses: try row.decode(column: "max_uses", as: Int.self),
                    uses: try row.decode(column: "uses", as: Int.self), revokedAt: try row.optionalDate("revoked_at"),
                    note: try row.decode(column: "note", as: String?.self))
            }
        }
    }

    package func redeemInvite(codeHash: String, at now: Date) async throws -> Bool {
        try await sqlWrite { db in try await Self.redeemInvite(codeHash: codeHash, at: now, db) }
    }

    /// One conditional update: two sign-ins racing for the last use cannot both win.
    static func redeemInvite(codeHash: String, at now: Date, _ db: any SQLDatabase) async throws -> Bool {
        let spent = try await db.raw(
            """
            UPDATE invites SET uses = uses + 1 WHERE code_hash = \(bind: codeHash) AND revoked_at IS NULL AND uses < max_uses
              AND (expires_at IS NULL OR expires_at > \(bind: now.millis)) RETURNING id
            """
        ).first()
        return spent != nil
    }
}
