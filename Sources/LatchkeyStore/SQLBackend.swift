import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Logging
import NIOCore
import NIOPosix
import PostgresKit
import PostgresNIO
import SQLKit
import SQLiteKit
import SQLiteNIO
import Synchronization

/// How the store reaches its database: reads directly, writes through the batcher.
protocol SQLBackend: Sendable {
    var isPostgres: Bool { get }
    var batcher: WriteBatcher { get }
    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T
    /// Runs `body` in a write transaction that no answer timeout cuts short: schema migrations and sweeps, which can
    /// take long on a large database (cut short, they would roll back and start over for ever).
    func longTransaction<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T
    /// Makes every connection see a schema another connection has just changed.
    func schemaChanged() async throws
    func shutdown() async
}

extension SQLBackend {
    func schemaChanged() async throws {}
    /// A job of the batcher, where nothing cuts a write short.
    func longTransaction<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await batcher.submit(body)
    }
}

/// Set once, when a backend closes.
final class ClosedFlag: Sendable {
    private let value = Atomic(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    /// Sets the flag; true for the caller that set it first.
    @discardableResult func set() -> Bool { value.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged }
}

/// SQLKit's view of one driver connection that also lends the connection itself: everything SQLKit asks of it goes
/// to the driver's own view, `base`.
struct ConnectionHandle<Connection: Sendable>: SQLDatabase {
    let connection: Connection
    let base: any SQLDatabase

    var logger: Logger { base.logger }
    var eventLoop: any EventLoop { base.eventLoop }
    var version: (any SQLDatabaseReportedVersion)? { base.version }
    var dialect: any SQLDialect { base.dialect }
    var queryLogLevel: Logger.Level? { base.queryLogLevel }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) -> EventLoopFuture<Void> {
        base.execute(sql: query, onRow)
    }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> Void) async throws {
        try await base.execute(sql: query, onRow)
    }

    func withSession<R>(_ closure: @escaping @Sendable (any SQLDatabase) async throws -> R) async throws -> R { try await closure(self) }
}

/// One PostgreSQL connection: the hottest reads decode their rows by position through PostgresNIO instead of by name
/// through SQLKit (a dictionary per row and a dynamic cast per column), and ``BoundStatement``s go to PostgresNIO.
typealias PostgresHandle = ConnectionHandle<PostgresConnection>

/// One SQLite connection, for ``BoundStatement``s to go to sqlite-nio.
typealias SQLiteHandle = ConnectionHandle<SQLiteConnection>

// SQLKit's statements go unlogged (`queryLogLevel: nil`): at debug level it logs every bound value, sealed secrets included.

extension ConnectionHandle where Connection == PostgresConnection {
    init(_ connection: PostgresConnection) { self.init(connection: connection, base: connection.sql(queryLogLevel: nil)) }
}

extension ConnectionHandle where Connection == SQLiteConnection {
    init(_ connection: SQLiteConnection) { self.init(connection: connection, base: connection.sql(queryLogLevel: nil)) }
}
