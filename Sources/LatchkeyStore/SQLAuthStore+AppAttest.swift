public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
public import LatchkeyWebAuthn
import SQLKit

/// Each install's App Attest key (``AppAttestKeyStore``).
extension SQLAuthStore {
    public func appAttestKey(id: String) async throws -> AttestedAppKey? {
        try await read { db in
            guard
                let row = try await db.raw(
                    "SELECT key_id, public_key, counter, receipt, app_id, environment FROM app_attest_keys WHERE key_id = \(bind: id)"
                ).first()
            else { return nil }
            guard let keyID = Data(base64Encoded: try row.decode(column: "key_id", as: String.self)),
                let publicKey = Data(base64Encoded: try row.decode(column: "public_key", as: String.self)),
                let receipt = Data(base64Encoded: try row.decode(column: "receipt", as: String.self)),
                let environment = AppAttestEnvironment(rawValue: try row.decode(column: "environment", as: String.self)),
                let counter = UInt32(exactly: try row.decode(column: "counter", as: Int64.self))
            else { throw AuthStoreError.unavailable("an App Attest key's row is unreadable") }
            return AttestedAppKey(
                keyID: Array(keyID), publicKey: Array(publicKey), counter: counter, receipt: Array(receipt),
                appID: try row.decode(column: "app_id", as: String.self), environment: environment)
        }
    }

    public func saveAppAttestKey(_ key: AttestedAppKey, at: Date) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO app_attest_keys (key_id, user_id, public_key, counter, receipt, app_id, environment, created_at, last_used_at)
                VALUES (\(bind: Data(key.keyID).base64EncodedString()), NULL, \(bind: Data(key.publicKey).base64EncodedString()), \(bind: Int64(key.counter)),
                  \(bind: Data(key.receipt).base64EncodedString()), \(bind: key.appID), \(bind: key.environment.rawValue), \(bind: at.millis), \(bind: at.millis))
                ON CONFLICT (key_id) DO NOTHING
                """
            ).run()
        }
    }

    public func advanceAppAttestCounter(keyID: String, to counter: UInt32, at: Date) async throws -> Bool {
        try await sqlWrite { db in
            try await db.raw(
                """
                UPDATE app_attest_keys SET counter = \(bind: Int64(counter)), last_used_at = \(bind: at.millis)
                WHERE key_id = \(bind: keyID) AND counter < \(bind: Int64(counter)) RETURNING key_id
                """
            ).first() != nil
        }
    }

    public func appAttestKeys(userID: String) async throws -> [AppAttestKeyRecord] {
        try await read { db in
            try await db.raw(
                "SELECT key_id, app_id, environment, created_at, last_used_at FROM app_attest_keys WHERE user_id = \(bind: userID) ORDER BY created_at, key_id"
            ).all().map { row in
                AppAttestKeyRecord(
                    keyID: try row.decode(column: "key_id", as: String.self), appID: try row.decode(column: "app_id", as: String.self),
                    environment: try row.decode(column: "environment", as: String.self), createdAt: try row.date("created_at"),
                    lastUsedAt: try row.date("last_used_at"))
            }
        }
    }

    public func assignAppAttestKey(keyID: String, userID: String) async throws {
        try await sqlWrite { db in
            try await db.raw("UPDATE app_attest_keys SET user_id = \(bind: userID) WHERE key_id = \(bind: keyID)").run()
        }
    }
}
