import Foundation
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(UIKit)
    import UIKit
#endif
#if canImport(AppKit)
    import AppKit
#endif

/// Collects a stream's elements as they come.
final class Collected<Element: Sendable>: @unchecked Sendable {
    // @unchecked: `elements` is only used while holding `lock`.
    private let lock = NSLock()
    private var elements: [Element] = []
    private var task: Task<Void, Never>?

    init(_ stream: AsyncStream<Element>) {
        task = Task { [self] in
            for await element in stream { lock.withLock { elements.append(element) } }
        }
    }

    var all: [Element] { lock.withLock { elements } }

    func wait(until predicate: @escaping ([Element]) -> Bool) async throws -> [Element] {
        try await poll(until: "the stream to match (seen: \(all))", within: .seconds(30)) { predicate(self.all) }
        return all
    }

    func stop() { task?.cancel() }
}

/// Sends through `inner`, except that requests `held` matches wait for `gate`, and requests `failing` matches fail.
struct HoldingTransport: LatchkeyTransport {
    let inner: any LatchkeyTransport
    let gate = Gate()
    var held: @Sendable (URLRequest) -> Bool = { _ in false }
    var failing: @Sendable (URLRequest) -> Bool = { _ in false }

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        if failing(request) { throw URLError(.notConnectedToInternet) }
        if held(request) { await gate.wait() }
        return try await inner.send(request)
    }
}

/// Sends through `inner`, except that the first request to the app's backend (any host but the server's) answers 401
/// blaming the token.
struct RejectingOnce: LatchkeyTransport {
    let inner: any LatchkeyTransport
    private let rejected = Finished.Flag()

    init(inner: any LatchkeyTransport) { self.inner = inner }

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        if request.url?.host == "api.example.com", rejected.set() {
            return FakeServer.answer(401, Data(), ["WWW-Authenticate": #"Bearer error="invalid_token""#])
        }
        return try await inner.send(request)
    }
}

@Suite("Client: the session's state, for every subscriber")
struct SessionStateTests {
    @Test("state and states(): signed out, then signed in with the sign-in's user, then signed out; each subscriber gets the present first")
    func statesFollowTheSession() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        #expect(await client.state == .signedOut)
        let first = Collected(client.states())
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        #expect(await client.state.user?.id == "user-1")
        #expect(await client.currentUser?.id == "user-1")
        let second = Collected(client.states())
        await client.signOut()
        let seen = try await first.wait { $0.count >= 3 }
        #expect(seen.count == 3 && seen[0] == .signedOut && seen[1].user?.id == "user-1" && seen[2] == .signedOut)
        let later = try await second.wait { $0.count >= 2 }
        #expect(later.count == 2 && later[0].user?.id == "user-1" && later[1] == .signedOut, "the second subscriber starts with the present")
        #expect(await client.currentUser == nil)
    }

    @Test("events: every subscriber gets every event, starting with the one that describes the present")
    func eventsPerSubscriber() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        let one = EventLog(client.events)
        let two = EventLog(client.events)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        #expect(try await one.wait { $0.count >= 2 } == [.sessionEnded(.noStoredSession), .signedIn])
        #expect(try await two.wait { $0.count >= 2 } == [.sessionEnded(.noStoredSession), .signedIn])
        let late = EventLog(client.events)
        #expect(try await late.wait { !$0.isEmpty } == [.signedIn])
    }

    @Test("a locked store is .unknown, never .signedOut; once readable, the stored session's user")
    func lockedStoreIsUnknown() async throws {
        let fixture = Fixture()
        let store = FlakyStore()
        try await fixture.client(store: store).signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        store.failLoads(true)
        let relaunched = fixture.client(store: store)
        #expect(await relaunched.state == .unknown)
        store.failLoads(false)
        await relaunched.refreshIfNeeded()
        #expect(await relaunched.state.user?.id == "user-1")
    }

    @Test("user() keeps the server's profile as currentUser, in the store and in the state; a session stored without a user asks for it")
    func userIsRefreshedFromTheServer() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = fixture.client(store: store)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        let states = Collected(client.states())
        await fixture.server.set(givenName: "Ada", of: "user-1")
        #expect(try await client.user().givenName == "Ada")
        #expect(await client.currentUser?.givenName == "Ada")
        #expect(try store.load()?.user?.givenName == "Ada")
        #expect(try await states.wait { $0.count >= 2 }.last?.user?.givenName == "Ada")

        // A session stored by an earlier version: tokens and a user id, no profile.
        var legacy = try #require(try store.load())
        legacy.user = nil
        #expect(try store.compareAndSwap(expected: try store.load(), new: legacy))
        let relaunched = fixture.client(store: store)
        try await poll(until: "the relaunched client to describe its user", within: .seconds(30)) {
            await relaunched.state.user?.givenName == "Ada"
        }
        #expect(try store.load()?.user?.givenName == "Ada")
    }

    // Issue 47: a refresh in flight must not write back the profile it read before sending.
    @Test("a profile fetched while a refresh is in flight survives the refresh, in memory and in the store")
    func profileFetchedDuringARefreshWins() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        // The app's backend refuses the first request (its clock runs ahead, say): the client refreshes after that 401.
        let transport = RejectingOnce(inner: fixture.server)
        let client = fixture.client(store: store, transport: transport)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        defer { gate.open() }
        let request = fixture.resource()
        let fetching = Task { try await client.data(for: request) }
        try await poll(until: "the refresh at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        await fixture.server.set(givenName: "Ada", of: "user-1")
        #expect(try await client.user().givenName == "Ada")  // the token in hand still works at the server
        gate.open()
        _ = try await fetching.value
        #expect(await client.currentUser?.givenName == "Ada")
        #expect(await client.state.user?.givenName == "Ada")
        #expect(try store.load()?.user?.givenName == "Ada")
        #expect(try store.load()?.accessToken == client.currentAccessToken)
    }

    @Test("a profile another client stored while this one's refresh was in flight survives that refresh")
    func profileStoredByAnotherClientDuringARefreshWins() async throws {
        let fixture = Fixture()
        let url = URL(fileURLWithPath: ScratchDirectory.make("latchkey-client")).appendingPathComponent("session.json")
        let refreshing = fixture.client(store: FileTokenStore(url: url))
        try await refreshing.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        let describing = fixture.client(store: FileTokenStore(url: url))
        fixture.clock.advance(900 - 60)  // refresh due, the token still good for a minute
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        defer { gate.open() }
        let refresh = Task { await refreshing.refreshIfNeeded() }
        try await poll(until: "the refresh at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        await fixture.server.set(givenName: "Ada", of: "user-1")
        let described = Task { try await describing.user() }
        let finished = Finished(described)
        try await poll(until: "the other client's user() to answer", within: .seconds(5)) { finished.isFinished }
        #expect(try await described.value.givenName == "Ada")
        #expect(try FileTokenStore(url: url).load()?.user?.givenName == "Ada")
        gate.open()
        await refresh.value
        #expect(try FileTokenStore(url: url).load()?.user?.givenName == "Ada")
        #expect(await refreshing.currentUser?.givenName == "Ada")
        #expect(try FileTokenStore(url: url).load()?.accessToken == refreshing.currentAccessToken)
    }

    // Issue 47: `.unknown` is only "the store cannot be read".
    @Test("a session stored without its profile is signed in, offline too, and never .unknown")
    func sessionWithoutProfileIsSignedIn() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        try await fixture.client(store: store).signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        var legacy = try #require(try store.load())
        legacy.user = nil
        #expect(try store.compareAndSwap(expected: try store.load(), new: legacy))
        let offline = HoldingTransport(inner: fixture.server, failing: { _ in true })
        let relaunched = fixture.client(store: store, transport: offline)
        let states = Collected(relaunched.states())
        await relaunched.refreshIfNeeded()  // asks for the profile, and gets no answer
        #expect(await relaunched.state == .signedInWithoutProfile(userID: "user-1"))
        let state = await relaunched.state
        #expect(state.isSignedIn && state.user == nil)
        #expect(!states.all.contains(.unknown), "\(states.all)")
        #expect(try await relaunched.validAccessToken() == legacy.accessToken)
    }

    @Test("LatchkeySession follows the client on the main actor")
    func observableModel() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        let session = await LatchkeySession(client: client)
        try await poll(until: "the model to read the store", within: .seconds(30)) { await session.state == .signedOut }
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        try await poll(until: "the model to see the sign-in", within: .seconds(30)) { await session.state.user?.id == "user-1" }
    }

    @Test("signOut() returns once the local session is gone, while the server's logout is still under way")
    func signOutDoesNotWaitForTheServer() async throws {
        let fixture = Fixture()
        let transport = HoldingTransport(inner: fixture.server, held: { $0.url?.path == "/v1/logout" })
        let store = InMemoryTokenStore()
        let client = fixture.client(store: store, transport: transport)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        await client.signOut()
        #expect(await client.state == .signedOut)
        #expect(try store.load() == nil)
        #expect(await fixture.server.logouts == 0)
        transport.gate.open()
        await client.background.finish()
        #expect(await fixture.server.logouts == 1)
    }

    @Test("deleteAccount without a network: the local session ends, and the error says the server did not confirm")
    func deleteAccountOffline() async throws {
        let fixture = Fixture()
        let transport = HoldingTransport(inner: fixture.server, failing: { $0.httpMethod == "DELETE" })
        let store = InMemoryTokenStore()
        let client = fixture.client(store: store, transport: transport)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        await #expect(throws: URLError.self) { try await client.deleteAccount() }
        #expect(await client.state == .signedOut)
        #expect(try store.load() == nil)
        #expect(client.currentAccessToken == nil)
    }

    /// The notifications' names as Apple's SDKs spell them, written here independently of `AppLifecycleObserver`, so
    /// a misspelt name there fails the test (a name is only a string: nothing else would notice). On Linux these are
    /// the values of the SDKs' constants; on Apple platforms the test compares them with the constants themselves.
    static let applesNotificationNames: [String] = [
        // UIKit: UIApplication.didBecomeActiveNotification, UIKIT_EXTERN NSNotificationName const UIApplicationDidBecomeActiveNotification.
        "UIApplicationDidBecomeActiveNotification",
        // UIKit: UIApplication.protectedDataDidBecomeAvailableNotification, UIKIT_EXTERN NSNotificationName const
        // UIApplicationProtectedDataDidBecomeAvailable (no "Notification" suffix).
        "UIApplicationProtectedDataDidBecomeAvailable",
        // AppKit: NSApplication.didBecomeActiveNotification, APPKIT_EXTERN NSNotificationName NSApplicationDidBecomeActiveNotification.
        "NSApplicationDidBecomeActiveNotification",
    ]

    @Test("posting each of Apple's notifications, spelt as the SDKs spell them, refreshes the session; no other name is observed")
    func lifecycleNotifications() async throws {
        #if canImport(UIKit)
            #expect(UIApplication.didBecomeActiveNotification.rawValue == Self.applesNotificationNames[0])
            #expect(UIApplication.protectedDataDidBecomeAvailableNotification.rawValue == Self.applesNotificationNames[1])
        #endif
        #if canImport(AppKit)
            #expect(NSApplication.didBecomeActiveNotification.rawValue == Self.applesNotificationNames[2])
        #endif
        #expect(Set(AppLifecycleObserver.notifications.map(\.rawValue)) == Set(Self.applesNotificationNames))
        for name in Self.applesNotificationNames {
            let fixture = Fixture()
            let center = NotificationCenter()
            var policy = RefreshPolicy()
            policy.refreshesInBackground = false
            let client = LatchkeyClient(
                baseURL: fixture.baseURL, tokenStore: InMemoryTokenStore(), transport: fixture.server, clock: fixture.clock, policy: policy,
                lifecycle: center)
            try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
            fixture.clock.advance(901)
            center.post(name: Notification.Name(name), object: nil)
            try await poll(until: "\(name) to refresh the session", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        }
        // The public flag: observed by default, not when opted out.
        let url = URL(string: "https://auth.example.com")!
        #expect(LatchkeyClient(baseURL: url, tokenStore: InMemoryTokenStore()).lifecycle != nil)
        #expect(LatchkeyClient(baseURL: url, tokenStore: InMemoryTokenStore(), observesAppLifecycle: false).lifecycle == nil)
    }
}
