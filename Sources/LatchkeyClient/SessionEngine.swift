import Foundation
import LatchkeyModels

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Timings of the session engine.
struct RefreshPolicy: Sendable {
    /// Renew this long before expiry (at most half the token's lifetime).
    var refreshAhead: TimeInterval = 120
    /// An access token this close to expiry is not handed out.
    var expirySkew: TimeInterval = 10
    /// A recorded refresh attempt older than this belongs to a client that stopped; another may take it over.
    var pendingRefreshLease: TimeInterval = 45
    /// The refresh request's timeout; shorter than the lease.
    var requestTimeout: TimeInterval = 30
    /// Backoff after a refresh without a definite answer: `base * 2^(failures - 1)`, at most `maximum`, times a
    /// jitter in 0.5...1.
    var backoffBase: TimeInterval = 1
    var backoffMaximum: TimeInterval = 300
    /// The most a caller's own refresh (a request, the foreground hook) waits after a failure, unless the server asked
    /// for longer: the timer backs off for minutes while offline, but a user back online must not wait that long.
    var callerBackoffMaximum: TimeInterval = 5
    /// Whether a timer refreshes ahead of expiry (tests that count requests turn it off).
    var refreshesInBackground = true
    /// The least time between two timer-driven checks, so a failing store is not retried in a loop.
    var minimumCheckInterval: TimeInterval = 5
}

/// Publishes the access token to synchronous readers.
final class TokenSnapshot: @unchecked Sendable {
    // @unchecked: `token` is only read and written while holding `lock`.
    private let lock = NSLock()
    private var token: String?

    var accessToken: String? {
        get { lock.withLock { token } }
        set { lock.withLock { token = newValue } }
    }
}

/// A refresh that finished after a sign-out or another sign-in; its result is dropped.
struct Superseded: Error {}

/// A refresh that found another client's claim on the refresh token while the access token in hand still works: using
/// it beats waiting for the other client's answer (a suspended extension may hold its claim for the whole lease).
struct ClaimedElsewhere: Error {}

/// The continuation of one caller waiting for a shared task: resumed once, by the task's result or by the caller's
/// cancellation, whichever comes first.
final class TaskJoin<Value: Sendable>: @unchecked Sendable {
    // @unchecked: every stored property is only read and written while holding `lock`.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Value, any Error>?
    /// A result that came before the continuation (a caller cancelled before it waited).
    private var early: Result<Value, any Error>?
    private var resumed = false

    func install(_ continuation: CheckedContinuation<Value, any Error>) {
        let early = lock.withLock { () -> Result<Value, any Error>? in
            guard let early = self.early else {
                self.continuation = continuation
                return nil
            }
            resumed = true
            return early
        }
        if let early { continuation.resume(with: early) }
    }

    func resume(with result: Result<Value, any Error>) {
        let continuation = lock.withLock { () -> CheckedContinuation<Value, any Error>? in
            guard !resumed else { return nil }
            guard let continuation = self.continuation else {
                if early == nil { early = result }
                return nil
            }
            resumed = true
            self.continuation = nil
            return continuation
        }
        continuation?.resume(with: result)
    }

    /// `task`'s value, or `CancellationError` as soon as the calling task is cancelled; the task goes on for its other
    /// callers.
    static func value(of task: Task<Value, any Error>) async throws -> Value {
        let box = TaskJoin()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                box.install(continuation)
                Task { box.resume(with: await task.result) }
            }
        } onCancel: {
            box.resume(with: .failure(CancellationError()))
        }
    }
}

/// The session's state machine: one refresh in flight per client, the store as the truth shared with other
/// clients, and a generation counter so a late answer never overwrites a newer session.
actor SessionEngine {
    private enum Unsaved { case signIn, rotation(spent: String) }

    private enum RefreshOutcome {
        case tokens(TokenPairResponse)
        case ended
        case transient(String, retryAfter: TimeInterval?)
    }

    let baseURL: URL
    let store: any TokenStore
    let transport: any LatchkeyTransport
    let clock: any LatchkeyClock
    let policy: RefreshPolicy
    let snapshot: TokenSnapshot
    let broadcast: SessionBroadcast
    private let instanceID = UUID().uuidString

    /// The session in use, never carrying a pending-refresh marker.
    private var session: StoredSession?
    /// What this client last read from or wrote to the store: the `expected` of the next compare-and-swap.
    private var lastStored: StoredSession?
    /// False until the store has been read once.
    private var storeLoaded: Bool
    /// Set while `session` is newer than the store because a write failed.
    private var unsaved: Unsaved?
    private var storageFailing = false
    /// Incremented by every sign-in and sign-out; a refresh started in an older generation changes nothing.
    private var generation = 0
    private var refreshTask: Task<StoredSession, any Error>?
    /// Numbers the refresh tasks, so a finished one clears `refreshTask` only if it is still the one there.
    private var refreshNumber = 0
    /// Why the store last failed, for the error a caller gets.
    private var storageError = LatchkeyClientError.storageUnavailable
    private var failures = 0
    /// Until when the timer does not try again.
    private var backoffUntil: Date?
    /// Until when a caller's request does not try again.
    private var callerBackoffUntil: Date?
    private var scheduled: Task<Void, Never>?
    private var lastScheduledCheck: Date?

    init(
        baseURL: URL, store: any TokenStore, transport: any LatchkeyTransport, clock: any LatchkeyClock, policy: RefreshPolicy,
        snapshot: TokenSnapshot, broadcast: SessionBroadcast
    ) {
        self.baseURL = baseURL
        self.store = store
        self.transport = transport
        self.clock = clock
        self.policy = policy
        self.snapshot = snapshot
        self.broadcast = broadcast
        // The first event is the stored state.
        do {
            let stored = try store.load()
            lastStored = stored
            storeLoaded = true
            session = Self.restore(stored, snapshot: snapshot, broadcast: broadcast)
        } catch {
            storeLoaded = false
            storageFailing = true
            broadcast.publish(.storageUnavailable, state: .unknown)
        }
    }

    func start() {
        reschedule()
    }

    // MARK: - Access tokens

    func validCredential() async throws -> AccessCredential {
        while true {
            try loadIfNeeded()
            // Saved first: the save may find another sign-in or a sign-out in the store, which replaces `session`.
            if unsaved != nil { _ = saveUnsaved() }
            guard let current = session else { throw LatchkeyClientError.notSignedIn }
            if clock.now < current.refreshAt { return current.credential }
            do {
                return try await refresh().credential
            } catch is Superseded {
                continue
            } catch let error
                where error is ClaimedElsewhere || error as? LatchkeyClientError == .temporarilyUnavailable
                || error as? LatchkeyClientError == .storageUnavailable
            {
                // Refreshing ahead of expiry failed, or another client is refreshing: the current token still works
                // until it expires.
                if let session, session.accessToken == current.accessToken, isUsable(current) { return current.credential }
                if error is ClaimedElsewhere { continue }
                throw error
            }
        }
    }

    /// Whether `session`'s access token is not about to expire.
    private func isUsable(_ session: StoredSession) -> Bool {
        clock.now < session.expiresAt.addingTimeInterval(-policy.expirySkew)
    }

    /// After a 401 for `rejected`: a newer token if there is one, else one refresh.
    func credential(replacing rejected: String) async throws -> AccessCredential {
        while true {
            try loadIfNeeded()
            guard let current = session else { throw LatchkeyClientError.notSignedIn }
            guard current.accessToken == rejected else { return try await validCredential() }
            do {
                return try await refresh(usingTokenInHand: false).credential
            } catch is Superseded {
                continue
            } catch is ClaimedElsewhere {
                // Joined a refresh that would rather use this token; the server refused it, so wait for the claim.
                continue
            }
        }
    }

    /// The timer's and the foreground hook's check: refresh when due, retry an unsaved write, read a store that was locked.
    func refreshIfNeeded(byTimer: Bool = false) async {
        _ = try? loadIfNeeded()
        if unsaved != nil { _ = saveUnsaved() }
        if let session, clock.now >= session.refreshAt { _ = try? await refresh(byTimer: byTimer) }
    }

    // MARK: - Sign-in and sign-out

    func signedIn(_ tokens: TokenPairResponse, user: LatchkeyUser?) {
        generation += 1
        refreshTask = nil
        failures = 0
        backoffUntil = nil
        callerBackoffUntil = nil
        session = StoredSession(tokens: tokens, userID: user?.id, user: user, receivedAt: clock.now, refreshAhead: policy.refreshAhead)
        storeLoaded = true
        unsaved = .signIn
        _ = saveUnsaved()
        snapshot.accessToken = session?.accessToken
        publish(.signedIn)
        reschedule()
    }

    /// Ends the session here and in the store; returns its tokens, to end it at the server too.
    func signOut() -> (credential: AccessCredential, refreshToken: String)? {
        generation += 1
        refreshTask = nil
        scheduled?.cancel()
        scheduled = nil
        let tokens = session.map { ($0.credential, $0.refreshToken) }
        session = nil
        unsaved = nil
        snapshot.accessToken = nil
        do {
            var stored = try store.load()
            var attempts = 1
            while try !store.compareAndSwap(expected: stored, new: nil) {
                guard attempts < Self.compareAndSwapAttempts else { throw Self.compareAndSwapKeepsFailing(attempts) }
                attempts += 1
                stored = try store.load()
            }
            lastStored = nil
            storeLoaded = true
        } catch {
            reportStorage(failing: true, error)
        }
        publish(.sessionEnded(.signedOut))
        return tokens
    }

    /// After a sign-out whose access token the server no longer took: a fresh pair for the logout, or nil.
    func tokens(forSigningOut refreshToken: String) async -> TokenPairResponse? {
        if case .tokens(let tokens) = await send(refreshToken: refreshToken) { return tokens }
        return nil
    }

    // MARK: - Refresh

    /// Joins the refresh in flight or starts one. The wait ends with `CancellationError` when the caller is cancelled.
    ///
    /// - Parameter usingTokenInHand: whether a refresh that finds another client's claim throws ``ClaimedElsewhere``
    ///   while the access token still works, instead of waiting for that client's answer (false after a 401 for it).
    private func refresh(byTimer: Bool = false, usingTokenInHand: Bool = true) async throws -> StoredSession {
        if let refreshTask { return try await TaskJoin.value(of: refreshTask) }
        if let until = byTimer ? backoffUntil : callerBackoffUntil, clock.now < until {
            throw LatchkeyClientError.unavailable("backing off after a failed refresh until \(until)")
        }
        let started = generation
        refreshNumber += 1
        let number = refreshNumber
        let task = Task { try await self.runRefresh(generation: started, number: number, usingTokenInHand: usingTokenInHand) }
        refreshTask = task
        return try await TaskJoin.value(of: task)
    }

    /// The refresh task's body: clears `refreshTask` when it ends, whoever is still waiting for it.
    private func runRefresh(generation started: Int, number: Int, usingTokenInHand: Bool) async throws -> StoredSession {
        defer { if refreshNumber == number { refreshTask = nil } }
        return try await performRefresh(generation: started, usingTokenInHand: usingTokenInHand)
    }

    private func performRefresh(generation started: Int, usingTokenInHand: Bool) async throws -> StoredSession {
        var claimAttempts = 0
        while true {
            guard generation == started else { throw Superseded() }
            guard let current = session else { throw LatchkeyClientError.notSignedIn }
            if unsaved != nil {
                guard saveUnsaved() else { throw storageError }
                continue
            }
            // The store is the truth shared with other clients: they may have refreshed or signed out.
            let onDisk: StoredSession?
            do {
                onDisk = try store.load()
            } catch {
                reportStorage(failing: true, error)
                throw storageError
            }
            reportStorage(failing: false)
            lastStored = onDisk
            guard let onDisk else {
                end(.signedOut)
                throw LatchkeyClientError.notSignedIn
            }
            if onDisk.refreshToken != current.refreshToken {
                adopt(onDisk)
                if clock.now < onDisk.refreshAt { return Self.withoutMarker(onDisk) }
                continue
            }
            if let marker = onDisk.pendingRefresh, marker.owner != instanceID, !isAbandoned(marker) {
                // Another client is spending this refresh token. While the token in hand works, use it; else wait for
                // the other client to store the successor (or for its lease to end).
                if usingTokenInHand, isUsable(current) { throw ClaimedElsewhere() }
                try await Task.sleep(nanoseconds: 50_000_000)
                continue
            }
            var claimed = onDisk
            claimed.pendingRefresh = .init(startedAt: clock.now.wholeSeconds, owner: instanceID, processID: getpid())
            do {
                guard try store.compareAndSwap(expected: onDisk, new: claimed) else {
                    // Another client changed the store between the read and the swap: read it again, a bounded number of times.
                    claimAttempts += 1
                    guard claimAttempts < Self.compareAndSwapAttempts else { throw Self.compareAndSwapKeepsFailing(claimAttempts) }
                    continue
                }
            } catch {
                reportStorage(failing: true, error)
                throw storageError
            }
            lastStored = claimed
            let outcome = await send(refreshToken: claimed.refreshToken)
            guard generation == started else { throw Superseded() }
            switch outcome {
            case .tokens(let tokens):
                failures = 0
                backoffUntil = nil
                callerBackoffUntil = nil
                // The user as known now: a profile described while the request was in flight is newer than `current`'s.
                let latest = session ?? current
                let next = StoredSession(
                    tokens: tokens, userID: latest.userID, user: latest.user, receivedAt: clock.now, refreshAhead: policy.refreshAhead)
                session = next
                unsaved = .rotation(spent: claimed.refreshToken)
                // Saved before anyone sees the new token; if the store fails, the pair stays in memory and is saved later.
                if !saveUnsaved() { _ = saveUnsaved() }
                guard let session else { throw LatchkeyClientError.notSignedIn }
                snapshot.accessToken = session.accessToken
                publish(.refreshed)
                reschedule()
                return session
            case .ended:
                _ = try? store.compareAndSwap(expected: claimed, new: nil)
                end(.revoked)
                throw LatchkeyClientError.notSignedIn
            case .transient(let reason, let retryAfter):
                failures += 1
                let backoff = min(policy.backoffMaximum, policy.backoffBase * pow(2, Double(failures - 1))) * Double.random(in: 0.5...1)
                let asked = min(retryAfter ?? 0, policy.backoffMaximum)
                backoffUntil = clock.now.addingTimeInterval(max(backoff, asked))
                callerBackoffUntil = clock.now.addingTimeInterval(max(min(backoff, policy.callerBackoffMaximum), asked))
                reschedule()
                throw LatchkeyClientError.unavailable(reason)
            }
        }
    }

    /// `POST /v1/token`; only `invalid_grant` in Latchkey's error format is a definite "no".
    private func send(refreshToken: String) async -> RefreshOutcome {
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/token"), timeoutInterval: policy.requestTimeout)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.httpBody = Self.formBody([("grant_type", "refresh_token"), ("refresh_token", refreshToken)])
        let data: Data
        let response: HTTPURLResponse
        do {
            (data, response) = try await transport.send(request)
        } catch {
            return .transient("no answer: \(type(of: error))", retryAfter: nil)
        }
        let retryAfter = response.value(forHTTPHeaderField: "Retry-After").flatMap(TimeInterval.init)
        if (200..<300).contains(response.statusCode) {
            guard let tokens = try? JSONDecoder().decode(TokenPairResponse.self, from: data) else {
                return .transient("HTTP \(response.statusCode) without a token pair", retryAfter: retryAfter)
            }
            return .tokens(tokens)
        }
        if response.statusCode == 400, let body = try? JSONDecoder().decode(OAuthErrorResponse.self, from: data), body.error == "invalid_grant" {
            return .ended
        }
        return .transient("HTTP \(response.statusCode)", retryAfter: retryAfter)
    }

    /// An `application/x-www-form-urlencoded` body.
    static func formBody(_ fields: [(String, String)]) -> Data {
        Data(fields.map { "\($0.0)=\(formEncoded($0.1))" }.joined(separator: "&").utf8)
    }

    private static func formEncoded(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }

    /// A marker whose owner stopped: too old, or its process is gone.
    private func isAbandoned(_ marker: StoredSession.PendingRefresh) -> Bool {
        let pid = marker.processID
        return Self.isAbandoned(age: clock.now.timeIntervalSince(marker.startedAt), lease: policy.pendingRefreshLease, ownedHere: pid == getpid()) {
            kill(pid, 0) == 0 ? 0 : errno
        }
    }

    /// Whether a refresh marker's owner stopped: the marker outlived its lease, or `probe` (`kill(pid, 0)`'s errno, 0
    /// when it succeeded) says the owner's process does not exist (ESRCH). Any other answer — EPERM, which a sandbox
    /// may give for every other process — proves nothing, and the marker waits for its lease.
    static func isAbandoned(age: TimeInterval, lease: TimeInterval, ownedHere: Bool, probe: () -> Int32) -> Bool {
        if age > lease { return true }
        guard !ownedHere else { return false }
        return probe() == ESRCH
    }

    // MARK: - Store

    private func loadIfNeeded() throws {
        guard !storeLoaded else { return }
        do {
            let stored = try store.load()
            lastStored = stored
            storeLoaded = true
            reportStorage(failing: false)
            session = Self.restore(stored, snapshot: snapshot, broadcast: broadcast)
            reschedule()
        } catch {
            reportStorage(failing: true, error)
            throw storageError
        }
    }

    /// How many compare-and-swaps in a row one write tries before it reports the store as failing. Each failure means
    /// another client changed the store in between; a store that refuses this many times in a row is broken (a
    /// custom ``TokenStore`` whose `compareAndSwap` never matches what its `load()` returns, say).
    static let compareAndSwapAttempts = 16

    static func compareAndSwapKeepsFailing(_ attempts: Int) -> LatchkeyClientError {
        .storageUnavailable(
            "the token store's compareAndSwap answered false \(attempts) times in a row, each time for the value its load() had just "
                + "returned; a TokenStore must swap when the stored value equals `expected`")
    }

    /// Writes `session` over what the store held; returns false (and reports) when the store failed.
    private func saveUnsaved() -> Bool {
        var attempts = 0
        while let kind = unsaved {
            do {
                if try store.compareAndSwap(expected: lastStored, new: session) {
                    lastStored = session
                    unsaved = nil
                    reportStorage(failing: false)
                    return true
                }
                attempts += 1
                guard attempts < Self.compareAndSwapAttempts else { throw Self.compareAndSwapKeepsFailing(attempts) }
                // Another client changed the store since we read it.
                let onDisk = try store.load()
                lastStored = onDisk
                reportStorage(failing: false)
                switch kind {
                case .signIn:
                    continue
                case .rotation(let spent):
                    if let onDisk, onDisk.refreshToken == spent {
                        // Still the pair we rotated (another client took over the attempt, or stored the user's
                        // profile, which is then newer than ours): our pair is newer.
                        if let user = onDisk.user, user.id == session?.userID || session?.userID == nil {
                            session = session?.describing(user)
                        }
                        continue
                    }
                    unsaved = nil
                    if let onDisk, onDisk.refreshToken == session?.refreshToken { return true }
                    // Signed out or signed in elsewhere since: that is newer than our rotation.
                    if let onDisk { adopt(onDisk) } else { end(.signedOut) }
                    return true
                }
            } catch {
                reportStorage(failing: true, error)
                return false
            }
        }
        return true
    }

    /// Records whether the store works; the first failure is published, and `error` (a compare-and-swap that keeps
    /// failing) becomes the reason callers get.
    private func reportStorage(failing: Bool, _ error: (any Error)? = nil) {
        if failing && !storageFailing { publish(.storageUnavailable) }
        storageFailing = failing
        storageError = (error as? LatchkeyClientError).flatMap { $0 == .storageUnavailable ? $0 : nil } ?? .storageUnavailable
    }

    private func adopt(_ stored: StoredSession) {
        let sameUser = stored.userID == session?.userID
        session = Self.withoutMarker(stored)
        snapshot.accessToken = stored.accessToken
        publish(sameUser ? .refreshed : .signedIn)
        reschedule()
    }

    private func end(_ reason: SessionEndReason) {
        generation += 1
        session = nil
        unsaved = nil
        refreshTask = nil
        snapshot.accessToken = nil
        scheduled?.cancel()
        scheduled = nil
        publish(.sessionEnded(reason))
    }

    /// The session read at launch (or once the store is readable): published, and announced as the stored state.
    private static func restore(_ stored: StoredSession?, snapshot: TokenSnapshot, broadcast: SessionBroadcast) -> StoredSession? {
        snapshot.accessToken = stored?.accessToken
        broadcast.publish(stored == nil ? .sessionEnded(.noStoredSession) : .signedIn, state: state(of: stored, loaded: true))
        return stored.map(withoutMarker)
    }

    // MARK: - State

    /// The state an app renders, from what this client knows now.
    var state: SessionState { Self.state(of: session, loaded: storeLoaded) }

    /// The user of the session, when it has one.
    var user: LatchkeyUser? { session?.user }

    private static func state(of session: StoredSession?, loaded: Bool) -> SessionState {
        guard loaded else { return .unknown }
        guard let session else { return .signedOut }
        return session.user.map(SessionState.signedIn) ?? .signedInWithoutProfile(userID: session.userID)
    }

    private func publish(_ event: SessionEvent) {
        broadcast.publish(event, state: state)
    }

    /// Keeps what the server says about the session's user (`GET /v1/me`): in memory, and in the store when the
    /// stored session is still this one (a rotation or a sign-out by another client is never overwritten).
    func described(_ user: LatchkeyUser) {
        guard let current = session, current.userID == nil || current.userID == user.id, current.user != user else { return }
        session = current.describing(user)
        if unsaved == nil, let onDisk = try? store.load(), onDisk.refreshToken == current.refreshToken {
            let updated = onDisk.describing(user)
            if (try? store.compareAndSwap(expected: onDisk, new: updated)) == true { lastStored = updated }
        }
        broadcast.publish(state: state)
    }

    /// The user `credential` belongs to (`GET /v1/me`), or nil without a definite answer.
    func describe(_ credential: AccessCredential) async -> LatchkeyUser? {
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/me"), timeoutInterval: policy.requestTimeout)
        request.setValue(credential.authorization, forHTTPHeaderField: "Authorization")
        guard let (data, response) = try? await transport.send(request), response.statusCode == 200 else { return nil }
        return try? LatchkeyClient.answer(LatchkeyUser.self, data, status: response.statusCode, describing: "the user")
    }

    /// A session stored without its user (by an earlier version, or a browser sign-in whose `GET /v1/me` failed) asks
    /// the server, so its state can go from `.signedInWithoutProfile` to `.signedIn`.
    func describeUserIfMissing() async {
        guard let current = session, current.user == nil, let credential = try? await validCredential(), let user = await describe(credential)
        else { return }
        described(user)
    }

    /// The app came to the foreground, or protected data became available: everything ``refreshIfNeeded(byTimer:)``
    /// does, and the user when the session lacks them.
    func foreground() async {
        await refreshIfNeeded()
        await describeUserIfMissing()
    }

    private static func withoutMarker(_ stored: StoredSession) -> StoredSession {
        var session = stored
        session.pendingRefresh = nil
        return session
    }

    // MARK: - Timer

    /// Sleeps until the next refresh is due (or the backoff ends), then checks; a failed check schedules the next.
    private func reschedule() {
        scheduled?.cancel()
        scheduled = nil
        guard policy.refreshesInBackground, let session else { return }
        var due = max(session.refreshAt, backoffUntil ?? .distantPast)
        if unsaved != nil || storageFailing { due = min(due, clock.now.addingTimeInterval(policy.minimumCheckInterval)) }
        if let lastScheduledCheck { due = max(due, lastScheduledCheck.addingTimeInterval(policy.minimumCheckInterval)) }
        scheduled = Task { [weak self, clock] in
            do { try await clock.sleep(until: due) } catch { return }
            guard !Task.isCancelled else { return }
            await self?.scheduledCheck()
        }
    }

    private func scheduledCheck() async {
        lastScheduledCheck = clock.now
        await refreshIfNeeded(byTimer: true)
        reschedule()
    }
}
