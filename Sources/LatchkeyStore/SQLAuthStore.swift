public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
public import Logging
import PostgresNIO
import SQLKit
import SQLiteNIO
import Synchronization

/// ``AuthStore`` on SQLite (the default) or PostgreSQL, with one schema and versioned migrations.
///
/// Writes go through a batcher that commits concurrent writes together, each durably committed
/// before its caller resumes (SQLite runs with `synchronous=FULL`).
///
/// ```swift
/// let store = try await SQLAuthStore.open(.sqlite(path: "latchkey.sqlite"))
/// try await store.migrate()
/// ```
public final class SQLAuthStore: AuthStore {
    let backend: any SQLBackend
    public let location: StoreLocation

    /// Concurrent rotations, handled a group per transaction.
    let rotations: RequestGroups<RotationRequest, RotationResult>
    /// Concurrent look-ups of refresh tokens (each refresh makes one), a group per query.
    let tokenLookups: RequestGroups<String, (RefreshTokenRecord, SessionFamily)?>
    /// Concurrent sign-ins (each claims its token, finds its account and writes, a group per transaction), and claims
    /// of identity tokens made on their own (before an Apple code is redeemed).
    let signIns: RequestGroups<SignInPlan, SignInStepResult>
    let signInClaims: RequestGroups<SignInTokenClaim, Bool>
    /// How many sign-in steps and separate claims groups have handled so far (for tests).
    var signInSteps: Int { signIns.handledRequests }
    /// The most sign-ins one step has handled so far (for tests).
    var largestSignInGroup: Int { signIns.largestGroup }
    var separateClaims: Int { signInClaims.handledRequests }

    /// Profiles read in the last half second, dropped by any write of this process. Other processes' writes
    /// (another instance or the CLI revoking sessions) show within that half second; backends verifying access
    /// tokens statelessly trust them for their whole 10-minute lifetime anyway.
    let profiles = Mutex<(generation: Int, entries: [String: (at: ContinuousClock.Instant, value: Profile?)])>((0, [:]))
    typealias Profile = (UserAccount, [LinkedIdentity])
    static let profileLifetime: Duration = .milliseconds(500)

    init(backend: any SQLBackend, location: StoreLocation, maximumWriteBatch: Int) {
        self.backend = backend
        self.location = location
        let onPostgres = backend.isPostgres
        // One group is handled while the next gathers.
        let batcher = backend.batcher
        rotations = RequestGroups(limit: maximumWriteBatch, maximumJobs: 2, runner: { try await batcher.submit($0) }) { requests, database in
            try await Self.rotate(requests, onPostgres: onPostgres, database)
        }
        tokenLookups = RequestGroups(limit: 256, maximumJobs: 2, runner: { try await backend.read($0) }) { hashes, database in
            try await Self.tokensWithSessions(hashes: hashes, database)
        }
        signInClaims = RequestGroups(limit: maximumWriteBatch, maximumJobs: 2, runner: { try await batcher.submit($0) }) { claims, database in
            try await Self.claim(claims, database)
        }
        signIns = RequestGroups(limit: min(maximumWriteBatch, 256), maximumJobs: 2, runner: { try await batcher.submit($0) }) { plans, database in
            try await Self.signIns(plans, database)
        }
    }

    /// The most writes one commit takes: a group's statements stay within both databases' limits on bound values
    /// (a sign-in's identities take 15 a row; PostgreSQL allows 65,535, SQLite 32,766).
    public static let maximumWriteBatchLimit = 2_000

    /// Opens (and for SQLite, creates) the database. Call ``migrate()`` before use and ``close()`` at the end.
    /// - Parameter maximumWriteBatch: how many concurrent writes may share one commit (1 commits each alone).
    public static func open(_ location: StoreLocation, maximumWriteBatch: Int = 512, logger: Logger = Logger(label: "latchkey.store")) async throws
        -> SQLAuthStore
    {
        let batch = min(max(1, maximumWriteBatch), maximumWriteBatchLimit)
        switch location {
        case .sqlite(let path):
            return SQLAuthStore(
                backend: try await SQLiteBackend.open(path: path, maximumBatch: batch, logger: logger), location: location, maximumWriteBatch: batch)
        case .postgres(let url):
            return SQLAuthStore(backend: try PostgresBackend(url: url, maximumBatch: batch, logger: logger), location: location, maximumWriteBatch: batch)
        }
    }

    public func close() async { await backend.shutdown() }

    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.translatingErrors { try await backend.read(body) }
    }

    func sqlWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.translatingErrors { try await backend.batcher.submit(body) }
    }

    /// A write that may take long (migrations, sweeps): no answer timeout cuts it short.
    func longWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.translatingErrors { try await backend.longTransaction(body) }
    }

    /// Runs `body`, turning a driver's error into the store's (see ``translate(_:)``).
    static func translatingErrors<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as AuthStoreError { throw error } catch { throw translate(error) }
    }

    /// Unique violations become `.duplicate`, an unreachable or exhausted database `.unavailable`; anything else
    /// (a bug in a statement, say) stays as the driver said.
    static func translate(_ error: any Error) -> any Error {
        switch error {
        case let error as PSQLError:
            guard error.code == .server, let state = error.serverInfo?[.sqlState] else {
                // Connecting, TLS, a closed connection or pool, a cancelled query: nothing reached a working server.
                return AuthStoreError.unavailable("PostgreSQL: \(error.code)")
            }
            if state == "23505" { return AuthStoreError.duplicate }
            // A row another request deleted meanwhile (a sign-in racing its account's deletion): the retry sees it gone.
            if state == "23503" { return AuthStoreError.notFound }
            // 08 connection exception, 53 insufficient resources, 58 system error (I/O), 57P operator intervention
            // (shutdown), 40 rollbacks (a deadlock, a serialization failure), 57014 a statement timeout, 55P03 a lock
            // timeout (set on the role), 25006 a read-only transaction (a connection to a former primary after a failover).
            if ["08", "53", "58", "40"].contains(String(state.prefix(2))) || state.hasPrefix("57P") || ["57014", "55P03", "25006"].contains(state) {
                return AuthStoreError.unavailable("PostgreSQL SQLSTATE \(state)")
            }
            return error
        case let error as SQLiteError:
            switch error.reason {
            case .constraintUniqueFailed, .constraintPrimaryKeyFailed:
                return AuthStoreError.duplicate
            case .constraintForeignKeyFailed:
                return AuthStoreError.notFound
            case .busy, .busyTimeout, .busyInRecovery, .busyInSnapshot, .locked, .lockedBySharedCache, .full, .noMemory, .ioError,
                .ioErrorFailedRead, .ioErrorIncompleteRead, .ioErrorFailedWrite, .ioErrorFailedSync, .ioErrorFailedDirSync,
                .ioErrorFailedTruncate, .ioErrorFailedStat, .ioErrorFailedUnlock, .ioErrorFailedReadLock, .ioErrorFailedDelete,
                .ioErrorNoMemory, .ioErrorFailedAccess, .ioErrorFailedLockCheck, .ioErrorFailedAdvisoryLock, .ioErrorFailedClose,
                .ioErrorFailedSharedMemOpen, .ioErrorFailedSharedMemSize, .ioErrorFailedSharedMemMap, .ioErrorFailedMemoryMap,
                .ioErrorCantFindTempdir, .cantOpen, .cantOpenDirectory, .cantOpenInvalidPath, .readOnly, .readonlyCantLock,
                .readonlyDirectory, .readonlyBackingMoved, .readonlyInRecovery, .readonlyInRollback, .proto, .permission:
                return AuthStoreError.unavailable("SQLite: \(error.reason)")
            default:
                return error
            }
        default:
            // PostgresNIO passes its pool's own error through when the pool has failed to connect for a minute and
            // fails waiting requests at once; its type lives in an underscored module, so it is matched by name.
            if String(describing: type(of: error)) == "ConnectionPoolError" {
                return AuthStoreError.unavailable("PostgreSQL: no connection could be made (\(error))")
            }
            return error
        }
    }

    // MARK: Schema

    public func migrate() async throws {
        let postgres = backend.isPostgres
        try await longWrite { db in
            if postgres { try await db.raw("SELECT pg_advisory_xact_lock(7421001)").run() }
            try await db.raw("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)").run()
            let applied = Set(try await db.raw("SELECT version FROM schema_migrations").all().map { try $0.decode(column: "version", as: Int.self) })
            for migration in Migrations.all where !applied.contains(migration.version) {
                try await Migrations.rewrites[migration.version]?(db)
                for statement in migration.statements { try await db.raw("\(unsafeRaw: statement)").run() }
                try await db.raw("INSERT INTO schema_migrations (version, applied_at) VALUES (\(bind: migration.version), \(bind: Date().millis))").run()
            }
        }
        try await backend.schemaChanged()
    }

    /// The schema versions applied so far.
    public func appliedMigrations() async throws -> [Int] {
        try await read { db in
            try await db.raw("SELECT version FROM schema_migrations ORDER BY version").all().map { try $0.decode(column: "version", as: Int.self) }
        }
    }

    /// Also fails on a PostgreSQL that takes no writes (a former primary after a failover, a replica): a server
    /// behind it could only answer 503s.
    public func ping() async throws {
        guard backend.isPostgres else {
            _ = try await read { db in try await db.raw("SELECT 1 AS one").first() != nil }
            return
        }
        let readOnly = try await read { db in
            try await db.raw("SELECT current_setting('transaction_read_only') AS read_only").first()?.decode(column: "read_only", as: String.self)
        }
        if readOnly == "on" {
            throw AuthStoreError.unavailable("PostgreSQL takes no writes (transaction_read_only is on: a replica, or a primary that failed over)")
        }
    }

    public func sweep(now: Date, unlessSweptWithin interval: TimeInterval) async throws -> Int? {
        let dayAgo = now.addingTimeInterval(-86_400).millis
        let monthAgo = now.addingTimeInterval(-30 * 86_400).millis
        return try await longWrite { db -> Int? in
            if interval > 0 {
                // Claimed in the sweep's transaction: another instance's claim waits for it, then finds it recorded.
                let claimed = try await db.raw(
                    """
                    INSERT INTO maintenance_runs (name, last_run_at) VALUES ('sweep', \(bind: now.millis))
                    ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at
                    WHERE maintenance_runs.last_run_at <= \(bind: now.addingTimeInterval(-interval).millis)
                      OR maintenance_runs.last_run_at >= \(bind: now.addingTimeInterval(interval).millis)
                    RETURNING last_run_at
                    """
                ).first()
                if claimed == nil { return nil }
            }
            let expired =
                try await db.raw(
                    """
                    SELECT COUNT(*) AS n FROM refresh_tokens WHERE idle_expires_at <= \(bind: now.millis) AND (rotated_at IS NULL OR rotated_at <= \(bind: dayAgo))
                    """
                ).first()?.decode(column: "n", as: Int.self) ?? 0
            try await db.raw(
                """
                DELETE FROM refresh_tokens WHERE idle_expires_at <= \(bind: now.millis) AND (rotated_at IS NULL OR rotated_at <= \(bind: dayAgo))
                """
            ).run()
            let deadSessions = "SELECT id FROM sessions WHERE revoked_at <= \(monthAgo) OR absolute_expires_at <= \(monthAgo)"
            let dead = try await db.raw("SELECT COUNT(*) AS n FROM (\(unsafeRaw: deadSessions)) dead").first()?.decode(column: "n", as: Int.self) ?? 0
            // The tokens of dead sessions go with them, expired or not, and count as rows that went.
            let deadTokens =
                dead == 0
                ? 0
                : try await db.raw("SELECT COUNT(*) AS n FROM refresh_tokens WHERE session_id IN (\(unsafeRaw: deadSessions))").first()?
                    .decode(column: "n", as: Int.self) ?? 0
            try await db.raw("DELETE FROM refresh_tokens WHERE session_id IN (\(unsafeRaw: deadSessions))").run()
            try await db.raw("DELETE FROM sessions WHERE id IN (\(unsafeRaw: deadSessions))").run()
            let usedSignIns =
                try await db.raw("SELECT COUNT(*) AS n FROM used_sign_in_tokens WHERE expires_at <= \(bind: now.millis)").first()?
                .decode(column: "n", as: Int.self) ?? 0
            try await db.raw("DELETE FROM used_sign_in_tokens WHERE expires_at <= \(bind: now.millis)").run()
            // Counters of windows long past (no window is longer than a day).
            try await db.raw("DELETE FROM rate_counters WHERE window_start < \(bind: dayAgo)").run()
            try await db.raw("DELETE FROM email_codes WHERE expires_at <= \(bind: now.millis)").run()
            let oneTime =
                try await db.raw("SELECT COUNT(*) AS n FROM one_time_records WHERE expires_at <= \(bind: dayAgo)").first()?
                .decode(column: "n", as: Int.self) ?? 0
            try await db.raw("DELETE FROM one_time_records WHERE expires_at <= \(bind: dayAgo)").run()
            // Finished revocations need no token any more.
            try await db.raw("UPDATE outbox SET sealed_payload = '' WHERE completed_at IS NOT NULL AND sealed_payload <> ''").run()
            let delivered = now.addingTimeInterval(-WebhookDelivery.deliveredRetention).millis
            let failed = now.addingTimeInterval(-WebhookDelivery.failedRetention).millis
            try await db.raw(
                """
                DELETE FROM webhook_deliveries WHERE (status = 'delivered' AND finished_at <= \(bind: delivered))
                  OR (status = 'failed' AND finished_at <= \(bind: failed))
                """
            ).run()
            return expired + dead + deadTokens + usedSignIns + oneTime
        }
    }
}

extension JSONEncoder {
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }
}

extension Optional where Wrapped == Bool {
    var flag: Int? { map { $0 ? 1 : 0 } }
}

extension SQLRow {
    func date(_ column: String) throws -> Date { Date(millis: try decode(column: column, as: Int64.self)) }
    func optionalDate(_ column: String) throws -> Date? { try decode(column: column, as: Int64?.self).map(Date.init(millis:)) }
    func flag(_ column: String) throws -> Bool? { try decode(column: column, as: Int?.self).map { $0 != 0 } }
}
