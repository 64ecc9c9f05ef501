import SQLKit
import SQLiteKit
import SQLiteNIO
import Testing

@testable import LatchkeyStore

/// The hot statements' own text-and-values form: what SQLite's driver gets directly must be what SQLKit would have
/// sent, NULLs and all.
@Suite("Bound statements")
struct BoundStatementTests {
    @Test("rows and lists become ? placeholders with their values in order, NULLs typed by their column's kind")
    func layout() {
        let statement: BoundStatement = "INSERT INTO t (a, b) VALUES \(rows: [["x", 1], [String?.none, Int64?.none]]) RETURNING a"
        #expect(statement.text == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?) RETURNING a")
        #expect(statement.values == [.text("x"), .integer(1), .text(nil), .integer(nil)])

        let list: BoundStatement = "SELECT * FROM t WHERE a IN (\(binds: ["p", "q"])) AND b = \(bind: 7)"
        #expect(list.text == "SELECT * FROM t WHERE a IN (?, ?) AND b = ?")
        #expect(list.values == [.text("p"), .text("q"), .integer(7)])
        #expect(("EXPLAIN " + list).text == "EXPLAIN SELECT * FROM t WHERE a IN (?, ?) AND b = ?")
    }

    @Test("a column list is spliced as its names, bare, qualified or aliased")
    func columns() {
        let columns: SQLColumns = ["a", "b_2"]
        let statement: BoundStatement = "INSERT INTO t (\(columns: columns)) VALUES \(rows: [["x", 1]])"
        #expect(statement.text == "INSERT INTO t (a, b_2) VALUES (?, ?)")
        #expect(columns.list(table: "t") == "t.a, t.b_2")
        #expect(columns.list(table: "t", alias: "t_") == "t.a AS t_a, t.b_2 AS t_b_2")
    }

    @Test("SQLite's driver directly and SQLKit store the same rows; a value holding ? stays a value")
    func directAndThroughSQLKit() async throws {
        let connection = try await SQLiteConnection.open(storage: .memory)
        do {
            let direct = SQLiteHandle(connection)
            let plain = connection.sql()
            try await ("CREATE TABLE t (a TEXT UNIQUE, b INTEGER)" as BoundStatement).run(on: direct)
            let rows: [[any StatementValue]] = [["what?", 1], [String?.none, Int64?.none], ["c", Int?.some(3)]]
            try await ("INSERT INTO t (a, b) VALUES \(rows: rows)" as BoundStatement).run(on: direct)
            let again: BoundStatement = "INSERT INTO t (a, b) VALUES \(rows: [["via sqlkit ?", 2]])"
            try await again.run(on: plain)

            let select: BoundStatement = "SELECT a, b FROM t WHERE b IS NULL OR b >= \(bind: 1) ORDER BY b"
            for database in [direct, plain] as [any SQLDatabase] {
                let found = try await select.all(on: database).map { try ($0.decode(column: "a", as: String?.self), $0.decode(column: "b", as: Int?.self)) }
                #expect(found.map(\.0) == [nil, "what?", "via sqlkit ?", "c"])
                #expect(found.map(\.1) == [nil, 1, 2, 3])
            }

            // A constraint violation fails on either path.
            let duplicate: BoundStatement = "INSERT INTO t (a, b) VALUES (\(bind: "c"), \(bind: 4))"
            for database in [direct, plain] as [any SQLDatabase] {
                await #expect(throws: (any Error).self) { try await duplicate.run(on: database) }
            }
        } catch {
            try await connection.close()
            throw error
        }
        try await connection.close()
    }
}
