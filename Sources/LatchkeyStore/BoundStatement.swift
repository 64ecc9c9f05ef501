import PostgresKit
import PostgresNIO
import SQLKit
import SQLiteKit
import SQLiteNIO
import Synchronization

/// A value bound to a statement's parameter: all that the stored records hold is text and integers, either of which
/// can be NULL. (PostgreSQL needs a NULL's type where the statement does not give it, as in a `VALUES` list.)
enum BoundValue: Sendable, Equatable {
    case text(String?)
    case integer(Int64?)
}

/// What a ``BoundStatement`` can bind.
protocol StatementValue: Sendable {
    var bound: BoundValue { get }
    /// NULL of this value's type.
    static var null: BoundValue { get }
}

extension String: StatementValue {
    var bound: BoundValue { .text(self) }
    static var null: BoundValue { .text(nil) }
}

extension Int64: StatementValue {
    var bound: BoundValue { .integer(self) }
    static var null: BoundValue { .integer(nil) }
}

extension Int: StatementValue {
    var bound: BoundValue { .integer(Int64(self)) }
    static var null: BoundValue { .integer(nil) }
}

extension Optional: StatementValue where Wrapped: StatementValue {
    var bound: BoundValue { self?.bound ?? Wrapped.null }
    static var null: BoundValue { Wrapped.null }
}

/// A statement as its text, with `?` for each parameter, and the values bound to them, for the statements that run
/// on every sign-in and rotation. SQLKit serializes a multi-row statement through an expression object per value and
/// converts each value through `Encoder`, which took more time than SQLite took to run the statement; the SQLite and
/// PostgreSQL drivers get this one's text and values as they are. Any other database gets it through SQLKit.
struct BoundStatement: SQLExpression, ExpressibleByStringInterpolation {
    private(set) var text: String
    private(set) var values: [BoundValue]

    struct StringInterpolation: StringInterpolationProtocol {
        fileprivate var text = ""
        fileprivate var values: [BoundValue] = []

        init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + 4 * interpolationCount)
        }

        mutating func appendLiteral(_ literal: String) {
            // A `?` of the text is always a parameter (see `serialize(to:)`).
            assert(!literal.contains("?"), "statement text with a literal ?")
            text += literal
        }

        mutating func appendInterpolation(bind value: some StatementValue) {
            text += "?"
            values.append(value.bound)
        }

        /// A list of values: `?, ?, ?`.
        mutating func appendInterpolation(binds values: [some StatementValue]) {
            for (index, value) in values.enumerated() {
                text += index == 0 ? "?" : ", ?"
                self.values.append(value.bound)
            }
        }

        /// A table's column names: `a, b, c`. Only ``SQLColumns`` can be spliced into the text, and it holds string
        /// literals only, checked to be plain identifiers.
        mutating func appendInterpolation(columns: SQLColumns) {
            text += columns.list()
        }

        /// Rows of values for a `VALUES` list: `(?, ?), (?, ?)`.
        mutating func appendInterpolation(rows: [[any StatementValue]]) {
            for (index, row) in rows.enumerated() {
                text += index == 0 ? "(" : ", ("
                for (column, value) in row.enumerated() {
                    text += column == 0 ? "?" : ", ?"
                    values.append(value.bound)
                }
                text += ")"
            }
        }
    }

    init(stringInterpolation: StringInterpolation) {
        text = stringInterpolation.text
        values = stringInterpolation.values
    }

    init(stringLiteral value: String) {
        var interpolation = StringInterpolation(literalCapacity: value.utf8.count, interpolationCount: 0)
        interpolation.appendLiteral(value)
        self.init(stringInterpolation: interpolation)
    }

    /// `prefix` (text without parameters) put before `statement`.
    static func + (prefix: String, statement: BoundStatement) -> BoundStatement {
        assert(!prefix.contains("?"), "statement text with a literal ?")
        var joined = statement
        joined.text = prefix + statement.text
        return joined
    }

    /// `first` followed by `second`, their values in that order.
    static func + (first: BoundStatement, second: BoundStatement) -> BoundStatement {
        var joined = first
        joined.text += second.text
        joined.values += second.values
        return joined
    }

    /// Through SQLKit, each `?` becomes the dialect's placeholder for the next value.
    func serialize(to serializer: inout SQLSerializer) {
        var rest = Substring(text)
        for value in values {
            guard let mark = rest.firstIndex(of: "?") else { break }
            serializer.write(String(rest[..<mark]))
            switch value {
            case .text(let text): serializer.write(bind: text)
            case .integer(let integer): serializer.write(bind: integer)
            }
            rest = rest[rest.index(after: mark)...]
        }
        serializer.write(String(rest))
    }

    /// Runs the statement.
    func run(on db: any SQLDatabase) async throws {
        _ = try await all(on: db)
    }

    /// Runs the statement and returns its rows.
    func all(on db: any SQLDatabase) async throws -> [any SQLRow] {
        if let sqlite = db as? SQLiteHandle {
            return try await sqlite.connection.query(text, values.map(\.sqliteData)).map { $0.sql() }
        }
        if let postgres = db as? PostgresHandle {
            var rows: [any SQLRow] = []
            for try await row in try await postgres.connection.query(postgresQuery, logger: postgres.logger) { rows.append(row.sql()) }
            return rows
        }
        let rows = Mutex<[any SQLRow]>([])
        try await db.execute(sql: self) { row in rows.withLock { $0.append(row) } }
        return rows.withLock { $0 }
    }

    /// The statement with PostgreSQL's numbered placeholders.
    private var postgresQuery: PostgresQuery {
        var bindings = PostgresBindings(capacity: values.count)
        var sql: [UInt8] = []
        sql.reserveCapacity(text.utf8.count + values.count * 3)
        var number = 0
        for byte in text.utf8 {
            guard byte == UInt8(ascii: "?") else {
                sql.append(byte)
                continue
            }
            number += 1
            sql.append(UInt8(ascii: "$"))
            sql.append(contentsOf: String(number).utf8)
        }
        for value in values {
            switch value {
            case .text(let text): bindings.append(text)
            case .integer(let integer): bindings.append(integer)
            }
        }
        return PostgresQuery(unsafeSQL: String(decoding: sql, as: UTF8.self), binds: bindings)
    }
}

/// The column names of a table, in order, for the statements that name them all: the one place a column list is
/// written. Only an array literal of string literals makes one (`StaticString`, never a run-time value), and each
/// name must be a plain lower-case identifier, so the list can be spliced into statement text as it is.
struct SQLColumns: Sendable, Equatable, ExpressibleByArrayLiteral {
    let names: [String]

    init(arrayLiteral names: StaticString...) {
        self.names = names.map { name in
            let text = name.description
            precondition(Self.isIdentifier(text), "not a plain SQL identifier: \(text)")
            return text
        }
    }

    /// `a, b, c`; with a `table` alias, `t.a, t.b, t.c`; with an `alias` prefix too, `t.a AS t_a, …`.
    func list(table: StaticString? = nil, alias: StaticString? = nil) -> String {
        let table = table?.description
        let alias = alias?.description
        for name in [table, alias].compactMap(\.self) { precondition(Self.isIdentifier(name), "not a plain SQL identifier: \(name)") }
        return names.map { name in
            let qualified = table.map { "\($0).\(name)" } ?? name
            return alias.map { "\(qualified) AS \($0)\(name)" } ?? qualified
        }.joined(separator: ", ")
    }

    private static func isIdentifier(_ text: String) -> Bool {
        guard let first = text.utf8.first, first == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first) else { return false }
        return text.utf8.allSatisfy {
            $0 == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
        }
    }
}

extension BoundValue {
    fileprivate var sqliteData: SQLiteData {
        switch self {
        case .text(let text): text.map(SQLiteData.text) ?? .null
        case .integer(let integer): integer.map { .integer(Int($0)) } ?? .null
        }
    }
}
