import Foundation
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Stops a client at one step of a refresh, as if the process were killed there.
struct StoppingTransport: LatchkeyTransport {
    enum Step: String, CaseIterable, Sendable {
        case beforeSending, afterServerCommit, beforeLocalSave
    }

    let step: Step
    let server: FakeServer
    let store: any TokenStore
    let markedBeforeSending = SeenTokens()

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        guard request.url?.path == "/v1/token" else { return try await server.send(request) }
        let stored = try store.load()
        markedBeforeSending.append(stored?.refreshToken ?? "", visible: stored?.pendingRefresh?.owner)
        switch step {
        case .beforeSending: throw CancellationError()
        case .afterServerCommit:
            await server.set(faults: [.commitThenFail(CancellationError())])
            return try await server.send(request)
        case .beforeLocalSave: return try await server.send(request)
        }
    }
}

@Suite("Shared stores: relaunch after a kill, two clients, files")
struct SharedStoreTests {
    // 3. Killed mid-refresh: the next launch re-presents the same token and keeps the session.
    @Test(arguments: StoppingTransport.Step.allCases)
    func nextLaunchAfterAKillKeepsTheSession(_ step: StoppingTransport.Step) async throws {
        let fixture = Fixture()
        let directory = temporaryDirectory()
        let file = FileTokenStore(url: directory.appendingPathComponent("session.json"))
        _ = try await fixture.expiredSession(store: file)
        let spent = try #require(try file.load()?.refreshToken)

        let flaky = FlakyStore(file)
        if step == .beforeLocalSave { flaky.failSaves(1000) }
        let stopping = StoppingTransport(step: step, server: fixture.server, store: file)
        let killed = fixture.client(store: flaky, transport: stopping)
        _ = try? await killed.validAccessToken()
        // The attempt was on disk before the request left.
        #expect(stopping.markedBeforeSending.all.map(\.saved) == [spent])
        #expect(stopping.markedBeforeSending.all.first?.visible != nil)
        #expect(try file.load()?.refreshToken == spent)

        fixture.clock.advance(60)  // the next launch, a minute later
        let relaunched = fixture.client(store: file)
        let events = EventLog(relaunched.events)
        let token = try await relaunched.validAccessToken()
        let (body, response) = try await relaunched.data(for: fixture.resource())
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: body, as: UTF8.self) == "hello user-1")
        #expect(try file.load()?.accessToken == token)
        #expect(try file.load()?.pendingRefresh == nil)
        #expect(await fixture.server.reuseDetections == 0)
        #expect(await fixture.server.presented[spent] == (step == .beforeSending ? 1 : 2))
        #expect(try await events.wait { !$0.isEmpty }.first == .signedIn)
    }

    @Test func withoutServerRecoveryAKillAfterCommitEndsTheSession() async throws {
        // The reason for `session.unusedSuccessorRecovery`: without it the re-presented token counts as reuse.
        let fixture = Fixture()
        await fixture.server.set(recoversUnusedSuccessor: false)
        let store = InMemoryTokenStore()
        _ = try await fixture.expiredSession(store: store)
        let stopping = StoppingTransport(step: .afterServerCommit, server: fixture.server, store: store)
        _ = try? await fixture.client(store: store, transport: stopping).validAccessToken()
        fixture.clock.advance(60)
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await fixture.client(store: store).validAccessToken() }
        #expect(await fixture.server.reuseDetections == 1)
    }

    // 7. Two clients sharing one file never send the same refresh token.
    @Test func twoClientsSharingAFileSpendEachTokenOnce() async throws {
        let (fixture, app, extensionClient) = try await clientsSharingAFile()
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<40 {
                let client = index.isMultiple(of: 2) ? app : extensionClient
                group.addTask { try await client.validAccessToken() }
            }
            try await poll(until: "one refresh request at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
            try await Task.sleep(nanoseconds: 200_000_000)  // the other client is waiting on the recorded attempt
            gate.open()
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(tokens.count == 1)
        #expect(await fixture.server.refreshRequests == 1)
        #expect(await fixture.server.presented.values.allSatisfy { $0 == 1 })
        #expect(app.currentAccessToken == extensionClient.currentAccessToken)

        // And again, with no gate: whoever comes second adopts the first one's pair.
        await fixture.server.set(beforeRefreshAnswer: nil)
        fixture.clock.advance(901)
        async let first = app.validAccessToken()
        async let second = extensionClient.validAccessToken()
        #expect(try await first == second)
        #expect(await fixture.server.refreshRequests == 2)
        #expect(await fixture.server.reuseDetections == 0)
    }

    @Test func signOutInOneClientEndsTheOthersSessionAtItsNextRefresh() async throws {
        let (fixture, app, other) = try await clientsSharingAFile()
        let events = EventLog(other.events)
        await app.signOut()
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await other.validAccessToken() }
        #expect(try await events.wait { $0.contains(.sessionEnded(.signedOut)) }.contains(.sessionEnded(.signedOut)))
        // One refresh, the sign-out's own (its access token had expired, so it got one the logout was taken with); none by the other client.
        #expect(await fixture.server.refreshRequests == 1)
        #expect(await fixture.server.logouts == 1)
    }

    // FileTokenStore itself.
    @Test func fileStoreIsPrivateAtomicAndComparesBeforeSwapping() throws {
        let url = temporaryDirectory().appendingPathComponent("session.json")
        let store = FileTokenStore(url: url)
        #expect(try store.load() == nil)
        let session = StoredSession(
            tokens: TokenPairResponse(accessToken: "a", expiresIn: 900, refreshToken: "r"), userID: "u", receivedAt: Date(timeIntervalSince1970: 1.5),
            refreshAhead: 120)
        #expect(try store.compareAndSwap(expected: nil, new: session))
        #expect(try store.load() == session)
        let mode = try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try !store.compareAndSwap(expected: nil, new: nil))
        var next = session
        next.refreshToken = "r2"
        #expect(try store.compareAndSwap(expected: session, new: next))
        #expect(try FileTokenStore(url: url).load() == next)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: url.deletingLastPathComponent().path).filter { $0.contains(".tmp-") }
        #expect(leftovers.isEmpty)
        #expect(try store.compareAndSwap(expected: next, new: nil))
        #expect(try store.load() == nil)
    }

    @Test("a file that does not decode reads as no session, as a damaged Keychain item does: the next sign-in overwrites it")
    func damagedFileIsReplacedBySignIn() async throws {
        let fixture = Fixture()
        let url = temporaryDirectory().appendingPathComponent("session.json")
        try Data("{not json".utf8).write(to: url)
        let store = FileTokenStore(url: url)
        #expect(try store.load() == nil)
        let client = fixture.client(store: store)
        #expect(await client.state == .signedOut)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        #expect(try store.load()?.accessToken == client.currentAccessToken)
        // The next launch reads the session.
        #expect(await fixture.client(store: FileTokenStore(url: url)).state.user?.id == "user-1")
    }

    @Test("sign-out deletes a file that does not decode")
    func damagedFileIsDeletedBySignOut() async throws {
        let url = temporaryDirectory().appendingPathComponent("session.json")
        try Data([0xFF, 0x00, 0x7B]).write(to: url)
        let client = Fixture().client(store: FileTokenStore(url: url))
        await client.signOut()
        #expect(!FileManager.default.fileExists(atPath: url.path))
        #expect(await client.state == .signedOut)
    }

    @Test("a file that cannot be read (not a decoding failure) still throws: that is never a sign-out")
    func unreadableFileIsAnError() throws {
        let directory = temporaryDirectory().appendingPathComponent("session.json")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        #expect(throws: (any Error).self) { try FileTokenStore(url: directory).load() }
    }

    // Issue 47: a refresh claimed by another client (a suspended extension, say) is not waited for while the token in
    // hand still works.
    @Test("another client's refresh claim: validAccessToken() and data(for:) use the token in hand while it works")
    func anotherClientsClaimDoesNotStallAValidToken() async throws {
        let (fixture, holder, other) = try await clientsSharingAFile(expired: false)
        let token = try #require(other.currentAccessToken)
        fixture.clock.advance(900 - 60)  // refresh due (two minutes ahead), a minute left
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        defer { gate.open() }
        let holding = Task { try await holder.validAccessToken() }
        try await poll(until: "the holder's refresh at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        let answered = Task { try await other.validAccessToken() }
        let finished = Finished(answered)
        try await poll(until: "the other client to answer without waiting for the claim", within: .seconds(5)) { finished.isFinished }
        #expect(try await answered.value == token)
        let (body, _) = try await other.data(for: fixture.resource())
        #expect(String(decoding: body, as: UTF8.self) == "hello user-1")
        #expect(await fixture.server.refreshRequests == 1)
        gate.open()
        let renewed = try await holding.value
        #expect(renewed != token)
        #expect(await fixture.server.reuseDetections == 0)
    }

    @Test("cancelling a caller that waits for another client's claim ends its wait at once with CancellationError")
    func waitingForAClaimHonoursCancellation() async throws {
        let (fixture, holder, other) = try await clientsSharingAFile(expired: true)
        let gate = Gate()
        await fixture.server.set(beforeRefreshAnswer: { await gate.wait() })
        defer { gate.open() }
        let holding = Task { try await holder.validAccessToken() }
        try await poll(until: "the holder's refresh at the server", within: .seconds(30)) { await fixture.server.refreshRequests == 1 }
        // The other client's token has expired: it waits for the claim, until its caller gives up.
        let waiting = Task { try await other.validAccessToken() }
        let request = fixture.resource()
        let fetching = Task { try await other.data(for: request) }
        try await Task.sleep(nanoseconds: 200_000_000)
        waiting.cancel()
        fetching.cancel()
        let (waited, fetched) = (Finished(waiting), Finished(fetching))
        try await poll(until: "the cancelled callers to return", within: .seconds(5)) { waited.isFinished && fetched.isFinished }
        await #expect(throws: CancellationError.self) { try await waiting.value }
        await #expect(throws: CancellationError.self) { try await fetching.value }
        gate.open()
        _ = try await holding.value
        // After the claim is answered, the other client adopts the holder's pair.
        #expect(try await other.validAccessToken() == holder.currentAccessToken)
        #expect(await fixture.server.refreshRequests == 1)
    }

    /// Two clients, each with its own `FileTokenStore` on one file (two processes' worth), signed in and expired.
    /// `expired: false`: signed in just now instead.
    private func clientsSharingAFile(expired: Bool = true) async throws -> (Fixture, LatchkeyClient, LatchkeyClient) {
        let fixture = Fixture()
        let url = temporaryDirectory().appendingPathComponent("session.json")
        let first = fixture.client(store: FileTokenStore(url: url))
        try await first.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        if expired { fixture.clock.advance(901) }
        return (fixture, first, fixture.client(store: FileTokenStore(url: url)))
    }

    private func temporaryDirectory() -> URL { URL(fileURLWithPath: ScratchDirectory.make("latchkey-client")) }
}
