public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// What must happen once only: notifications and identity tokens (``ReplayStore``), and the browser flow's
/// one-time records (``OneTimeRecordStore``).
extension SQLAuthStore {
    // MARK: Notifications

    public func recordNotification(id: String, type: String, at: Date) async throws -> Bool {
        do {
            try await sqlWrite { db in
                try await db.raw("INSERT INTO processed_notifications (id, type, received_at) VALUES (\(bind: id), \(bind: type), \(bind: at.millis))").run()
            }
            return true
        } catch AuthStoreError.duplicate {
            return false
        }
    }

    public func hasProcessedNotification(id: String) async throws -> Bool {
        try await read { db in try await db.raw("SELECT id FROM processed_notifications WHERE id = \(bind: id)").first() != nil }
    }

    // MARK: Sign-in replay records

    public func recordSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) async throws -> Bool {
        let claim = SignInTokenClaim(provider: provider, subject: subject, tokenHash: tokenHash, expiresAt: expiresAt)
        return try await Self.translatingErrors { try await signInClaims.submit(claim) }
    }

    public func deleteSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) async throws {
        let release = Self.releaseClaim(SignInTokenClaim(provider: provider, subject: subject, tokenHash: tokenHash, expiresAt: expiresAt))
        try await sqlWrite { db in try await release.run(on: db) }
    }

    /// Deletes a claim's record, found by the table's key.
    static func releaseClaim(_ claim: SignInTokenClaim) -> BoundStatement {
        """
        DELETE FROM used_sign_in_tokens
        WHERE expires_at = \(bind: claim.expiresAt.millis) AND provider = \(bind: claim.provider) AND token_hash = \(bind: claim.tokenHash) AND subject = \(bind: claim.subject)
        """
    }

    // MARK: One-time records

    public func saveOneTimeRecord(_ record: OneTimeRecord) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO one_time_records (kind, key_hash, sealed_payload, expires_at, used_at)
                VALUES (\(bind: record.kind), \(bind: record.keyHash), \(bind: record.sealedPayload), \(bind: record.expiresAt.millis), \(bind: record.usedAt?.millis))
                """
            ).run()
        }
    }

    public func useOneTimeRecord(kind: String, keyHash: String, at: Date) async throws -> OneTimeRecord? {
        try await sqlWrite { db in
            // One conditional update decides who used it first, across instances; a loser reads what is there.
            if let first = try await db.raw(
                """
                UPDATE one_time_records SET used_at = \(bind: at.millis) WHERE kind = \(bind: kind) AND key_hash = \(bind: keyHash) AND used_at IS NULL
                RETURNING sealed_payload, expires_at
                """
            ).first() {
                return OneTimeRecord(
                    kind: kind, keyHash: keyHash, sealedPayload: try first.decode(column: "sealed_payload", as: String.self),
                    expiresAt: try first.date("expires_at"))
            }
            guard
                let used = try await db.raw(
                    "SELECT sealed_payload, expires_at, used_at FROM one_time_records WHERE kind = \(bind: kind) AND key_hash = \(bind: keyHash)"
                ).first()
            else { return nil }
            return OneTimeRecord(
                kind: kind, keyHash: keyHash, sealedPayload: try used.decode(column: "sealed_payload", as: String.self), expiresAt: try used.date("expires_at"),
                usedAt: try used.optionalDate("used_at"))
        }
    }
}
