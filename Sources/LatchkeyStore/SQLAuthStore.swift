public import Foundation
public import LatchkeyCore
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
    private let backend: any SQLBackend
    public let location: StoreLocation

    /// Concurrent rotations, handled a group per transaction.
    private let rotations: RequestGroups<RotationRequest, RotationResult>
    /// Concurrent look-ups of refresh tokens (each refresh makes one), a group per query.
    private let tokenLookups: RequestGroups<String, (RefreshTokenRecord, SessionFamily)?>
    /// Concurrent sign-ins (each claims its token, finds its account and writes, a group per transaction), and claims
    /// of identity tokens made on their own (before an Apple code is redeemed).
    private let signIns: RequestGroups<SignInPlan, SignInStepResult>
    private let signInClaims: RequestGroups<SignInTokenClaim, Bool>
    /// How many sign-in steps and separate claims groups have handled so far (for tests).
    var signInSteps: Int { signIns.handledRequests }
    /// The most sign-ins one step has handled so far (for tests).
    var largestSignInGroup: Int { signIns.largestGroup }
    var separateClaims: Int { signInClaims.handledRequests }

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

    func write<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.translatingErrors { try await backend.batcher.submit(body) }
    }

    /// A write that may take long (migrations, sweeps): no answer timeout cuts it short.
    func longWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        try await Self.translatingErrors { try await backend.longTransaction(body) }
    }

    /// Runs `body`, turning a driver's error into the store's (see ``translate(_:)``).
    private static func translatingErrors<T>(_ body: () async throws -> T) async throws -> T {
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

    // MARK: Users and identities

    public func identity(provider: String, subject: String) async throws -> LinkedIdentity? {
        try await read { db in
            try await db.raw("SELECT * FROM identities WHERE provider = \(bind: provider) AND subject = \(bind: subject)").first().map(Self.identity)
        }
    }

    public func account(provider: String, subject: String) async throws -> StoredAccount? {
        try await read { db in try await Self.accounts([AccountKey(provider: provider, subject: subject)], db)[0] }
    }

    public func recordSignIn(_ record: SignInRecord) async throws {
        guard try await write({ db in try await Self.recordSignIns([record], db)[0] }) else { throw AuthStoreError.duplicate }
    }

    public func signIn(_ plan: SignInPlan) async throws -> SignInStepResult {
        try await Self.translatingErrors { try await signIns.submit(plan) }
    }

    /// Handles `plans` as one group in one transaction, as ``signIn(_:)`` does with plans that arrive together (for tests).
    func signInGroup(_ plans: [SignInPlan]) async throws -> [SignInStepResult] {
        try await write { db in try await Self.signIns(plans, db) }
    }

    /// SQLite's plan for `query`, one line per step (for tests).
    func queryPlan(_ query: BoundStatement) async throws -> [String] {
        let explained: BoundStatement = "EXPLAIN QUERY PLAN " + query
        return try await read { db in try await explained.all(on: db).map { try $0.decode(column: "detail", as: String.self) } }
    }

    public func createUser(_ user: UserAccount, identity: LinkedIdentity) async throws {
        try await write { db in
            try await Self.insertUsers([user]).run(on: db)
            try await Self.insertIdentities([identity]).run(on: db)
        }
    }

    public func updateIdentity(_ identity: LinkedIdentity) async throws {
        try await write { db in try await Self.updateIdentities([identity]).run(on: db) }
    }

    public func addIdentity(_ identity: LinkedIdentity) async throws {
        try await write { db in
            guard try await db.raw("SELECT id FROM users WHERE id = \(bind: identity.userID)").first() != nil else { throw AuthStoreError.notFound }
            try await Self.insertIdentities([identity]).run(on: db)
        }
    }

    public func unlinkIdentity(id: String, userID: String, reason: String, at: Date) async throws -> IdentityUnlink {
        let postgres = backend.isPostgres
        return try await write { db in
            // The count and the delete in one transaction, the user's row locked on PostgreSQL (SQLite has one writer):
            // two unlinks racing cannot both see a second identity and leave the user with none.
            if postgres { try await db.raw("SELECT id FROM users WHERE id = \(bind: userID) FOR UPDATE").run() }
            let linked = try await db.raw("SELECT id FROM identities WHERE user_id = \(bind: userID)").all().map {
                try $0.decode(column: "id", as: String.self)
            }
            guard linked.contains(id) else { return .notFound }
            guard linked.count > 1 else { return .lastIdentity }
            let grant = try await db.raw("SELECT * FROM provider_grants WHERE identity_id = \(bind: id)").first().map(Self.providerGrant)
            let revoke: BoundStatement = "UPDATE sessions SET revoked_at = \(bind: at.millis), revocation_reason = \(bind: reason) WHERE "
            try await (revoke + Self.sessionsOfIdentity(id) + " AND revoked_at IS NULL").run(on: db)
            try await db.raw("DELETE FROM provider_grants WHERE identity_id = \(bind: id)").run()
            try await db.raw("DELETE FROM identities WHERE id = \(bind: id)").run()
            return .unlinked(grant)
        }
    }

    public func deleteIdentity(id: String) async throws {
        try await write { db in
            try await db.raw("DELETE FROM provider_grants WHERE identity_id = \(bind: id)").run()
            try await db.raw("DELETE FROM identities WHERE id = \(bind: id)").run()
        }
    }

    /// The claims document column: a JSON object of strings, NULL when empty.
    static func claimsDocument(_ claims: [String: String]) -> String? {
        guard !claims.isEmpty, let bytes = try? LeanJSONEncoder().encode(claims) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    public func user(id: String) async throws -> UserAccount? {
        try await read { db in try await db.raw("SELECT * FROM users WHERE id = \(bind: id)").first().map { try Self.user($0) } }
    }

    public func identities(userID: String) async throws -> [LinkedIdentity] {
        try await read { db in try await db.raw("SELECT * FROM identities WHERE user_id = \(bind: userID) ORDER BY first_seen_at").all().map(Self.identity) }
    }

    /// Profiles read in the last half second, dropped by any write of this process. Other processes' writes
    /// (another instance or the CLI revoking sessions) show within that half second; backends verifying access
    /// tokens statelessly trust them for their whole 10-minute lifetime anyway.
    private let profiles = Mutex<(generation: Int, entries: [String: (at: ContinuousClock.Instant, value: Profile?)])>((0, [:]))
    private typealias Profile = (UserAccount, [LinkedIdentity])
    private static let profileLifetime: Duration = .milliseconds(500)

    public func profile(userID: String, sessionID: String) async throws -> (UserAccount, [LinkedIdentity])? {
        let key = userID + "|" + sessionID
        let generation = backend.batcher.generation
        let now = ContinuousClock.now
        let cached: Profile?? = profiles.withLock { cache in
            if cache.generation != generation { cache = (generation, [:]) }
            guard let entry = cache.entries[key], now - entry.at < Self.profileLifetime else { return nil }
            return .some(entry.value)
        }
        if let cached { return cached }
        let value = try await readProfile(userID: userID, sessionID: sessionID)
        profiles.withLock { cache in
            guard cache.generation == generation else { return }
            if cache.entries.count >= 10_000 { cache.entries.removeAll(keepingCapacity: true) }
            cache.entries[key] = (now, value)
        }
        return value
    }

    private func readProfile(userID: String, sessionID: String) async throws -> (UserAccount, [LinkedIdentity])? {
        try await read { db in
            let rows = try await db.raw(
                """
                SELECT u.id AS u_id, u.created_at AS u_created_at, u.email AS u_email, u.email_verified AS u_email_verified,
                  u.given_name AS u_given_name, u.family_name AS u_family_name, i.*
                FROM sessions s JOIN users u ON u.id = s.user_id LEFT JOIN identities i ON i.user_id = u.id
                WHERE s.id = \(bind: sessionID) AND s.user_id = \(bind: userID) AND s.revoked_at IS NULL
                ORDER BY i.first_seen_at
                """
            ).all()
            guard let first = rows.first else { return nil }
            let user = try Self.user(first, prefix: "u_")
            let identities = try rows.filter { try $0.decode(column: "id", as: String?.self) != nil }.map(Self.identity)
            return (user, identities)
        }
    }

    public func users(limit: Int) async throws -> [UserAccount] {
        try await read { db in try await db.raw("SELECT * FROM users ORDER BY created_at LIMIT \(bind: limit)").all().map { try Self.user($0) } }
    }

    public func deleteUser(id: String) async throws {
        try await write { db in
            // Explicit deletes, child tables first: correct whether or not foreign keys cascade.
            try await db.raw("DELETE FROM refresh_tokens WHERE session_id IN (SELECT id FROM sessions WHERE user_id = \(bind: id))").run()
            try await db.raw("DELETE FROM sessions WHERE user_id = \(bind: id)").run()
            try await db.raw("DELETE FROM provider_grants WHERE identity_id IN (SELECT id FROM identities WHERE user_id = \(bind: id))").run()
            try await db.raw("DELETE FROM identities WHERE user_id = \(bind: id)").run()
            try await db.raw("DELETE FROM users WHERE id = \(bind: id)").run()
        }
    }

    // MARK: Provider grants

    public func providerGrant(identityID: String) async throws -> ProviderGrant? {
        try await read { db in
            try await db.raw("SELECT * FROM provider_grants WHERE identity_id = \(bind: identityID)").first().map(Self.providerGrant)
        }
    }

    static func providerGrant(_ row: any SQLRow) throws -> ProviderGrant {
        ProviderGrant(
            identityID: try row.decode(column: "identity_id", as: String.self), provider: try row.decode(column: "provider", as: String.self),
            clientID: try row.decode(column: "client_id", as: String.self),
            sealedRefreshToken: try row.decode(column: "sealed_refresh_token", as: String.self),
            lastValidatedAt: try row.date("last_validated_at"), createdAt: try row.date("created_at")
        )
    }

    public func saveProviderGrant(_ grant: ProviderGrant) async throws {
        try await write { db in try await Self.upsertGrants([grant]).run(on: db) }
    }

    public func markProviderGrantValidated(identityID: String, sealedRefreshToken: String, at: Date, replacingWith newSealedRefreshToken: String?)
        async throws -> Bool
    {
        try await write { db in
            try await db.raw(
                """
                UPDATE provider_grants SET last_validated_at = \(bind: at.millis), validation_claimed_until = NULL,
                  sealed_refresh_token = \(bind: newSealedRefreshToken ?? sealedRefreshToken)
                WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken) RETURNING identity_id
                """
            ).first() != nil
        }
    }

    public func claimProviderValidation(identityID: String, sealedRefreshToken: String, dueBefore: Date, now: Date, until: Date) async throws -> Bool {
        // One conditional UPDATE: PostgreSQL re-checks the condition on a row a concurrent claim just changed, so one caller wins.
        try await write { db in
            try await db.raw(
                """
                UPDATE provider_grants SET validation_claimed_until = \(bind: until.millis)
                WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken)
                  AND last_validated_at <= \(bind: dueBefore.millis)
                  AND (validation_claimed_until IS NULL OR validation_claimed_until <= \(bind: now.millis))
                RETURNING identity_id
                """
            ).first() != nil
        }
    }

    public func postponeProviderValidation(identityID: String, until: Date) async throws {
        try await write { db in
            try await db.raw("UPDATE provider_grants SET validation_claimed_until = \(bind: until.millis) WHERE identity_id = \(bind: identityID)").run()
        }
    }

    public func deleteProviderGrant(identityID: String, sealedRefreshToken: String) async throws -> Bool {
        try await write { db in
            let current =
                try await db.raw(
                    "SELECT identity_id FROM provider_grants WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken)"
                ).first() != nil
            if current {
                try await db.raw("DELETE FROM provider_grants WHERE identity_id = \(bind: identityID) AND sealed_refresh_token = \(bind: sealedRefreshToken)")
                    .run()
            }
            return current
        }
    }

    // MARK: Sessions

    public func createSession(_ family: SessionFamily, firstToken: RefreshTokenRecord) async throws {
        try await write { db in
            try await Self.insertSessions([family]).run(on: db)
            try await Self.insertTokens([firstToken]).run(on: db)
        }
    }

    public func refreshToken(hash: String) async throws -> (RefreshTokenRecord, SessionFamily)? {
        try await Self.translatingErrors { try await tokenLookups.submit(hash) }
    }

    public func rotate(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval, accepting: (@Sendable (SessionFamily) -> Bool)?
    ) async throws -> RotationResult {
        let request = RotationRequest(presentedHash: presentedHash, successor: successor, now: now, graceWindow: graceWindow, accepting: accepting)
        return try await Self.translatingErrors { try await rotations.submit(request) }
    }

    /// The most rotations one transaction has handled so far.
    var largestRotationGroup: Int { rotations.largestGroup }
    /// The most token look-ups one query has answered so far.
    var largestLookupGroup: Int { tokenLookups.largestGroup }
    /// How many token look-ups have been answered so far.
    var tokenLookupCount: Int { tokenLookups.handledRequests }

    /// How stale `sessions.last_used_at` may be.
    static let lastUseResolution: TimeInterval = 60

    public func session(id: String) async throws -> SessionFamily? {
        try await read { db in try await db.raw("SELECT * FROM sessions WHERE id = \(bind: id)").first().map(Self.session) }
    }

    public func sessions(userID: String) async throws -> [SessionFamily] {
        try await read { db in try await db.raw("SELECT * FROM sessions WHERE user_id = \(bind: userID) ORDER BY created_at").all().map(Self.session) }
    }

    public func revokeSession(id: String, reason: String, at: Date) async throws -> Bool {
        // One statement: PostgreSQL re-checks `revoked_at` on a row a concurrent revocation just changed, so an earlier
        // reason (reuse detected, say) is never overwritten.
        try await write { db in
            try await db.raw(
                """
                UPDATE sessions SET revoked_at = \(bind: at.millis), revocation_reason = \(bind: reason)
                WHERE id = \(bind: id) AND revoked_at IS NULL RETURNING id
                """
            ).first() != nil
        }
    }

    public func revokeSessions(userID: String, reason: String, at: Date) async throws -> Int {
        try await revokeSessions(Self.sessionsOfUser(userID), reason: reason, at: at)
    }

    public func revokeSessions(identityID: String, reason: String, at: Date) async throws -> Int {
        try await revokeSessions(Self.sessionsOfIdentity(identityID), reason: reason, at: at)
    }

    public func revokeSessions(identityID: String, createdBefore: Date, reason: String, at: Date) async throws -> Int {
        try await revokeSessions(Self.sessionsOfIdentity(identityID), createdBefore: createdBefore, reason: reason, at: at)
    }

    /// The condition on `sessions` that picks a user's sessions.
    static func sessionsOfUser(_ userID: String) -> BoundStatement { "user_id = \(bind: userID)" }

    /// The condition on `sessions` that picks the sessions an identity started. They are found among its user's
    /// (through the index on `user_id`): sessions have no index of their own on `identity_id`, which every
    /// sign-in would write to for the sake of rare revocations (migration 7).
    static func sessionsOfIdentity(_ identityID: String) -> BoundStatement {
        "user_id = (SELECT user_id FROM identities WHERE id = \(bind: identityID)) AND identity_id = \(bind: identityID)"
    }

    private func revokeSessions(_ matching: BoundStatement, createdBefore: Date = .distantFuture, reason: String, at: Date) async throws -> Int {
        let before = min(createdBefore, Date(timeIntervalSince1970: 1e12)).millis
        let revoke: BoundStatement = "UPDATE sessions SET revoked_at = \(bind: at.millis), revocation_reason = \(bind: reason) WHERE "
        let open: BoundStatement = " AND revoked_at IS NULL AND created_at < \(bind: before) RETURNING id"
        return try await write { db in try await (revoke + matching + open).all(on: db).count }
    }

    // MARK: Signing keys

    public func signingKeys() async throws -> [SigningKeyRecord] {
        try await read { db in
            try await db.raw("SELECT * FROM signing_keys ORDER BY created_at").all().map { row in
                SigningKeyRecord(
                    keyID: try row.decode(column: "key_id", as: String.self), algorithm: try row.decode(column: "algorithm", as: String.self),
                    sealedPrivateKey: try row.decode(column: "sealed_private_key", as: String.self),
                    publicKeyPEM: try row.decode(column: "public_key_pem", as: String.self),
                    state: SigningKeyRecord.State(rawValue: try row.decode(column: "state", as: String.self)) ?? .retired,
                    createdAt: try row.date("created_at"), retireAfter: try row.optionalDate("retire_after")
                )
            }
        }
    }

    public func saveSigningKey(_ key: SigningKeyRecord) async throws {
        try await write { db in
            try await db.raw(
                """
                INSERT INTO signing_keys (key_id, algorithm, sealed_private_key, public_key_pem, state, created_at, retire_after)
                VALUES (\(bind: key.keyID), \(bind: key.algorithm), \(bind: key.sealedPrivateKey), \(bind: key.publicKeyPEM), \(bind: key.state.rawValue),
                  \(bind: key.createdAt.millis), \(bind: key.retireAfter?.millis))
                ON CONFLICT (key_id) DO UPDATE SET state = excluded.state, retire_after = excluded.retire_after
                """
            ).run()
        }
    }

    public func saveFirstSigningKey(_ key: SigningKeyRecord) async throws -> Bool {
        let postgres = backend.isPostgres
        return try await write { db in
            // SQLite runs one writer at a time; on PostgreSQL two transactions would each see no active key.
            if postgres { try await db.raw("SELECT pg_advisory_xact_lock(7421002)").run() }
            return try await !db.raw(
                """
                INSERT INTO signing_keys (key_id, algorithm, sealed_private_key, public_key_pem, state, created_at, retire_after)
                SELECT \(bind: key.keyID), \(bind: key.algorithm), \(bind: key.sealedPrivateKey), \(bind: key.publicKeyPEM), \(bind: key.state.rawValue),
                  \(bind: key.createdAt.millis), \(bind: key.retireAfter?.millis)
                WHERE NOT EXISTS (SELECT 1 FROM signing_keys WHERE state = 'active')
                RETURNING key_id
                """
            ).all().isEmpty
        }
    }

    // MARK: Notifications

    public func recordNotification(id: String, type: String, at: Date) async throws -> Bool {
        do {
            try await write { db in
                try await db.raw("INSERT INTO processed_notifications (id, type, received_at) VALUES (\(bind: id), \(bind: type), \(bind: at.millis))").run()
            }
            return true
        } catch AuthStoreError.duplicate {
            return false
        }
    }

    public func hasProcessedNotification(id: String) async throws -> Bool {
        try await read { db in try await db.raw("SELECT id FROM processed_notifications WHERE id = \(bind: id)").first() != nil }
    }

    // MARK: Sign-in replay records

    public func recordSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) async throws -> Bool {
        let claim = SignInTokenClaim(provider: provider, subject: subject, tokenHash: tokenHash, expiresAt: expiresAt)
        return try await Self.translatingErrors { try await signInClaims.submit(claim) }
    }

    public func deleteSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) async throws {
        let release = Self.releaseClaim(SignInTokenClaim(provider: provider, subject: subject, tokenHash: tokenHash, expiresAt: expiresAt))
        try await write { db in try await release.run(on: db) }
    }

    /// Deletes a claim's record, found by the table's key.
    static func releaseClaim(_ claim: SignInTokenClaim) -> BoundStatement {
        """
        DELETE FROM used_sign_in_tokens
        WHERE expires_at = \(bind: claim.expiresAt.millis) AND provider = \(bind: claim.provider) AND token_hash = \(bind: claim.tokenHash) AND subject = \(bind: claim.subject)
        """
    }

    // MARK: Outbox

    public func enqueue(_ item: OutboxItem) async throws {
        try await write { db in
            try await db.raw(
                """
                INSERT INTO outbox (id, kind, provider, client_id, sealed_payload, attempts, next_attempt_at, last_error, created_at, completed_at)
                VALUES (\(bind: item.id), \(bind: item.kind), \(bind: item.provider), \(bind: item.clientID), \(bind: item.sealedPayload), \(bind: item.attempts),
                  \(bind: item.nextAttemptAt.millis), \(bind: item.lastError), \(bind: item.createdAt.millis), \(bind: item.completedAt?.millis))
                """
            ).run()
        }
    }

    public func claimDueOutboxItems(now: Date, limit: Int, leaseUntil: Date) async throws -> [OutboxItem] {
        // PostgreSQL: rows another instance is claiming right now are skipped, not waited for. SQLite has one writer.
        let skipLocked = backend.isPostgres ? " FOR UPDATE SKIP LOCKED" : ""
        return try await write { db in
            try await db.raw(
                """
                UPDATE outbox SET next_attempt_at = \(bind: leaseUntil.millis)
                WHERE id IN (SELECT id FROM outbox WHERE completed_at IS NULL AND next_attempt_at <= \(bind: now.millis)
                  ORDER BY next_attempt_at LIMIT \(bind: limit)\(unsafeRaw: skipLocked))
                RETURNING *
                """
            )
            .all().map(Self.outboxItem)
        }
    }

    public func updateOutboxItem(_ item: OutboxItem) async throws {
        // A finished item stays finished: an instance whose lease ran out mid-call may report late.
        try await write { db in
            try await db.raw(
                """
                UPDATE outbox SET attempts = \(bind: item.attempts), next_attempt_at = \(bind: item.nextAttemptAt.millis), last_error = \(bind: item.lastError),
                  completed_at = \(bind: item.completedAt?.millis) WHERE id = \(bind: item.id) AND completed_at IS NULL
                """
            ).run()
        }
    }

    // MARK: Invites

    public func createInvite(_ invite: Invite) async throws {
        try await write { db in
            try await db.raw(
                """
                INSERT INTO invites (code_hash, id, created_at, expires_at, max_uses, uses, revoked_at, note)
                VALUES (\(bind: invite.codeHash), \(bind: invite.id), \(bind: invite.createdAt.millis), \(bind: invite.expiresAt?.millis), \(bind: invite.maxUses),
                  \(bind: invite.uses), \(bind: invite.revokedAt?.millis), \(bind: invite.note))
                """
            ).run()
        }
    }

    public func invites() async throws -> [Invite] {
        try await read { db in
            try await db.raw("SELECT * FROM invites ORDER BY created_at").all().map { row in
                Invite(
                    id: try row.decode(column: "id", as: String.self), codeHash: try row.decode(column: "code_hash", as: String.self),
                    createdAt: try row.date("created_at"), expiresAt: try row.optionalDate("expires_at"),
                    maxUses: try row.decode(column: "max_uses", as: Int.self),
                    uses: try row.decode(column: "uses", as: Int.self), revokedAt: try row.optionalDate("revoked_at"),
                    note: try row.decode(column: "note", as: String?.self))
            }
        }
    }

    public func revokeInvite(id: String, at: Date) async throws -> Bool {
        try await write { db in
            let found = try await db.raw("SELECT id FROM invites WHERE id = \(bind: id)").first() != nil
            if found { try await db.raw("UPDATE invites SET revoked_at = \(bind: at.millis) WHERE id = \(bind: id) AND revoked_at IS NULL").run() }
            return found
        }
    }

    public func redeemInvite(codeHash: String, at now: Date) async throws -> Bool {
        try await write { db in try await Self.redeemInvite(codeHash: codeHash, at: now, db) }
    }

    /// One conditional update: two sign-ins racing for the last use cannot both win.
    static func redeemInvite(codeHash: String, at now: Date, _ db: any SQLDatabase) async throws -> Bool {
        let spent = try await db.raw(
            """
            UPDATE invites SET uses = uses + 1 WHERE code_hash = \(bind: codeHash) AND revoked_at IS NULL AND uses < max_uses
              AND (expires_at IS NULL OR expires_at > \(bind: now.millis)) RETURNING id
            """
        ).first()
        return spent != nil
    }

    // MARK: One-time records

    public func saveOneTimeRecord(_ record: OneTimeRecord) async throws {
        try await write { db in
            try await db.raw(
                """
                INSERT INTO one_time_records (kind, key_hash, sealed_payload, expires_at, used_at)
                VALUES (\(bind: record.kind), \(bind: record.keyHash), \(bind: record.sealedPayload), \(bind: record.expiresAt.millis), \(bind: record.usedAt?.millis))
                """
            ).run()
        }
    }

    public func useOneTimeRecord(kind: String, keyHash: String, at: Date) async throws -> OneTimeRecord? {
        try await write { db in
            // One conditional update decides who used it first, across instances; a loser reads what is there.
            if let first = try await db.raw(
                """
                UPDATE one_time_records SET used_at = \(bind: at.millis) WHERE kind = \(bind: kind) AND key_hash = \(bind: keyHash) AND used_at IS NULL
                RETURNING sealed_payload, expires_at
                """
            ).first() {
                return OneTimeRecord(
                    kind: kind, keyHash: keyHash, sealedPayload: try first.decode(column: "sealed_payload", as: String.self),
                    expiresAt: try first.date("expires_at"))
            }
            guard
                let used = try await db.raw(
                    "SELECT sealed_payload, expires_at, used_at FROM one_time_records WHERE kind = \(bind: kind) AND key_hash = \(bind: keyHash)"
                ).first()
            else { return nil }
            return OneTimeRecord(
                kind: kind, keyHash: keyHash, sealedPayload: try used.decode(column: "sealed_payload", as: String.self), expiresAt: try used.date("expires_at"),
                usedAt: try used.optionalDate("used_at"))
        }
    }

    public func outboxItems() async throws -> [OutboxItem] {
        try await read { db in try await db.raw("SELECT * FROM outbox ORDER BY created_at").all().map(Self.outboxItem) }
    }

    // MARK: Audit

    public func audit(_ event: AuditEvent) async throws {
        try await write { db in try await Self.insertAudits([event]).run(on: db) }
    }

    public func auditEvents(userID: String?, limit: Int) async throws -> [AuditEvent] {
        try await read { db in
            let rows =
                if let userID {
                    try await db.raw("SELECT * FROM audit_events WHERE user_id = \(bind: userID) ORDER BY at DESC LIMIT \(bind: limit)").all()
                } else {
                    try await db.raw("SELECT * FROM audit_events ORDER BY at DESC LIMIT \(bind: limit)").all()
                }
            return try rows.map { row in
                AuditEvent(
                    id: try row.decode(column: "id", as: String.self), at: try row.date("at"), userID: try row.decode(column: "user_id", as: String?.self),
                    kind: try row.decode(column: "kind", as: String.self), detail: try row.decode(column: "detail", as: String.self)
                )
            }.reversed()
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
            let oneTime =
                try await db.raw("SELECT COUNT(*) AS n FROM one_time_records WHERE expires_at <= \(bind: dayAgo)").first()?
                .decode(column: "n", as: Int.self) ?? 0
            try await db.raw("DELETE FROM one_time_records WHERE expires_at <= \(bind: dayAgo)").run()
            // Finished revocations need no token any more.
            try await db.raw("UPDATE outbox SET sealed_payload = '' WHERE completed_at IS NOT NULL AND sealed_payload <> ''").run()
            return expired + dead + deadTokens + usedSignIns + oneTime
        }
    }

    // MARK: Row mapping

    /// A user's columns, named with `prefix` where they are read beside another record's (an identity's).
    static func user(_ row: any SQLRow, prefix: String = "") throws -> UserAccount {
        UserAccount(
            id: try row.decode(column: prefix + "id", as: String.self), createdAt: try row.date(prefix + "created_at"),
            email: try row.decode(column: prefix + "email", as: String?.self), emailVerified: try row.flag(prefix + "email_verified"),
            givenName: try row.decode(column: prefix + "given_name", as: String?.self),
            familyName: try row.decode(column: prefix + "family_name", as: String?.self)
        )
    }

    static func identity(_ row: any SQLRow) throws -> LinkedIdentity {
        LinkedIdentity(
            id: try row.decode(column: "id", as: String.self), userID: try row.decode(column: "user_id", as: String.self),
            provider: try row.decode(column: "provider", as: String.self), subject: try row.decode(column: "subject", as: String.self),
            email: try row.decode(column: "email", as: String?.self), emailVerified: try row.flag("email_verified"),
            isPrivateEmail: try row.flag("is_private_email"), realUserStatus: try row.decode(column: "real_user_status", as: Int?.self),
            transferSubject: try row.decode(column: "transfer_subject", as: String?.self), givenName: try row.decode(column: "given_name", as: String?.self),
            familyName: try row.decode(column: "family_name", as: String?.self), emailForwardingEnabled: try row.flag("email_forwarding_enabled"),
            claims: try row.decode(column: "claims", as: String?.self).flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8)) } ?? [:],
            firstSeenAt: try row.date("first_seen_at"), lastSignInAt: try row.date("last_sign_in_at")
        )
    }

    static func session(_ row: any SQLRow) throws -> SessionFamily {
        SessionFamily(
            id: try row.decode(column: "id", as: String.self), userID: try row.decode(column: "user_id", as: String.self),
            identityID: try row.decode(column: "identity_id", as: String?.self), clientID: try row.decode(column: "client_id", as: String.self),
            createdAt: try row.date("created_at"), lastUsedAt: try row.date("last_used_at"), absoluteExpiresAt: try row.date("absolute_expires_at"),
            revokedAt: try row.optionalDate("revoked_at"), revocationReason: try row.decode(column: "revocation_reason", as: String?.self),
            userAgent: try row.decode(column: "user_agent", as: String?.self)
        )
    }

    private static func outboxItem(_ row: any SQLRow) throws -> OutboxItem {
        OutboxItem(
            id: try row.decode(column: "id", as: String.self), kind: try row.decode(column: "kind", as: String.self),
            provider: try row.decode(column: "provider", as: String.self), clientID: try row.decode(column: "client_id", as: String.self),
            sealedPayload: try row.decode(column: "sealed_payload", as: String.self),
            attempts: try row.decode(column: "attempts", as: Int.self), nextAttemptAt: try row.date("next_attempt_at"),
            lastError: try row.decode(column: "last_error", as: String?.self), createdAt: try row.date("created_at"),
            completedAt: try row.optionalDate("completed_at")
        )
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
