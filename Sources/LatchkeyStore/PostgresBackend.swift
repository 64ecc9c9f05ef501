import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Logging
import NIOCore
import NIOPosix
import PostgresKit
import PostgresNIO
import SQLKit
import Synchronization

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
