public import Foundation
public import Logging
import Synchronization

/// A provider's signing keys, fetched from its `jwks_uri` and cached.
///
/// - Keys are kept for the response's `Cache-Control: max-age`, clamped to
///   ``Configuration/minimumMaxAge``…``Configuration/maximumMaxAge``.
/// - A token naming an unknown `kid` triggers a refetch at once, so a key the provider has just rotated in
///   is picked up by the first token signed with it; concurrent callers share the fetch (single flight).
///   Such refetches draw on a small token bucket (``Configuration/unknownKeyRefetchBurst``, refilled one per
///   ``Configuration/unknownKeyRefetchInterval``), and a `kid` still unknown after a fetch is refused without
///   fetching for ``Configuration/unknownKeyNegativeTTL``, so tokens with random `kid`s cannot make Latchkey
///   hammer the provider.
/// - Stale keys are refreshed at most once per ``Configuration/refetchCooldown``.
/// - When the provider cannot be reached, the keys already known keep serving.
///
/// ```swift
/// let apple = JWKSCache(url: "https://appleid.apple.com/auth/keys", transport: AsyncHTTPClientTransport())
/// let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.example.app"]), keys: apple)
/// ```
public final class JWKSCache: VerificationKeyResolver {
    public struct Configuration: Sendable {
        /// Lifetime used when the response has no usable `max-age`.
        public var defaultMaxAge: Duration = .seconds(3600)
        public var minimumMaxAge: Duration = .seconds(300)
        public var maximumMaxAge: Duration = .seconds(86_400)
        /// Stale keys are not refreshed again within this time of the previous attempt.
        public var refetchCooldown: Duration = .seconds(60)
        /// Fetches for unknown `kid`s that may happen back to back.
        public var unknownKeyRefetchBurst = 3
        /// After the burst, one more fetch for an unknown `kid` per this interval.
        public var unknownKeyRefetchInterval: Duration = .seconds(2)
        /// How long a `kid` that a fresh key set did not hold is refused without fetching again.
        public var unknownKeyNegativeTTL: Duration = .seconds(5)
        public var requestTimeout: Duration = .seconds(10)

        public init() {}
    }

    private struct State {
        var keys = VerificationKeySet()
        var expiresAt: Date = .distantPast
        var lastAttempt: Date?
        var lastError: LatchkeyError?
        var inflight: Task<VerificationKeySet, any Error>?
        var fetches = 0
        /// Unknown-kid refetches available now, and when the bucket was last refilled.
        var refetchTokens: Double
        var refilledAt: Date = .distantPast
        /// Key ids a fetch did not hold, until when they are refused without fetching.
        var knownUnknown: [String: Date] = [:]

        init(burst: Int) { refetchTokens = Double(burst) }
    }

    /// Where keys are fetched from; `nil` for a cache that only ever serves preloaded keys.
    public let url: String?
    public let configuration: Configuration
    private let transport: (any HTTPTransport)?
    private let timeSource: TimeSource
    private let logger: Logger?
    private let state: Mutex<State>

    public init(
        url: String,
        transport: any HTTPTransport,
        configuration: Configuration = .init(),
        timeSource: TimeSource = .system,
        logger: Logger? = nil
    ) {
        self.url = url
        self.transport = transport
        self.configuration = configuration
        self.timeSource = timeSource
        self.logger = logger
        self.state = Mutex(State(burst: configuration.unknownKeyRefetchBurst))
    }

    /// A cache that never fetches and serves `keys` forever, for offline use.
    public init(offline keys: VerificationKeySet) {
        self.url = nil
        self.transport = nil
        self.configuration = .init()
        self.timeSource = .system
        self.logger = nil
        self.state = Mutex(State(burst: 0))
        state.withLock {
            $0.keys = keys
            $0.expiresAt = .distantFuture
        }
    }

    /// Loads keys from a JWKS document (for example a file saved for offline use); they serve until the next fetch.
    public func preload(jwksJSON: [UInt8]) async throws(LatchkeyError) {
        let keys = try await VerificationKeySet(jwksJSON: jwksJSON)
        let expiry = timeSource.now.addingTimeInterval(configuration.defaultMaxAge.seconds)
        state.withLock {
            $0.keys = keys
            $0.expiresAt = max($0.expiresAt, expiry)
        }
    }

    /// How many fetches this cache has started.
    public var fetchCount: Int { state.withLock { $0.fetches } }

    /// When the cached keys go stale.
    public var expiresAt: Date { state.withLock { $0.expiresAt } }

    /// The keys currently cached.
    public var cachedKeys: VerificationKeySet { state.withLock { $0.keys } }

    public func key(forKeyID keyID: String) async throws(LatchkeyError) -> VerificationKey {
        let now = timeSource.now
        let (cached, fresh) = state.withLock { ($0.keys[keyID], now < $0.expiresAt) }
        if let cached, fresh { return cached }
        if let cached {
            // Stale: try for fresh keys, but an unreachable provider must not stop sign-ins.
            guard let keys = try? await refresh(respectingCooldown: true) else { return cached }
            // A key the provider has withdrawn (a compromised one, say) stops verifying as soon as a fetch shows it gone.
            guard let key = keys[keyID] else { throw unknownKeyID(keyID, known: keys.keyIDs) }
            return key
        }
        guard let keys = try await refetch(forUnknownKeyID: keyID, now: now) else { throw unknownKeyID(keyID, known: cachedKeys.keyIDs) }
        guard let key = keys[keyID] else {
            let until = timeSource.now.addingTimeInterval(configuration.unknownKeyNegativeTTL.seconds)
            state.withLock { state in
                if state.knownUnknown.count >= 1024 { state.knownUnknown = state.knownUnknown.filter { $0.value > now } }
                if state.knownUnknown.count < 1024 { state.knownUnknown[keyID] = until }
            }
            throw unknownKeyID(keyID, known: keys.keyIDs)
        }
        return key
    }

    /// Fetches for a `kid` the cache does not hold, unless it was just found missing or the refetch budget
    /// is spent (nil then, or the last fetch's error). Joins a fetch already under way without spending budget.
    private func refetch(forUnknownKeyID keyID: String, now: Date) async throws(LatchkeyError) -> VerificationKeySet? {
        guard let url, let transport else { return nil }
        enum Plan { case fetched(VerificationKeySet), join(Task<VerificationKeySet, any Error>), refused }
        // Decided and started under one lock: callers arriving together either join the fetch or find it under way,
        // or find the keys it brought when it ended after they first looked.
        let plan: Plan = state.withLock { state in
            if let inflight = state.inflight { return .join(inflight) }
            if state.keys[keyID] != nil { return .fetched(state.keys) }
            if let until = state.knownUnknown[keyID], now < until { return .refused }
            let interval = configuration.unknownKeyRefetchInterval.seconds
            let burst = Double(configuration.unknownKeyRefetchBurst)
            if state.refilledAt == .distantPast || interval <= 0 {
                state.refetchTokens = burst
            } else {
                state.refetchTokens = min(burst, state.refetchTokens + max(0, now.timeIntervalSince(state.refilledAt)) / interval)
            }
            state.refilledAt = now
            guard state.refetchTokens >= 1 else { return .refused }
            state.refetchTokens -= 1
            return .join(startFetch(&state, url: url, transport: transport, now: now))
        }
        switch plan {
        case .fetched(let keys):
            return keys
        case .join(let fetch):
            return try await result(of: fetch)
        case .refused:
            // When the provider's keys could not be fetched, whether the key exists is unknown: keys_unavailable (a 503
            // the app retries), not a definite unknown_key_id.
            if let error = state.withLock({ $0.lastError }) { throw error }
            return nil
        }
    }

    /// Fetches the key set now (joining a fetch already under way), unless `respectingCooldown`
    /// and the last attempt was too recent, in which case the cached keys are returned.
    @discardableResult
    public func refresh(respectingCooldown: Bool = false) async throws(LatchkeyError) -> VerificationKeySet {
        guard let url, let transport else { return cachedKeys }
        let now = timeSource.now
        enum Plan { case join(Task<VerificationKeySet, any Error>), cached(VerificationKeySet, LatchkeyError?) }
        let plan: Plan = state.withLock { state in
            if let inflight = state.inflight { return .join(inflight) }
            if respectingCooldown, let last = state.lastAttempt, now < last.addingTimeInterval(configuration.refetchCooldown.seconds) {
                return .cached(state.keys, state.keys.isEmpty ? state.lastError : nil)
            }
            return .join(startFetch(&state, url: url, transport: transport, now: now))
        }
        switch plan {
        case .cached(let keys, let error):
            if let error { throw error }
            return keys
        case .join(let task):
            return try await result(of: task)
        }
    }

    /// Starts a fetch that callers arriving meanwhile join; call with the state locked.
    private func startFetch(_ state: inout State, url: String, transport: any HTTPTransport, now: Date) -> Task<VerificationKeySet, any Error> {
        state.lastAttempt = now
        state.fetches += 1
        let task = Task { try await self.fetch(url: url, transport: transport) }
        state.inflight = task
        return task
    }

    /// The keys `fetch` brings, or `keys_unavailable` as soon as the caller is cancelled: the fetch is shared and runs on for
    /// its other callers, but a caller that is shutting down (the refresh service, a request cut short) stops waiting,
    /// where awaiting the task's value would hold it until the provider answered or the request timed out.
    private func result(of fetch: Task<VerificationKeySet, any Error>) async throws(LatchkeyError) -> VerificationKeySet {
        let waiter = Waiter()
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.wait(continuation)
                // Cancelled before the continuation was stored, the handler below found nothing to resume.
                if Task.isCancelled { waiter.resume(.failure(CancellationError())) }
                Task { waiter.resume(await fetch.result) }
            }
        } onCancel: {
            waiter.resume(.failure(CancellationError()))
        }
        switch outcome {
        case .success(let keys): return keys
        case .failure(let error as LatchkeyError): throw error
        case .failure: throw LatchkeyError(.keysUnavailable, "fetching keys was interrupted")
        }
    }

    /// One caller's wait for a shared fetch, resumed once: by the fetch's end or by the caller's cancellation.
    private final class Waiter: Sendable {
        private let continuation = Mutex<CheckedContinuation<Result<VerificationKeySet, any Error>, Never>?>(nil)

        func wait(_ continuation: CheckedContinuation<Result<VerificationKeySet, any Error>, Never>) {
            self.continuation.withLock { $0 = continuation }
        }

        func resume(_ result: Result<VerificationKeySet, any Error>) {
            continuation.withLock { $0.take() }?.resume(returning: result)
        }
    }

    private func fetch(url: String, transport: any HTTPTransport) async throws -> VerificationKeySet {
        do {
            let response = try await transport.send(OutboundRequest(url: url, headers: [("Accept", "application/json")], timeout: configuration.requestTimeout))
            guard response.status == 200 else {
                throw LatchkeyError(.keysUnavailable, "\(url) answered HTTP \(response.status) instead of the key set")
            }
            let keys = try await VerificationKeySet(jwksJSON: response.body)
            let maxAge = clampedMaxAge(response.headers["cache-control"])
            let expiry = timeSource.now.addingTimeInterval(maxAge)
            state.withLock {
                $0.keys = keys
                $0.expiresAt = expiry
                $0.lastError = nil
                $0.inflight = nil
            }
            logger?.debug("fetched signing keys", metadata: ["jwks.url": "\(url)", "jwks.count": "\(keys.keyIDs.count)", "jwks.max_age": "\(Int(maxAge))"])
            return keys
        } catch let error as LatchkeyError {
            let reported = error.code == .keysUnavailable ? error : LatchkeyError(.keysUnavailable, "could not fetch keys from \(url): \(error.reason)")
            state.withLock {
                $0.lastError = reported
                $0.inflight = nil
            }
            logger?.debug("fetching signing keys failed", metadata: ["jwks.url": "\(url)", "error": "\(reported.errorCode)"])
            throw reported
        }
    }

    private func clampedMaxAge(_ cacheControl: String?) -> TimeInterval {
        var maxAge = configuration.defaultMaxAge.seconds
        if let cacheControl {
            for directive in cacheControl.split(separator: ",") {
                let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].lowercased() == "max-age", let seconds = Double(parts[1].trimmingCharacters(in: .init(charactersIn: "\""))) {
                    maxAge = seconds
                }
            }
        }
        return min(max(maxAge, configuration.minimumMaxAge.seconds), configuration.maximumMaxAge.seconds)
    }
}

extension Duration {
    /// This duration as a `TimeInterval`.
    package var seconds: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
