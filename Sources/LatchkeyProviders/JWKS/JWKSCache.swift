public import Foundation
public import LatchkeyCore
public import Logging
import Synchronization

/// A provider's signing keys, fetched from its `jwks_uri` and cached.
///
/// - Keys are kept for the response's `Cache-Control: max-age`, clamped to
///   ``Configuration/minimumMaxAge``…``Configuration/maximumMaxAge``.
/// - A token naming an unknown `kid` triggers one refetch; concurrent callers share it (single flight),
///   and no new fetch starts within ``Configuration/refetchCooldown`` of the last one, so tokens with
///   random `kid`s cannot make Latchkey hammer the provider.
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
        /// No new fetch starts within this time of the previous attempt, whatever tokens arrive.
        public var refetchCooldown: Duration = .seconds(60)
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
    }

    /// Where keys are fetched from; `nil` for a cache that only ever serves preloaded keys.
    public let url: String?
    public let configuration: Configuration
    private let transport: (any HTTPTransport)?
    private let timeSource: TimeSource
    private let logger: Logger?
    private let state = Mutex(State())

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
    }

    /// A cache that never fetches and serves `keys` forever, for offline use.
    public init(offline keys: VerificationKeySet) {
        self.url = nil
        self.transport = nil
        self.configuration = .init()
        self.timeSource = .system
        self.logger = nil
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
            return keys[keyID] ?? cached
        }
        let keys: VerificationKeySet
        do {
            keys = try await refresh(respectingCooldown: true)
        } catch where error.code == .keysUnavailable && !cachedKeys.isEmpty {
            throw unknownKeyID(keyID, known: cachedKeys.keyIDs)
        }
        guard let key = keys[keyID] else { throw unknownKeyID(keyID, known: keys.keyIDs) }
        return key
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
            state.lastAttempt = now
            state.fetches += 1
            let task = Task { try await self.fetch(url: url, transport: transport) }
            state.inflight = task
            return .join(task)
        }
        switch plan {
        case .cached(let keys, let error):
            if let error { throw error }
            return keys
        case .join(let task):
            do {
                return try await task.value
            } catch let error as LatchkeyError {
                throw error
            } catch {
                throw LatchkeyError(.keysUnavailable, "fetching keys was interrupted")
            }
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
    var seconds: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
