import Foundation
import LatchkeyTestSupport
import SQLKit
import Testing

@testable import LatchkeyStore

/// One schema, whichever database and whatever it was migrated from.
@Suite("Store: schema snapshots")
struct SchemaSnapshotTests {
    /// What a table is made of, in terms both databases share: columns by name with their nullability and a type
    /// class, the primary key, and indexes by columns and uniqueness (named where a migration named them; the
    /// indexes behind UNIQUE constraints are named by each database its own way).
    struct Table: Equatable, CustomStringConvertible {
        var columns: [String] = []
        var primaryKey: [String] = []
        var indexes: [String] = []
        var description: String { "columns: \(columns)\n  primary key: \(primaryKey)\n  indexes: \(indexes)" }
    }

    typealias Schema = [String: Table]

    /// The types of Migrations: INTEGER and BIGINT are integers (SQLite makes no difference), TEXT is text.
    static func typeClass(_ declared: String) -> String {
        let type = declared.lowercased()
        if type.contains("int") { return "integer" }
        if type.contains("text") || type.contains("char") { return "text" }
        return type
    }

    static func column(_ name: String, nullable: Bool, type: String) -> String {
        "\(name) \(typeClass(type))\(nullable ? "" : " not null")"
    }

    static func index(_ name: String?, columns: [String], unique: Bool) -> String {
        "\(name ?? "(constraint)") (\(columns.joined(separator: ", ")))\(unique ? " unique" : "")"
    }

    static func sqliteSchema(_ store: SQLAuthStore) async throws -> Schema {
        try await store.read { db in
            var schema: Schema = [:]
            let names = try await db.raw("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all().map {
                try $0.decode(column: "name", as: String.self)
            }
            for name in names {
                var table = Table()
                var key: [(Int, String)] = []
                for row in try await db.raw("SELECT * FROM pragma_table_info(\(bind: name))").all() {
                    let column = try row.decode(column: "name", as: String.self)
                    let position = try row.decode(column: "pk", as: Int.self)
                    // SQLite lets a TEXT primary key hold NULL, which PostgreSQL does not; no code writes one.
                    let nullable = try row.decode(column: "notnull", as: Int.self) == 0 && position == 0
                    table.columns.append(Self.column(column, nullable: nullable, type: try row.decode(column: "type", as: String.self)))
                    if position > 0 { key.append((position, column)) }
                }
                table.primaryKey = key.sorted { $0.0 < $1.0 }.map(\.1)
                for row in try await db.raw("SELECT * FROM pragma_index_list(\(bind: name))").all() {
                    let index = try row.decode(column: "name", as: String.self)
                    let origin = try row.decode(column: "origin", as: String.self)
                    if origin == "pk" { continue }
                    let columns = try await db.raw("SELECT name FROM pragma_index_info(\(bind: index)) ORDER BY seqno").all().map {
                        try $0.decode(column: "name", as: String.self)
                    }
                    let unique = try row.decode(column: "unique", as: Int.self) != 0
                    table.indexes.append(Self.index(origin == "c" ? index : nil, columns: columns, unique: unique))
                }
                table.columns.sort()
                table.indexes.sort()
                schema[name] = table
            }
            return schema
        }
    }

    static func postgresSchema(_ store: SQLAuthStore) async throws -> Schema {
        try await store.read { db in
            var schema: Schema = [:]
            let columns = try await db.raw(
                """
                SELECT table_name::text AS t, column_name::text AS c, is_nullable::text AS n, data_type::text AS type FROM information_schema.columns
                WHERE table_schema = current_schema() ORDER BY table_name, column_name
                """
            ).all()
            for row in columns {
                let nullable = try row.decode(column: "n", as: String.self) == "YES"
                schema[try row.decode(column: "t", as: String.self), default: Table()].columns.append(
                    Self.column(try row.decode(column: "c", as: String.self), nullable: nullable, type: try row.decode(column: "type", as: String.self)))
            }
            let indexes = try await db.raw(
                """
                SELECT t.relname::text AS t, i.relname::text AS name, CASE WHEN x.indisunique THEN 1 ELSE 0 END AS uniq,
                  CASE WHEN x.indisprimary THEN 1 ELSE 0 END AS pk,
                  CASE WHEN EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) THEN 1 ELSE 0 END AS constrained,
                  array_to_string(ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(attnum, ord)
                    JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum ORDER BY k.ord), ',') AS columns
                FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
                  JOIN pg_namespace n ON n.oid = t.relnamespace
                WHERE n.nspname = current_schema()
                """
            ).all()
            for row in indexes {
                let table = try row.decode(column: "t", as: String.self)
                let columns = try row.decode(column: "columns", as: String.self).split(separator: ",").map(String.init)
                if try row.decode(column: "pk", as: Int.self) != 0 {
                    schema[table, default: Table()].primaryKey = columns
                    continue
                }
                let name = try row.decode(column: "constrained", as: Int.self) != 0 ? nil : try row.decode(column: "name", as: String.self)
                schema[table, default: Table()].indexes.append(Self.index(name, columns: columns, unique: try row.decode(column: "uniq", as: Int.self) != 0))
            }
            for name in schema.keys {
                schema[name]?.columns.sort()
                schema[name]?.indexes.sort()
            }
            return schema
        }
    }

    static func withSQLite<T>(copying fixture: String? = nil, _ body: (SQLAuthStore) async throws -> T) async throws -> T {
        let directory = NSTemporaryDirectory() + "latchkey-schema-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/latchkey.sqlite"
        if let fixture { try FileManager.default.copyItem(atPath: Fixtures.path(fixture), toPath: path) }
        let store = try await SQLAuthStore.open(.sqlite(path: path))
        do {
            try await store.migrate()
            let value = try await body(store)
            await store.close()
            return value
        } catch {
            await store.close()
            throw error
        }
    }

    static func expectSame(_ one: Schema, _ other: Schema, _ what: String) {
        #expect(one.keys.sorted() == other.keys.sorted(), "\(what): tables")
        for name in Set(one.keys).union(other.keys).sorted() {
            #expect(one[name] == other[name], "\(what): table \(name)")
        }
    }

    @Test("the schema has every table of the migrations, with keys and indexes")
    func sqliteFromEmpty() async throws {
        let schema = try await Self.withSQLite { try await Self.sqliteSchema($0) }
        // The snapshot reads what it should: a table, a column, a key and an index named by a migration.
        #expect(schema["sessions"]?.columns.contains("revoked_at integer") == true)
        #expect(schema["sessions"]?.columns.contains("user_id text not null") == true)
        #expect(schema["used_sign_in_tokens"]?.primaryKey == ["expires_at", "provider", "token_hash"])
        #expect(schema["sessions"]?.indexes == ["sessions_user (user_id)"])
        #expect(schema["invites"]?.indexes == ["(constraint) (id) unique"])
        #expect(schema.keys.sorted().contains("maintenance_runs"))
    }

    @Test("a SQLite database migrated from the first released schema (version 2) equals one migrated from empty")
    func sqliteFromVersion2() async throws {
        let fresh = try await Self.withSQLite { try await Self.sqliteSchema($0) }
        let upgraded = try await Self.withSQLite(copying: "store-v2.sqlite") { try await Self.sqliteSchema($0) }
        Self.expectSame(fresh, upgraded, "from version 2")
    }

    @Test(
        "SQLite and PostgreSQL migrated from empty have the same tables, columns, keys and indexes",
        .enabled(if: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] != nil))
    func sqliteMatchesPostgres() async throws {
        let sqlite = try await Self.withSQLite { try await Self.sqliteSchema($0) }
        let store = try await SQLAuthStore.open(.postgres(url: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"]!))
        let postgres: Schema
        do {
            try await store.migrate()
            postgres = try await Self.postgresSchema(store)
        } catch {
            await store.close()
            throw error
        }
        await store.close()
        Self.expectSame(sqlite, postgres, "SQLite against PostgreSQL")
    }
}
