import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import ServiceLifecycle
import Synchronization
import Testing

@Suite("JWKS cache")
struct JWKSCacheTests {
    static let url = "https://appleid.apple.com/auth/keys"

    /// A transport serving whichever key set is current, counting fetches.
    final class KeyServer: Sendable {
        let document = Mutex(jwks(Fixtures.appleKey))
        let failing = Mutex(false)
        let cacheControl: String?
        init(cacheControl: String? = "public, max-age=3600") { self.cacheControl = cacheControl }

        func transport(delay: Duration = .zero) -> InMemoryTransport {
            InMemoryTransport { _ throws(LatchkeyError) in
                if delay > .zero { try? await Task.sleep(for: delay) }
                if self.failing.withLock({ $0 }) { throw LatchkeyError(.providerUnavailable, "connection refused") }
                var headers: [String: String] = [:]
                if let cacheControl = self.cacheControl { headers["Cache-Control"] = cacheControl }
                return OutboundResponse(status: 200, headers: headers, body: Array(self.document.withLock { $0 }.utf8))
            }
        }
    }

    @Test("keys are fetched once and served from cache until max-age passes")
    func caching() async throws {
        let server = KeyServer(cacheControl: "max-age=600")
        let transport = server.transport()
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: clock.source)
        _ = try await cache.key(forKeyID: "W6WcOKB")
        _ = try await cache.key(forKeyID: "W6WcOKB")
        #expect(transport.count == 1)
        #expect(cache.expiresAt == Fixtures.now.addingTimeInterval(600))
        clock.advance(601)
        _ = try await cache.key(forKeyID: "W6WcOKB")
        #expect(transport.count == 2)
    }

    @Test("max-age is clamped to the configured bounds", arguments: [("max-age=5", 300.0), ("max-age=9999999", 86_400.0), (nil, 3600.0), ("no-cache", 3600.0)])
    func clamping(header: String?, expected: TimeInterval) async throws {
        let cache = JWKSCache(url: Self.url, transport: KeyServer(cacheControl: header).transport(), timeSource: .fixed(Fixtures.now))
        try await cache.refresh()
        #expect(cache.expiresAt == Fixtures.now.addingTimeInterval(expected))
    }

    @Test("a thousand concurrent verifications with a new kid cause exactly one fetch")
    func singleFlight() async throws {
        let server = KeyServer()
        let transport = server.transport(delay: .milliseconds(50))
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: clock.source)
        try await cache.refresh()
        clock.advance(61)  // past the refetch cooldown, well within max-age
        let rotated = Fixtures.appleKey.withKeyID("NEWKID0001")
        server.document.withLock { $0 = jwks(Fixtures.appleKey, rotated) }
        let found = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<1000 { group.addTask { try await cache.key(forKeyID: "NEWKID0001").keyID } }
            return try await group.reduce(into: 0) { count, _ in count += 1 }
        }
        #expect(found == 1000)
        #expect(transport.count == 2)
    }

    @Test("concurrent first look-ups on a cold cache all find the key with one fetch, even with a refetch budget of one")
    func coldSingleFlight() async throws {
        var configuration = JWKSCache.Configuration()
        configuration.unknownKeyRefetchBurst = 1
        // Each round a new cache. Under server load, a caller that had spent the budget and not yet started its fetch
        // once let the callers beside it find neither a fetch under way nor budget: 401 unknown_key_id.
        for _ in 0..<20 {
            let transport = KeyServer().transport(delay: .milliseconds(2))
            let cache = JWKSCache(url: Self.url, transport: transport, configuration: configuration, timeSource: .fixed(Fixtures.now))
            let found = await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<200 { group.addTask { (try? await cache.key(forKeyID: "W6WcOKB")) != nil } }
                return await group.reduce(into: 0) { count, ok in count += ok ? 1 : 0 }
            }
            #expect(found == 200)
            #expect(transport.count == 1)
        }
    }

    @Test("a key rotated in right after a fetch is picked up by the first token that names it")
    func rotationRightAfterFetch() async throws {
        let server = KeyServer()
        let transport = server.transport()
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: clock.source)
        try await cache.refresh()
        server.document.withLock { $0 = jwks(Fixtures.appleKey, Fixtures.appleKey.withKeyID("ROTATED001")) }
        clock.advance(1)  // well within the stale-refresh cooldown
        #expect(try await cache.key(forKeyID: "ROTATED001").keyID == "ROTATED001")
        #expect(transport.count == 2)
    }

    @Test("500 tokens with random kids cause a bounded number of fetches")
    func randomKeyIDFlood() async throws {
        let transport = KeyServer().transport()
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: clock.source)
        try await cache.refresh()
        for index in 0..<500 {
            await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "random-\(index)") }
        }
        // The first fetch, then the burst; the clock stood still, so the bucket never refilled.
        let burst = JWKSCache.Configuration().unknownKeyRefetchBurst
        #expect(transport.count == 1 + burst)
        // One more per refill interval: a genuine rotation during a flood waits at most that long.
        clock.advance(TimeInterval(JWKSCache.Configuration().unknownKeyRefetchInterval.components.seconds))
        await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "random-again") }
        await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "random-and-again") }
        #expect(transport.count == 2 + burst)
    }

    @Test("a flood that spends every refill still fetches the current key set, so a rotation shows within one refill interval")
    func floodDoesNotHideRotation() async throws {
        let server = KeyServer()
        let transport = server.transport()
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: clock.source)
        try await cache.refresh()
        for index in 0..<10 {
            await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "random-\(index)") }
        }
        server.document.withLock { $0 = jwks(Fixtures.appleKey, Fixtures.appleKey.withKeyID("ROTATED002")) }
        // The attacker takes the refilled token first; its fetch brings the rotated key along.
        clock.advance(TimeInterval(JWKSCache.Configuration().unknownKeyRefetchInterval.components.seconds))
        await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "random-after-rotation") }
        let fetches = transport.count
        #expect(try await cache.key(forKeyID: "ROTATED002").keyID == "ROTATED002")
        #expect(transport.count == fetches)
    }

    @Test("a kid a fresh key set did not hold is refused without fetching until its negative entry expires")
    func negativeCache() async throws {
        let transport = KeyServer().transport()
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: clock.source)
        for _ in 0..<10 {
            await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "missing") }
        }
        #expect(transport.count == 1)
        clock.advance(TimeInterval(JWKSCache.Configuration().unknownKeyNegativeTTL.components.seconds + 1))
        await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await cache.key(forKeyID: "missing") }
        #expect(transport.count == 2)
    }

    @Test("stale keys keep serving when the provider is unreachable")
    func staleWhileUnreachable() async throws {
        let server = KeyServer(cacheControl: "max-age=300")
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: server.transport(), timeSource: clock.source)
        _ = try await cache.key(forKeyID: "W6WcOKB")
        server.failing.withLock { $0 = true }
        clock.advance(3600)
        #expect(try await cache.key(forKeyID: "W6WcOKB").keyID == "W6WcOKB")
    }

    @Test("a stale key the provider has withdrawn is refused once a fetch shows it gone")
    func withdrawnKey() async throws {
        let server = KeyServer(cacheControl: "max-age=300")
        let clock = MutableClock()
        let cache = JWKSCache(url: Self.url, transport: server.transport(), timeSource: clock.source)
        _ = try await cache.key(forKeyID: "W6WcOKB")
        server.document.withLock { $0 = jwks(Fixtures.appleKey.withKeyID("REPLACED01")) }
        clock.advance(3600)
        await #expect(throws: LatchkeyError.self) { try await cache.key(forKeyID: "W6WcOKB") }
        #expect(try await cache.key(forKeyID: "REPLACED01").keyID == "REPLACED01")
    }

    @Test("with no keys and no provider, the error says keys are unavailable")
    func unavailable() async throws {
        let server = KeyServer()
        server.failing.withLock { $0 = true }
        let cache = JWKSCache(url: Self.url, transport: server.transport(), timeSource: .fixed(Fixtures.now))
        await #expect(throws: LatchkeyError(.keysUnavailable, "")) { _ = try await cache.key(forKeyID: "W6WcOKB") }
        // Within the cooldown the same error comes back without another fetch.
        await #expect(throws: LatchkeyError(.keysUnavailable, "")) { _ = try await cache.key(forKeyID: "W6WcOKB") }
    }

    @Test("non-200 answers and bodies that are not a JWKS are refused", arguments: [(500, "oops"), (200, "<html>"), (404, "{}")])
    func badAnswers(status: Int, body: String) async {
        let cache = JWKSCache(url: Self.url, transport: InMemoryTransport.answering(status, body), timeSource: .fixed(Fixtures.now))
        await #expect(throws: LatchkeyError(.keysUnavailable, "")) { try await cache.refresh() }
    }

    @Test("preloaded keys serve without any fetch; offline caches never fetch")
    func preload() async throws {
        let transport = KeyServer().transport()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: .fixed(Fixtures.now))
        try await cache.preload(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        _ = try await cache.key(forKeyID: "W6WcOKB")
        #expect(transport.count == 0)

        let offline = JWKSCache(offline: try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8)))
        _ = try await offline.key(forKeyID: "W6WcOKB")
        await #expect(throws: LatchkeyError(.unknownKeyID, "")) { _ = try await offline.key(forKeyID: "other") }
    }

    @Test("the refresh service refreshes caches that are due and stops on shutdown")
    func refreshService() async throws {
        let transport = KeyServer().transport()
        let cache = JWKSCache(url: Self.url, transport: transport, timeSource: .fixed(Fixtures.now))
        let service = JWKSRefreshService(caches: [cache], checkInterval: .milliseconds(20))
        let group = ServiceGroup(services: [service], logger: .init(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await poll(until: "the refresh service's first key fetch", within: .seconds(60), every: .milliseconds(5)) { transport.count > 0 }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(!cache.cachedKeys.isEmpty)
    }

    /// A key server that answers only once `release()` is called, ignoring cancellation (a provider that does not answer).
    final class HangingKeyServer: Sendable {
        private final class Gate: Sendable { let open = Mutex(false) }
        private let gate = Gate()
        let transport: InMemoryTransport

        init() {
            let gate = gate
            transport = InMemoryTransport { _ throws(LatchkeyError) in
                while !gate.open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(5)) }
                return OutboundResponse(status: 200, body: Array(jwks(Fixtures.appleKey).utf8))
            }
        }

        func release() { gate.open.withLock { $0 = true } }

        func waitForFetch() async throws {
            try await poll(until: "a key fetch at the hanging provider", within: .seconds(60), every: .milliseconds(5)) { transport.count > 0 }
        }
    }

    final class Ended: Sendable { let value = Mutex(false) }

    /// Whether `task` has ended, as a flag to poll (awaiting a task's value would ignore cancellation and wait past any
    /// bound). The provider hangs until the test releases it, so without the fix the task never ends; the 60 s bound at
    /// the call sites only has to outlast the whole suite's contention for the two cores.
    static func watch<T: Sendable>(_ task: Task<T, Never>) -> Ended {
        let ended = Ended()
        Task {
            _ = await task.value
            ended.value.withLock { $0 = true }
        }
        return ended
    }

    @Test("a graceful shutdown ends the refresh service at once while its key fetch hangs; the fetch runs on for its other callers")
    func refreshServiceShutdownWhileFetchHangs() async throws {
        let provider = HangingKeyServer()
        defer { provider.release() }
        let cache = JWKSCache(url: Self.url, transport: provider.transport, timeSource: .fixed(Fixtures.now))
        let group = ServiceGroup(services: [JWKSRefreshService(caches: [cache])], logger: .init(label: "test"))
        let running = Task { try? await group.run() }
        try await provider.waitForFetch()
        await group.triggerGracefulShutdown()
        let ended = Self.watch(running)
        try await poll(until: "the refresh service to end after a graceful shutdown while the provider hangs", within: .seconds(60)) {
            ended.value.withLock { $0 }
        }
        provider.release()
        try await cache.refresh()
        #expect(provider.transport.count == 1)
        #expect(!cache.cachedKeys.isEmpty)
    }

    @Test("a cancelled caller stops waiting for a shared key fetch with keys_unavailable; the callers still waiting get its keys")
    func cancelledCallerStopsWaiting() async throws {
        let provider = HangingKeyServer()
        defer { provider.release() }
        let cache = JWKSCache(url: Self.url, transport: provider.transport, timeSource: .fixed(Fixtures.now))
        let cancelled = Task { () -> LatchkeyError? in
            do {
                _ = try await cache.key(forKeyID: "W6WcOKB")
                return nil
            } catch { return error as? LatchkeyError }
        }
        try await provider.waitForFetch()
        let waiting = Task { try? await cache.key(forKeyID: "W6WcOKB") }
        cancelled.cancel()
        let ended = Self.watch(cancelled)
        try await poll(until: "the cancelled caller to stop waiting for the provider", within: .seconds(60)) { ended.value.withLock { $0 } }
        provider.release()
        #expect(await cancelled.value?.code == .keysUnavailable)
        #expect(await waiting.value != nil)
        #expect(provider.transport.count == 1)
    }

    @Test("an identity token verifies end to end through the cache")
    func endToEnd() async throws {
        let cache = JWKSCache(url: Self.url, transport: KeyServer().transport(), timeSource: .fixed(Fixtures.now))
        let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: [Fixtures.bundleID]), keys: cache, timeSource: .fixed(Fixtures.now))
        let identity = try await verifier.verify(Fixtures.appleKey.sign(claims: appleClaims()))
        #expect(identity.subject.hasPrefix("000123."))
    }
}
