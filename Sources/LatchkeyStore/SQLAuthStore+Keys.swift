import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// The keys that sign access tokens (``SigningKeyStore``).
extension SQLAuthStore {
    public func signingKeys() async throws -> [SigningKeyRecord] {
        try await read { db in
            try await db.raw("SELECT * FROM signing_keys ORDER BY created_at").all().map { row in
                SigningKeyRecord(
                    keyID: try row.decode(column: "key_id", as: String.self), algorithm: try row.decode(column: "algorithm", as: String.self),
                    sealedPrivateKey: try row.decode(column: "sealed_private_key", as: String.self),
                    publicKeyPEM: try row.decode(column: "public_key_pem", as: String.self),
                    state: SigningKeyRecord.State(rawValue: try row.decode(column: "state", as: String.self)) ?? .retired,
                    createdAt: try row.date("created_at"), retireAfter: try row.optionalDate("retire_after")
                )
            }
        }
    }

    public func saveSigningKey(_ key: SigningKeyRecord) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO signing_keys (key_id, algorithm, sealed_private_key, public_key_pem, state, created_at, retire_after)
                VALUES (\(bind: key.keyID), \(bind: key.algorithm), \(bind: key.sealedPrivateKey), \(bind: key.publicKeyPEM), \(bind: key.state.rawValue),
                  \(bind: key.createdAt.millis), \(bind: key.retireAfter?.millis))
                ON CONFLICT (key_id) DO UPDATE SET state = excluded.state, retire_after = excluded.retire_after
                """
            ).run()
        }
    }

    public func saveFirstSigningKey(_ key: SigningKeyRecord) async throws -> Bool {
        let postgres = backend.isPostgres
        return try await sqlWrite { db in
            // SQLite runs one writer at a time; on PostgreSQL two transactions would each see no active key.
            if postgres { try await db.raw("SELECT pg_advisory_xact_lock(7421002)").run() }
            return try await !db.raw(
                """
                INSERT INTO signing_keys (key_id, algorithm, sealed_private_key, public_key_pem, state, created_at, retire_after)
                SELECT \(bind: key.keyID), \(bind: key.algorithm), \(bind: key.sealedPrivateKey), \(bind: key.publicKeyPEM), \(bind: key.state.rawValue),
                  \(bind: key.createdAt.millis), \(bind: key.retireAfter?.millis)
                WHERE NOT EXISTS (SELECT 1 FROM signing_keys WHERE state = 'active')
                RETURNING key_id
                """
            ).all().isEmpty
        }
    }
}
