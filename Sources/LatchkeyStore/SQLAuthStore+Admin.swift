public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// What the admin API reads and its keys (``AdminKeyStore``).
extension SQLAuthStore {
    public func searchUsers(_ search: UserSearch) async throws -> [UserAccount] {
        var conditions: [SQLQueryString] = []
        if let cursor = search.cursor { conditions.append("u.id > \(bind: cursor)") }
        if let after = search.createdAfter { conditions.append("u.created_at > \(bind: after.millis)") }
        if let anonymous = search.anonymous { conditions.append(anonymous ? "u.is_anonymous = 1" : "u.is_anonymous IS NULL") }
        if let email = search.email?.lowercased() {
            // As given, and in lower case (providers nearly always give e-mails in lower case); a scan, as admin look-ups are rare.
            let spellings = Array(Set([search.email ?? email, email]))
            conditions.append(
                "(u.email IN (\(binds: spellings)) OR u.id IN (SELECT user_id FROM identities WHERE email IN (\(binds: spellings))))")
        }
        if search.provider != nil || search.subject != nil {
            var identity: [SQLQueryString] = []
            if let provider = search.provider { identity.append("provider = \(bind: provider)") }
            if let subject = search.subject { identity.append("subject = \(bind: subject)") }
            conditions.append("u.id IN (SELECT user_id FROM identities WHERE \(SQLList(identity, separator: SQLRaw(" AND "))))")
        }
        let filter: SQLQueryString = conditions.isEmpty ? "" : "WHERE \(SQLList(conditions, separator: SQLRaw(" AND ")))"
        return try await read { db in
            try await db.raw("SELECT u.* FROM users u \(filter) ORDER BY u.id LIMIT \(bind: max(0, search.limit))").all().map { try Self.user($0) }
        }
    }

    public func auditEvents(_ search: AuditSearch) async throws -> [AuditEvent] {
        var conditions: [SQLQueryString] = []
        if let cursor = search.cursor { conditions.append(search.oldestFirst ? "id > \(bind: cursor)" : "id < \(bind: cursor)") }
        if let userID = search.userID { conditions.append("user_id = \(bind: userID)") }
        if let kind = search.kind { conditions.append("kind = \(bind: kind)") }
        if let since = search.since { conditions.append("at >= \(bind: since.millis)") }
        if let until = search.until { conditions.append("at < \(bind: until.millis)") }
        let filter: SQLQueryString = conditions.isEmpty ? "" : "WHERE \(SQLList(conditions, separator: SQLRaw(" AND ")))"
        let order: SQLQueryString = search.oldestFirst ? "ORDER BY id" : "ORDER BY id DESC"
        return try await read { db in
            try await db.raw("SELECT * FROM audit_events \(filter) \(order) LIMIT \(bind: max(0, search.limit))").all().map(Self.auditEvent)
        }
    }

    public func createAdminKey(_ key: AdminKey) async throws {
        try await sqlWrite { db in
            try await db.raw(
                """
                INSERT INTO admin_keys (name, key_hash, read_only, created_at, revoked_at)
                VALUES (\(bind: key.name), \(bind: key.keyHash), \(bind: key.readOnly ? 1 : 0), \(bind: key.createdAt.millis), \(bind: key.revokedAt?.millis))
                """
            ).run()
        }
    }

    public func adminKeys() async throws -> [AdminKey] {
        try await read { db in try await db.raw("SELECT * FROM admin_keys ORDER BY created_at, name").all().map(Self.adminKey) }
    }

    public func adminKey(hash: String) async throws -> AdminKey? {
        try await read { db in try await db.raw("SELECT * FROM admin_keys WHERE key_hash = \(bind: hash)").first().map(Self.adminKey) }
    }

    public func revokeAdminKey(name: String, at: Date) async throws -> Bool {
        try await sqlWrite { db in
            try await db.raw("UPDATE admin_keys SET revoked_at = \(bind: at.millis) WHERE name = \(bind: name) AND revoked_at IS NULL").run()
            return try await db.raw("SELECT name FROM admin_keys WHERE name = \(bind: name)").first() != nil
        }
    }

    static func adminKey(_ row: any SQLRow) throws -> AdminKey {
        AdminKey(
            name: try row.decode(column: "name", as: String.self), keyHash: try row.decode(column: "key_hash", as: String.self),
            readOnly: try row.decode(column: "read_only", as: Int.self) != 0, createdAt: try row.date("created_at"),
            revokedAt: try row.optionalDate("revoked_at"))
    }
}
