import Foundation
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("Session guarantees (issue 11)")
struct SessionGuaranteeTests {
    // 1. One refresh per refresh token.
    @Test func concurrentCallersShareOneRefresh() async throws {
        let fixture = Fixture()
        let client = try await fixture.expiredSession()
        let request = fixture.resource()
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<100 {
                group.addTask {
                    if index.isMultiple(of: 2) { return try await client.validAccessToken() }
                    let (data, response) = try await client.data(for: request)
                    #expect((response as? HTTPURLResponse)?.statusCode == 200)
                    return String(decoding: data, as: UTF8.self)
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(await fixture.server.refreshRequests == 1)
        #expect(tokens.count == 2)  // one access token, one resource body
        #expect(tokens.contains(try #require(client.currentAccessToken)))
        #expect(tokens.contains("hello user-1"))
    }

    // 2. Saved before seen.
    @Test func rotatedPairIsSavedBeforeAnyCallerSeesIt() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        let client = try await fixture.expiredSession(store: store)
        let old = try #require(client.currentAccessToken)
        let seenAtSave = SeenTokens()
        store.observeSaves { saved in seenAtSave.append(saved.accessToken, visible: client.currentAccessToken) }
        let token = try await client.validAccessToken()
        #expect(token != old)
        #expect(seenAtSave.all.map(\.saved) == [token])
        #expect(seenAtSave.all.map(\.visible) == [old])
        #expect(try store.inner.load()?.accessToken == token)
    }

    // 2. A failed save keeps the pair, retries, reports, and never falls back.
    @Test func failedSaveKeepsThePairInMemoryAndRetries() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        let client = try await fixture.expiredSession(store: store)
        let events = EventLog(client.events)
        let spent = try #require(try store.inner.load()?.refreshToken)
        store.failSaves(10)
        let token = try await client.validAccessToken()
        #expect(try await events.wait { $0.contains(.storageUnavailable) }.contains(.storageUnavailable))
        // The store still holds the spent token, marked as in flight: a relaunch would re-present it.
        let onDisk = try #require(try store.inner.load())
        #expect(onDisk.refreshToken == spent && onDisk.isClaimed)
        #expect(client.currentAccessToken == token)

        store.failSaves(0)
        #expect(try await client.validAccessToken() == token)
        #expect(try store.inner.load()?.accessToken == token)
        fixture.clock.advance(901)
        let next = try await client.validAccessToken()
        #expect(next != token)
        #expect(await fixture.server.presented[spent] == 1)
        #expect(await fixture.server.reuseDetections == 0)
    }

    @Test func noRefreshWhileTheRotatedPairIsUnsaved() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        let client = try await fixture.expiredSession(store: store)
        store.failSaves(1000)
        let token = try await client.validAccessToken()
        fixture.clock.advance(901)
        await #expect(throws: LatchkeyClientError.storageUnavailable) { try await client.validAccessToken() }
        #expect(await fixture.server.refreshRequests == 1)
        #expect(client.currentAccessToken == token)
    }

    // 4. Only invalid_grant ends a session.
    static let transientFaults: [(String, FakeServer.Fault)] = [
        ("500", .answer(500, #"{"error":"server_error"}"#)),
        ("502 HTML from a proxy", .answer(502, "<html><body>Bad Gateway</body></html>", ["Content-Type": "text/html"])),
        ("503 with Retry-After", .answer(503, #"{"error":"temporarily_unavailable"}"#, ["Retry-After": "30"])),
        ("429", .answer(429, #"{"error":"rate_limited"}"#, ["Retry-After": "5"])),
        ("400 HTML from a proxy", .answer(400, "<html>Request Header Or Cookie Too Large</html>", ["Content-Type": "text/html"])),
        ("401 text", .answer(401, "Unauthorized")),
        ("400 invalid_grant as text", .answer(400, "invalid_grant")),
        ("200 HTML captive portal", .answer(200, "<html>Sign in to Wi-Fi</html>")),
        ("timeout", .fail(URLError(.timedOut))),
        ("connection lost", .fail(URLError(.networkConnectionLost))),
        ("cancelled", .fail(CancellationError())),
    ]

    @Test(arguments: transientFaults)
    func answersThatAreNotDefiniteKeepTheSession(_ name: String, _ fault: FakeServer.Fault) async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = try await fixture.expiredSession(store: store)
        let events = EventLog(client.events)
        await fixture.server.set(faults: [fault])
        await #expect(throws: LatchkeyClientError.temporarilyUnavailable, "\(name)") { try await client.validAccessToken() }
        // Backing off: callers get an error at once, without another request.
        await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
        #expect(await fixture.server.refreshRequests == 1)
        #expect(try store.load() != nil)
        #expect(client.currentAccessToken != nil)

        fixture.clock.advance(301)
        let token = try await client.validAccessToken()
        #expect(client.currentAccessToken == token)
        #expect(!events.all.contains(.sessionEnded(.revoked)) && !events.all.contains(.sessionEnded(.signedOut)))
        #expect(await fixture.server.reuseDetections == 0)
    }

    @Test func invalidGrantEndsTheSession() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = try await fixture.expiredSession(store: store)
        let events = EventLog(client.events)
        await fixture.server.revokeSessions(of: "user-1")
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await client.validAccessToken() }
        #expect(try store.load() == nil)
        #expect(client.currentAccessToken == nil)
        #expect(try await events.wait { $0.contains(.sessionEnded(.revoked)) }.contains(.sessionEnded(.revoked)))
    }

    @Test func backoffGrowsAndStaysBounded() async throws {
        let fixture = Fixture()
        let client = try await fixture.expiredSession()
        let failure = FakeServer.Fault.answer(503, #"{"error":"temporarily_unavailable"}"#)
        await fixture.server.set(faults: Array(repeating: failure, count: 12))
        for attempt in 1...12 {
            await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
            #expect(await fixture.server.refreshRequests == attempt)
            fixture.clock.advance(300)  // the longest backoff
        }
        #expect(try await client.validAccessToken() == client.currentAccessToken)
    }

    @Test func aCallerBackOnlineWaitsSecondsNotTheTimersBackoff() async throws {
        let fixture = Fixture()
        let client = try await fixture.expiredSession()
        // Minutes offline: the failures have grown the timer's backoff to its longest.
        await fixture.server.set(faults: Array(repeating: FakeServer.Fault.answer(503, #"{"error":"temporarily_unavailable"}"#), count: 10))
        for _ in 1...10 {
            await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
            fixture.clock.advance(300)
        }
        await fixture.server.set(faults: [FakeServer.Fault.answer(503, #"{"error":"temporarily_unavailable"}"#)])
        await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
        #expect(await fixture.server.refreshRequests == 11)
        // Within the caller's few seconds nothing is sent; after them the next request refreshes.
        await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
        #expect(await fixture.server.refreshRequests == 11)
        fixture.clock.advance(6)
        #expect(try await client.validAccessToken() == client.currentAccessToken)
        #expect(await fixture.server.refreshRequests == 12)
    }

    @Test func aServersRetryAfterHoldsCallersToo() async throws {
        let fixture = Fixture()
        let client = try await fixture.expiredSession()
        await fixture.server.set(faults: [FakeServer.Fault.answer(503, #"{"error":"temporarily_unavailable"}"#, ["Retry-After": "60"])])
        await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
        fixture.clock.advance(30)
        await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
        #expect(await fixture.server.refreshRequests == 1)
        fixture.clock.advance(31)
        #expect(try await client.validAccessToken() == client.currentAccessToken)
    }

    @Test func aPendingSaveThatFindsAnotherSignInHandsOutThatSessionsToken() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        let client = try await fixture.expiredSession(store: store)
        store.failSaves(10)
        let rotated = try await client.validAccessToken()  // the rotated pair stays in memory, unsaved
        // Meanwhile another process signs in as someone else.
        let other = StoredSession(
            tokens: TokenPairResponse(accessToken: "other-access", expiresIn: 900, refreshToken: "other-refresh"), userID: "user-9",
            receivedAt: fixture.clock.now, refreshAhead: 120)
        #expect(try store.inner.compareAndSwap(expected: try store.inner.load(), new: other))
        store.failSaves(0)
        let token = try await client.validAccessToken()
        #expect(token == "other-access", "handed out \(token == rotated ? "the replaced session's token" : token)")
    }

    // Issue 47: `TokenStore` is public, and a conformance may be wrong.
    @Test("a custom store whose compare-and-swap keeps answering false: sign-in returns, the store is reported, nothing recurses")
    func storeWhoseCompareAndSwapNeverSucceeds() async throws {
        let fixture = Fixture()
        let store = RefusingStore()
        let client = fixture.client(store: store)
        let events = EventLog(client.events)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        #expect(try await events.wait { $0.contains(.storageUnavailable) }.contains(.storageUnavailable))
        // The pair is kept in memory, as for a store that throws.
        #expect(try await client.validAccessToken() == client.currentAccessToken)
        fixture.clock.advance(901)
        let error = await #expect(throws: LatchkeyClientError.storageUnavailable) { try await client.validAccessToken() }
        #expect(error?.reason?.contains("compareAndSwap") == true, "\(String(describing: error))")
        #expect(await fixture.server.refreshRequests == 0)
        await client.signOut()
        #expect(client.currentAccessToken == nil)
        #expect(store.attempts < 1000)
    }

    // 5. A late refresh changes nothing.
    @Test func refreshFinishingAfterSignOutChangesNothing() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = try await fixture.expiredSession(store: store)
        let events = EventLog(client.events)
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        let pending = Task { try await client.validAccessToken() }
        try await poll(until: "one refresh request at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        // Signed out here at once; telling the server (which refreshes first: the access token has expired) waits for the gate too.
        let signingOut = Task { await client.signOut() }
        try await poll(until: "the access token to be dropped", within: .seconds(30)) { client.currentAccessToken == nil }
        gate.open()
        await signingOut.value
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await pending.value }
        #expect(try store.load() == nil)
        #expect(client.currentAccessToken == nil)
        let log = try await events.wait { $0.contains(.sessionEnded(.signedOut)) }
        #expect(!log.contains(.refreshed))
    }

    @Test func refreshFinishingAfterAnotherSignInChangesNothing() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = try await fixture.expiredSession(store: store)
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        let pending = Task { try await client.validAccessToken() }
        try await poll(until: "one refresh request at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        await fixture.server.set(beforeRefreshAnswer: nil)
        try await client.signInWithApple(identityToken: "user-2", authorizationCode: nil, rawNonce: "n")
        let second = try #require(client.currentAccessToken)
        gate.open()
        #expect(try await pending.value == second)
        #expect(client.currentAccessToken == second)
        #expect(try store.load()?.userID == "user-2")
        #expect(try store.load()?.accessToken == second)
    }

    // 6. Ahead of expiry, on foreground, and a failure never stops the next attempt.
    @Test func refreshesAheadOfExpiryAndKeepsTrying() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore(), background: true)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        let first = try #require(client.currentAccessToken)
        fixture.clock.advance(900 - 121)
        #expect(await fixture.server.refreshRequests == 0)
        fixture.clock.advance(2)  // two minutes before expiry
        try await poll(until: "a refreshed access token", within: .seconds(30)) { client.currentAccessToken != first }
        #expect(await fixture.server.refreshRequests == 1)

        let second = try #require(client.currentAccessToken)
        await fixture.server.set(faults: [.fail(URLError(.timedOut)), .answer(503, "")])
        fixture.clock.advance(900 - 119)
        try await poll(until: "a second refresh request", within: .seconds(30)) { await fixture.server.refreshRequests >= 2 || tick(fixture.clock) }
        // Time passes in small steps: the failures back off, and the attempts go on.
        try await poll(until: "a third refresh request", within: .seconds(30)) { await fixture.server.refreshRequests == 3 || tick(fixture.clock) }
        #expect(client.currentAccessToken == second)
        try await poll(until: "the third refresh's access token", within: .seconds(30)) { client.currentAccessToken != second || tick(fixture.clock) }
        #expect(await fixture.server.refreshRequests == 4)
    }

    @Test func foregroundHookRefreshesWhenDue() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        await client.refreshIfNeeded()
        #expect(await fixture.server.refreshRequests == 0)
        fixture.clock.advance(800)
        await client.refreshIfNeeded()
        #expect(await fixture.server.refreshRequests == 1)
    }

    @Test func tokenStillValidIsServedWhenTheEarlyRefreshFails() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        let token = try #require(client.currentAccessToken)
        await fixture.server.set(faults: [.fail(URLError(.notConnectedToInternet))])
        fixture.clock.advance(800)
        #expect(try await client.validAccessToken() == token)
    }

    // 8. A locked store is not a sign-out.
    @Test func lockedStoreAtLaunchIsNotASignOut() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        _ = try await fixture.expiredSession(store: store)
        let stored = try store.inner.load()
        store.failLoads(true)
        let client = fixture.client(store: store)
        let events = EventLog(client.events)
        await #expect(throws: LatchkeyClientError.storageUnavailable) { try await client.validAccessToken() }
        #expect(try store.inner.load() == stored)
        store.failLoads(false)
        let token = try await client.validAccessToken()
        #expect(client.currentAccessToken == token)
        let log = try await events.wait { $0.count >= 2 }
        #expect(log.first == .storageUnavailable)
        #expect(log.dropFirst().first == .signedIn)
        #expect(!log.contains { if case .sessionEnded = $0 { true } else { false } })
    }

    @Test func storeLockedAtRefreshTimeKeepsTheSession() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        let client = try await fixture.expiredSession(store: store)
        let stored = try store.inner.load()
        store.failLoads(true)
        await #expect(throws: LatchkeyClientError.storageUnavailable) { try await client.validAccessToken() }
        #expect(await fixture.server.refreshRequests == 0)
        #expect(try store.inner.load() == stored)
        store.failLoads(false)
        _ = try await client.validAccessToken()
        #expect(await fixture.server.refreshRequests == 1)
    }
}

/// A store whose compare-and-swap always answers false (a wrong conformance), counting the attempts.
final class RefusingStore: TokenStore, @unchecked Sendable {
    // @unchecked: `count` is only used while holding `lock`.
    private let lock = NSLock()
    private var count = 0

    var attempts: Int { lock.withLock { count } }

    func load() throws -> StoredSession? { nil }

    func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
        lock.withLock { count += 1 }
        return false
    }
}

/// What a save saw: the token saved, and the token callers could see at that moment.
final class SeenTokens: @unchecked Sendable {
    // @unchecked: `entries` is only used while holding `lock`.
    private let lock = NSLock()
    private var entries: [(saved: String, visible: String?)] = []
    func append(_ saved: String, visible: String?) { lock.withLock { entries.append((saved, visible)) } }
    var all: [(saved: String, visible: String?)] { lock.withLock { entries } }
}
