import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Logging
import NIOCore
import NIOPosix
import SQLKit
import SQLiteKit
import SQLiteNIO
import Synchronization

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
        // The writer's page cache is 512 KiB, not SQLite's 2 MB: after 26,000 sign-ins the server held 4.4 MB less, with
        // the same instructions per sign-in and rotation (its misses are reads from the kernel's page cache).
        let writer = try await openConnection(
            path: path,
            pragmas: [
                "PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON", "PRAGMA busy_timeout=5000", "PRAGMA temp_store=MEMORY",
                "PRAGMA wal_autocheckpoint=\(checkpointFrames)", "PRAGMA cache_size=-512",
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
