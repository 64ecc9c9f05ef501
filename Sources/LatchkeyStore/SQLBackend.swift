import Foundation
import LatchkeyCore
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

/// SQLite in WAL mode with `synchronous=FULL`: one connection writes (through the batcher), a few read.
final class SQLiteBackend: SQLBackend {
    let isPostgres = false
    let batcher: WriteBatcher
    private let writer: SQLiteConnection
    /// Several readers, so reads run in parallel beside the writer (WAL lets them).
    private let readers: ReaderPool
    private let path: String
    private let logger: Logger

    static func open(path: String, maximumBatch: Int, logger: Logger) async throws -> SQLiteBackend {
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        // Statement journals (savepoints, multi-row statements) in memory: as temporary files each transaction opened and wrote one.
        // A checkpoint every 4,000 WAL frames (16 MB), not SQLite's 1,000: a checkpoint copies each page once however
        // often the WAL holds it, and the last pages of the indexes are in every commit. It cut the storage written
        // per sign-in by 13 %. Up to about 4,060 frames, the WAL's index is one hash table, so reads look up no more.
        let writer = try await openConnection(
            path: path,
            pragmas: [
                "PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON", "PRAGMA busy_timeout=5000", "PRAGMA temp_store=MEMORY",
                "PRAGMA wal_autocheckpoint=\(checkpointFrames)",
            ],
            logger: logger)
        do {
            let readers = try await openReaders(path: path, logger: logger)
            return SQLiteBackend(writer: writer, readers: readers, maximumBatch: maximumBatch, path: path, logger: logger)
        } catch {
            try? await writer.close()
            throw error
        }
    }

    /// Readers look up single rows by key: a small page cache each (the OS caches the file for all of them).
    private static func openReaders(path: String, logger: Logger) async throws -> [SQLiteConnection] {
        var readers: [SQLiteConnection] = []
        do {
            for _ in 0..<readerCount {
                readers.append(
                    try await openConnection(
                        path: path, pragmas: ["PRAGMA foreign_keys=ON", "PRAGMA busy_timeout=5000", "PRAGMA query_only=ON", "PRAGMA cache_size=-512"],
                        logger: logger))
            }
            return readers
        } catch {
            for reader in readers { try? await reader.close() }
            throw error
        }
    }

    /// A connection to `path` with `pragmas` set; closed again when one fails (out of file descriptors, say), as
    /// every connection must be.
    private static func openConnection(path: String, pragmas: [String], logger: Logger) async throws -> SQLiteConnection {
        let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        do {
            for pragma in pragmas { _ = try await connection.query(pragma) }
            return connection
        } catch {
            try? await connection.close()
            throw error
        }
    }

    static let readerCount = 3
    /// WAL frames between checkpoints (see `open`).
    static let checkpointFrames = 4000

    private init(writer: SQLiteConnection, readers: [SQLiteConnection], maximumBatch: Int, path: String, logger: Logger) {
        self.writer = writer
        self.readers = ReaderPool(readers)
        self.path = path
        self.logger = logger
        let database = SQLiteHandle(writer)
        let closed = closed
        batcher = WriteBatcher(beginStatement: "BEGIN IMMEDIATE", maximumBatch: maximumBatch) { body in
            guard !closed.isSet else { throw Self.closedError }
            try await body(database)
        }
    }

    /// What a request meets while the server shuts down and after.
    private static let closedError = AuthStoreError.unavailable("SQLite: the store is closed (the server is shutting down)")

    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        // The pool is closed with the backend.
        guard let reader = await readers.take() else { throw Self.closedError }
        defer { readers.give(back: reader) }
        return try await body(SQLiteHandle(reader))
    }

    /// SQLite names a statement's columns from the connection's cached schema before it first steps, so a reader
    /// that loaded the schema before a migration would read `SELECT *` rows without the new columns. Fresh
    /// readers load the new schema. (Migrations run at start-up, before any request is served.)
    func schemaChanged() async throws {
        let fresh = try await Self.openReaders(path: path, logger: logger)
        for reader in readers.replace(with: fresh) { try? await reader.close() }
    }

    func shutdown() async {
        guard closed.set() else { return }
        for reader in readers.close() { try? await reader.close() }
        try? await writer.close()
    }

    private let closed = ClosedFlag()

    deinit {
        // A store dropped without close() (an error path) must not trap: close in the background.
        if !closed.isSet {
            for reader in readers.close() { _ = reader.close() }
            _ = writer.close()
        }
    }
}

/// SQLite reader connections, each lent to one read at a time. A statement that starts on a connection where
/// another statement is still running joins that statement's read transaction, and so its older snapshot: it
/// would miss rows committed in between, such as the successor of a refresh token that was just rotated.
private final class ReaderPool: Sendable {
    private struct State {
        /// The connections reads use now; others were replaced and are closed when given back.
        var current: [SQLiteConnection]
        var idle: [SQLiteConnection]
        var waiting: [CheckedContinuation<SQLiteConnection?, Never>] = []
        var closed = false

        /// An idle reader, or `.some(nil)` once closed; nil while all are lent out.
        mutating func lend() -> SQLiteConnection?? {
            if closed { return .some(nil) }
            if let reader = idle.popLast() { return .some(reader) }
            return nil
        }
    }
    private let state: Mutex<State>

    init(_ readers: [SQLiteConnection]) {
        state = Mutex(State(current: readers, idle: readers))
    }

    /// A reader for the caller alone, waiting for one if all are lent out; nil once the pool is closed.
    func take() async -> SQLiteConnection? {
        if let ready = state.withLock({ $0.lend() }) { return ready }
        return await withCheckedContinuation { continuation in
            let ready = state.withLock { state in
                let ready = state.lend()
                if ready == nil { state.waiting.append(continuation) }
                return ready
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    func give(back reader: SQLiteConnection) {
        enum Next { case close, handOver(CheckedContinuation<SQLiteConnection?, Never>), keep }
        let next: Next = state.withLock { state in
            guard !state.closed, state.current.contains(where: { $0 === reader }) else { return .close }
            if !state.waiting.isEmpty { return .handOver(state.waiting.removeFirst()) }
            state.idle.append(reader)
            return .keep
        }
        switch next {
        case .close: _ = reader.close()
        case .handOver(let waiter): waiter.resume(returning: reader)
        case .keep: break
        }
    }

    /// Puts fresh readers in place of the current ones; returns the idle old ones to close (the lent ones are
    /// closed when given back).
    func replace(with fresh: [SQLiteConnection]) -> [SQLiteConnection] {
        let (old, handed) = state.withLock { state in
            let old = state.idle
            state.current = fresh
            state.idle = fresh
            var handed: [(CheckedContinuation<SQLiteConnection?, Never>, SQLiteConnection)] = []
            while !state.waiting.isEmpty, let reader = state.idle.popLast() {
                handed.append((state.waiting.removeFirst(), reader))
            }
            return (old, handed)
        }
        for (waiter, reader) in handed { waiter.resume(returning: reader) }
        return old
    }

    /// Closes the pool: waiting reads get nil, and the idle readers are returned to close.
    func close() -> [SQLiteConnection] {
        let (idle, waiting) = state.withLock { state in
            state.closed = true
            defer {
                state.idle = []
                state.waiting = []
            }
            return (state.idle, state.waiting)
        }
        for waiter in waiting { waiter.resume(returning: nil) }
        return idle
    }
}

/// Set once, when a backend closes.
final class ClosedFlag: Sendable {
    private let value = Atomic(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    /// Sets the flag; true for the caller that set it first.
    @discardableResult func set() -> Bool { value.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged }
}

/// A result delivered to whoever waits for it, exactly once, whichever comes first.
private final class ResumeOnce<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var result: Result<T, any Error>?
        var done = false
    }
    private let state = Mutex(State())

    func wait(_ continuation: CheckedContinuation<T, any Error>) {
        let ready: Result<T, any Error>? = state.withLock { state in
            if let result = state.result {
                state.result = nil
                return result
            }
            state.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(with: ready) }
    }

    func resume(_ result: Result<T, any Error>) {
        let waiting: CheckedContinuation<T, any Error>? = state.withLock { state in
            guard !state.done else { return nil }
            state.done = true
            guard let continuation = state.continuation else {
                state.result = result
                return nil
            }
            state.continuation = nil
            return continuation
        }
        waiting?.resume(with: result)
    }
}

/// Whether a request for a pooled connection got one in time (started) or was given up (abandoned); only one happens.
private final class LeaseState: Sendable {
    private static let waiting = 0, started = 1, abandoned = 2
    private let state = Atomic(LeaseState.waiting)

    func start() -> Bool { state.compareExchange(expected: Self.waiting, desired: Self.started, ordering: .acquiringAndReleasing).exchanged }
    func abandon() -> Bool { state.compareExchange(expected: Self.waiting, desired: Self.abandoned, ordering: .acquiringAndReleasing).exchanged }
    var wasAbandoned: Bool { state.load(ordering: .acquiring) == Self.abandoned }
}

/// PostgreSQL through a PostgresNIO client pool; the client runs as a service until shutdown.
final class PostgresBackend: SQLBackend {
    let isPostgres = true
    let batcher: WriteBatcher
    let client: PostgresClient
    private let runTask: Task<Void, Never>
    /// How long a request waits for the database in all, connection included.
    private let answerTimeout: Duration

    init(url: String, maximumBatch: Int, answerTimeout: Duration = PostgresBackend.answerTimeout, logger: Logger) throws(LatchkeyError) {
        guard let components = URLComponents(string: url), let host = components.host, let user = components.user else {
            throw LatchkeyError(.invalidConfiguration, "database URL must look like postgres://user:password@host:5432/database")
        }
        let database = components.path.isEmpty ? nil : String(components.path.dropFirst())
        let query = components.queryItems ?? []
        let tls = try PostgresTLSMode(
            sslMode: query.first { $0.name == "sslmode" }?.value, rootCertificateFile: query.first { $0.name == "sslrootcert" }?.value)
        var configuration = PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password, database: database, tls: tls.configuration)
        configuration.options.maximumConnections = 16
        configuration.options.connectTimeout = Self.leaseTimeout
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.answerTimeout = answerTimeout
        runTask = Task { await client.run() }
        // A write batch holds every write queued behind it: one on a connection that died without saying so is given
        // up sooner than a read.
        let writeTimeout = min(answerTimeout, Self.writeAnswerTimeout)
        batcher = WriteBatcher(beginStatement: "BEGIN", maximumBatch: maximumBatch, parallelBatches: maximumBatch == 1 ? 1 : 4) { body in
            try await Self.withConnection(client, answerTimeout: writeTimeout, body)
        }
    }

    /// How long a request waits for a connection before the database counts as unavailable.
    static let leaseTimeout: Duration = .seconds(5)
    /// How long a request waits for the database in all, connection included (unless the backend is made with another).
    static let answerTimeout: Duration = .seconds(30)
    /// The same for a write batch (a few milliseconds when all is well).
    static let writeAnswerTimeout: Duration = .seconds(10)

    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.withConnection(client, answerTimeout: answerTimeout, body)
    }

    func longTransaction<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.withConnection(client, answerTimeout: nil) { db in
            try await db.raw("BEGIN").run()
            return try await WriteBatcher.committing(db) { try await body(db) }
        }
    }

    /// Runs `body` on a pooled connection. The pool queues requests for as long as the server is unreachable,
    /// so waiting for the connection is bounded by ``leaseTimeout``, and once the wait was given up `body` never
    /// starts. The caller waits `answerTimeout` in all (nil: as long as `body` runs): a `body` still running then is
    /// cancelled.
    private static func withConnection<T: Sendable>(
        _ client: PostgresClient, answerTimeout: Duration?, _ body: @escaping @Sendable (any SQLDatabase) async throws -> T
    ) async throws -> T {
        let lease = LeaseState()
        let outcome = ResumeOnce<T>()
        let work = Task {
            do {
                outcome.resume(
                    .success(
                        try await client.withConnection { connection in
                            guard lease.start() else { throw CancellationError() }
                            return try await body(PostgresHandle(connection))
                        }))
            } catch {
                outcome.resume(.failure(error))
            }
        }
        let timer = Task {
            try await Task.sleep(for: leaseTimeout)
            guard lease.abandon() else {
                // Started: a connection that died without failing its query (seen after a server restart) must not
                // hold the caller, or a write batch and every write queued behind it, for ever.
                guard let answerTimeout else { return }
                try await Task.sleep(for: answerTimeout - leaseTimeout)
                work.cancel()
                outcome.resume(.failure(AuthStoreError.unavailable("PostgreSQL: no answer within \(answerTimeout)")))
                return
            }
            // Not waiting for the pool to notice the cancellation: the caller hears at once.
            work.cancel()
            outcome.resume(
                .failure(
                    AuthStoreError.unavailable("PostgreSQL: no connection within \(leaseTimeout) (the server cannot be reached, or every connection is busy)")))
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { outcome.wait($0) }
        } onCancel: {
            work.cancel()
        }
    }

    func shutdown() async {
        runTask.cancel()
        await runTask.value
    }
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

/// How a PostgreSQL URL's `sslmode` and `sslrootcert` connect, with libpq's meanings: `disable` (also when there is no
/// `sslmode`), `allow` and `prefer` (TLS when the server offers it, unverified), `require` (TLS, unverified unless
/// `sslrootcert` names the CA to trust, as in libpq), `verify-ca` (the certificate chains to a trusted CA) and
/// `verify-full` (and names the host). Without `sslrootcert` the system's CAs are trusted.
struct PostgresTLSMode: Equatable {
    enum Use: Equatable { case never, whenOffered, always }

    let use: Use
    let verification: CertificateVerification
    let rootCertificateFile: String?

    init(sslMode: String?, rootCertificateFile: String?) throws(LatchkeyError) {
        if let rootCertificateFile, !FileManager.default.isReadableFile(atPath: rootCertificateFile) {
            throw LatchkeyError(.invalidConfiguration, "database URL: sslrootcert \(rootCertificateFile.prefix(200)) is not a readable file")
        }
        self.rootCertificateFile = rootCertificateFile
        switch sslMode ?? "disable" {
        case "disable": (use, verification) = (.never, .none)
        case "allow", "prefer": (use, verification) = (.whenOffered, .none)
        case "require": (use, verification) = (.always, rootCertificateFile == nil ? .none : .noHostnameVerification)
        case "verify-ca": (use, verification) = (.always, .noHostnameVerification)
        case "verify-full": (use, verification) = (.always, .fullVerification)
        case let other:
            throw LatchkeyError(
                .invalidConfiguration, "database URL: sslmode \(other.prefix(40)) is not one of disable, allow, prefer, require, verify-ca, verify-full")
        }
    }

    var configuration: PostgresClient.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = verification
        if let rootCertificateFile { tls.trustRoots = .file(rootCertificateFile) }
        switch use {
        case .never: return .disable
        case .whenOffered: return .prefer(tls)
        case .always: return .require(tls)
        }
    }
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
