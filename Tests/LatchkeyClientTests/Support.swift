import Foundation
import LatchkeyModels
import LatchkeyTestSupport

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A store that fails on demand: reads (a locked Keychain) or saves of a new pair (claims of a refresh still work).
final class FlakyStore: TokenStore, @unchecked Sendable {
    // @unchecked: every field is only used while holding `lock`.
    let inner: any TokenStore
    private let lock = NSLock()
    private var loadsFail = false
    private var savesToFail = 0
    private var onSave: (@Sendable (StoredSession) -> Void)?

    init(_ inner: any TokenStore = InMemoryTokenStore()) {
        self.inner = inner
    }

    func failLoads(_ fail: Bool) { lock.withLock { loadsFail = fail } }
    func failSaves(_ count: Int) { lock.withLock { savesToFail = count } }
    func observeSaves(_ observe: @escaping @Sendable (StoredSession) -> Void) { lock.withLock { onSave = observe } }

    func load() throws -> StoredSession? {
        if lock.withLock({ loadsFail }) { throw CocoaError(.fileReadNoPermission) }
        return try inner.load()
    }

    func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
        if let new, new.pendingRefresh == nil {
            let (fail, observe) = lock.withLock {
                defer { if savesToFail > 0 { savesToFail -= 1 } }
                return (savesToFail > 0 || loadsFail, onSave)
            }
            if fail { throw CocoaError(.fileWriteNoPermission) }
            observe?(new)
        } else if lock.withLock({ loadsFail }) {
            throw CocoaError(.fileWriteNoPermission)
        }
        return try inner.compareAndSwap(expected: expected, new: new)
    }
}

/// Collects a client's events as they come.
final class EventLog: @unchecked Sendable {
    // @unchecked: `events` is only used while holding `lock`.
    private let lock = NSLock()
    private var events: [SessionEvent] = []

    init(_ stream: AsyncStream<SessionEvent>) {
        Task { [self] in
            for await event in stream { lock.withLock { events.append(event) } }
        }
    }

    var all: [SessionEvent] { lock.withLock { events } }

    /// Waits in real time (up to 30 s, as every poll in these tests) until `predicate` holds for the events so far.
    /// Every caller waits for something that must happen: on a loaded machine a refresh through `serve` took more
    /// than the 2 s this once allowed.
    func wait(until predicate: ([SessionEvent]) -> Bool, file: String = #fileID, line: Int = #line) async throws -> [SessionEvent] {
        var events: [SessionEvent] = []
        try await poll(until: "the client's events to match (seen: \(events))", within: .seconds(30), file: file, line: line) {
            events = all
            return predicate(events)
        }
        return events
    }
}

/// A server, a clock and a way to start clients that share them.
struct Fixture {
    let clock = MutableClock(Date(timeIntervalSince1970: 1_750_000_000))
    let server: FakeServer
    let baseURL = URL(string: "https://auth.example.com")!

    init() {
        server = FakeServer(clock: clock)
    }

    func client(
        store: any TokenStore, transport: (any LatchkeyTransport)? = nil, background: Bool = false, deviceBinding: DeviceBinding = .none,
        appAttest: AppAttest = .disabled, installItems: (any InstallItemStore)? = nil
    ) -> LatchkeyClient {
        var policy = RefreshPolicy()
        policy.refreshesInBackground = background
        return LatchkeyClient(
            baseURL: baseURL, tokenStore: store, transport: transport ?? server, clock: clock, policy: policy, deviceBinding: deviceBinding,
            appAttest: appAttest, installItems: installItems)
    }

    /// A signed-in client whose access token has just expired.
    func expiredSession(store: any TokenStore = InMemoryTokenStore(), user: String = "user-1") async throws -> LatchkeyClient {
        let client = client(store: store)
        try await client.signInWithApple(identityToken: user, authorizationCode: nil, rawNonce: "n")
        clock.advance(901)
        return client
    }

    func resource() -> URLRequest {
        URLRequest(url: URL(string: "https://api.example.com/feed")!)
    }
}

extension StoredSession {
    var isClaimed: Bool { pendingRefresh != nil }
}

/// Moves the clock a second; false, so `poll` keeps polling while time passes in small steps.
func tick(_ clock: MutableClock) -> Bool {
    clock.advance(1)
    return false
}

/// Whether a task has finished, for a `poll` that must not wait on the task itself (awaiting a task's value ignores
/// the waiter's cancellation, so a test waiting on a stuck task would hang instead of failing).
final class Finished: @unchecked Sendable {
    // @unchecked: `done` is only used while holding `lock`.
    private let lock = NSLock()
    private var done = false

    init<Success: Sendable>(_ task: Task<Success, any Error>) {
        Task { [self] in
            _ = await task.result
            lock.withLock { done = true }
        }
    }

    var isFinished: Bool { lock.withLock { done } }

    /// Set once.
    final class Flag: @unchecked Sendable {
        // @unchecked: `isSet` is only used while holding `lock`.
        private let lock = NSLock()
        private var isSet = false

        /// Sets the flag; true for the call that set it.
        func set() -> Bool {
            lock.withLock {
                defer { isSet = true }
                return !isSet
            }
        }
    }
}
