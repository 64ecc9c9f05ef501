import Foundation
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The SDK against a real `latchkey serve --dev` process on loopback (30 s access tokens, no reuse grace), signed in
/// through the browser flow, with faults injected between the client and the server, in the store, and by killing a process.
@Suite("LatchkeyClient against latchkey serve --dev", .serialized)
struct ServeEndToEndTests {
    static let clientID = "com.example.app"
    static let redirectURI = "http://127.0.0.1/callback"

    // MARK: - Faults

    /// Counts refresh requests, and can lose the answer of the next ones after the server has handled them
    /// (the app killed between the server's commit and its own save) or fail them before sending (a dropped connection).
    final class FaultyTransport: LatchkeyTransport, @unchecked Sendable {
        // @unchecked: every field is only used while holding `lock`.
        private let inner = URLSessionTransport()
        private let lock = NSLock()
        private var refreshes = 0
        private var answersToLose = 0
        private var requestsToDrop = 0
        private var refreshDelay: UInt64 = 0
        private var answerGate: Gate?
        private var held = 0

        var refreshCount: Int { lock.withLock { refreshes } }
        /// Refresh answers received from the server and held by ``holdNextRefreshAnswer()``'s gate.
        var answersHeld: Int { lock.withLock { held } }
        /// The next refresh's answer (the server has rotated by then) waits for the gate returned.
        func holdNextRefreshAnswer() -> Gate {
            let gate = Gate()
            lock.withLock { answerGate = gate }
            return gate
        }
        func loseAnswers(_ count: Int) { lock.withLock { answersToLose = count } }
        func dropRequests(_ count: Int) { lock.withLock { requestsToDrop = count } }
        /// Holds every refresh answer this long (a slow network).
        func delayRefreshes(milliseconds: UInt64) { lock.withLock { refreshDelay = milliseconds * 1_000_000 } }

        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            let isRefresh = request.url?.path == "/v1/token"
            let (drop, lose) = lock.withLock {
                guard isRefresh else { return (false, false) }
                refreshes += 1
                let drop = requestsToDrop > 0
                if drop { requestsToDrop -= 1 }
                let lose = !drop && answersToLose > 0
                if lose { answersToLose -= 1 }
                return (drop, lose)
            }
            if drop { throw URLError(.networkConnectionLost) }
            let answer = try await inner.send(request)
            let gate = lock.withLock { () -> Gate? in
                guard isRefresh, let gate = answerGate else { return nil }
                answerGate = nil
                held += 1
                return gate
            }
            await gate?.wait()
            let delay = lock.withLock { isRefresh ? refreshDelay : 0 }
            if delay > 0 { try await Task.sleep(nanoseconds: delay) }
            if lose { throw URLError(.timedOut) }
            return answer
        }
    }

    /// A running `latchkey serve --dev` with its emulator.
    final class DevServer: Sendable {
        let baseURL: URL
        let emulatorURL: String
        private let process: Process
        let directory: String

        static var executable: URL {
            var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("latchkey").path), directory.path != "/" {
                directory.deleteLastPathComponent()
            }
            return directory.appendingPathComponent("latchkey")
        }

        init() throws {
            directory = NSTemporaryDirectory() + "latchkey-sdk-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let (port, emulatorPort) = (Self.freePort(), Self.freePort())
            process = Process()
            process.executableURL = Self.executable
            process.arguments = ["serve", "--dev", "--port", String(port), "--emulator-port", String(emulatorPort)]
            process.currentDirectoryURL = URL(fileURLWithPath: directory)
            process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LATCHKEY_") }.merging([
                "LATCHKEY_DATABASE_URL": directory + "/latchkey.sqlite", "LATCHKEY_ACCESS_TOKEN_LIFETIME": "30", "LATCHKEY_LOG_LEVEL": "error",
                "LATCHKEY_RATE_LIMIT_PER_IP": "100000", "LATCHKEY_RATE_LIMIT_PER_SUBJECT": "100000",
                // No grace for replays: a recovered session is then owed to session.unusedSuccessorRecovery alone.
                "LATCHKEY_SESSION_REUSE_GRACE": "0",
                // Passkeys stay on serve --dev's localhost relying party; sign-up is opened for passkeySignUp.
                "LATCHKEY_PASSKEYS_ALLOW_SIGN_UP": "true",
            ]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            baseURL = URL(string: "http://127.0.0.1:\(port)")!
            emulatorURL = "http://127.0.0.1:\(emulatorPort)"
        }

        /// Waits until the server answers `/readyz`.
        /// Throws at once when the process has exited (its port taken meanwhile by another test, say).
        func ready() async throws {
            try await poll(until: "serve --dev at \(baseURL) to answer /readyz", within: .seconds(60), every: .milliseconds(50)) {
                guard process.isRunning else { throw HarnessError("serve --dev exited with status \(process.terminationStatus)") }
                guard let (_, response) = try? await Browser.get(baseURL.appendingPathComponent("readyz").absoluteString) else { return false }
                return response.statusCode == 200
            }
        }

        var isRunning: Bool { process.isRunning }

        func stop() {
            process.terminate()
            process.waitUntilExit()
            try? FileManager.default.removeItem(atPath: directory)
        }

        static func freePort() -> Int {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
            return Int(UInt16(bigEndian: address.sin_port))
        }

        /// A counter from `/metrics`, 0 when absent.
        func metric(_ line: String) async throws -> Int {
            let (data, _) = try await Browser.get(baseURL.appendingPathComponent("metrics").absoluteString)
            let text = String(decoding: data, as: UTF8.self)
            guard let found = text.split(separator: "\n").first(where: { $0.hasPrefix(line + " ") }) else { return 0 }
            return Int(Double(found.split(separator: " ").last ?? "0") ?? 0)
        }
    }

    /// What the user's browser does, without following redirects.
    enum Browser {
        final class NoRedirects: NSObject, URLSessionTaskDelegate, Sendable {
            func urlSession(
                _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
                completionHandler: @escaping @Sendable (URLRequest?) -> Void
            ) { completionHandler(nil) }
        }
        static let session = URLSession(configuration: .ephemeral, delegate: NoRedirects(), delegateQueue: nil)

        static func get(_ url: String) async throws -> (Data, HTTPURLResponse) {
            let (data, response) = try await session.data(for: URLRequest(url: URL(string: url)!))
            return (data, response as! HTTPURLResponse)
        }

        static func post(_ url: String, form: [(String, String)]) async throws -> (Data, HTTPURLResponse) {
            var request = URLRequest(url: URL(string: url)!)
            request.httpMethod = "POST"
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            request.httpBody = SessionEngine.formBody(form)
            let (data, response) = try await session.data(for: request)
            return (data, response as! HTTPURLResponse)
        }

        /// Follows the browser flow from the client's authorization URL through the emulator's Google page to the
        /// server's redirect back to the app; returns that callback URL.
        static func signIn(_ authorizationURL: URL, email: String, cancel: Bool = false) async throws -> URL {
            let (_, start) = try await get(authorizationURL.absoluteString)
            let page = try #require(start.value(forHTTPHeaderField: "Location"))
            let components = try #require(URLComponents(string: page))
            var form = (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }
            form += [("email", email), ("action", cancel ? "cancel" : "continue")]
            var action = components
            action.query = nil
            let actionURL = try #require(action.string)
            let (_, decision) = try await post(actionURL, form: form)
            let callback = try #require(decision.value(forHTTPHeaderField: "Location"))
            let (_, back) = try await get(callback)
            let location = try #require(back.value(forHTTPHeaderField: "Location"))
            return try #require(URL(string: location))
        }
    }

    static func withServer(_ body: (DevServer) async throws -> Void) async throws {
        var server = try DevServer()
        do {
            // Ports are picked free, then bound by the child: another test can take one in between. Then new ports.
            for attempt in 1...3 {
                do {
                    try await server.ready()
                    break
                } catch {
                    guard attempt < 3, !server.isRunning else { throw error }
                    server.stop()
                    server = try DevServer()
                }
            }
            try await body(server)
        } catch {
            server.stop()
            throw error
        }
        server.stop()
    }

    static func signedInClient(
        _ server: DevServer, store: any TokenStore = InMemoryTokenStore(), transport: FaultyTransport = FaultyTransport(),
        clock: MutableClock = MutableClock(Date())
    ) async throws -> LatchkeyClient {
        let client = LatchkeyClient(baseURL: server.baseURL, tokenStore: store, transport: transport, clock: clock)
        let url = client.authorizationURL(provider: "google", clientID: clientID, redirectURI: redirectURI)
        let signedIn = try await client.completeAuthorization(
            callbackURL: try await Browser.signIn(url, email: "sdk-\(UUID().uuidString.prefix(8))@example.com"))
        #expect(signedIn.user.identities.map(\.provider) == ["google"])
        return client
    }

    static func me(_ client: LatchkeyClient, _ server: DevServer) async throws -> Int {
        let (_, response) = try await client.data(for: URLRequest(url: server.baseURL.appendingPathComponent("v1/me")))
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    // MARK: - Tests

    @Test("the browser flow signs in (authorizationURL → web sheet → completeAuthorization) and data(for:) is authorized")
    func browserSignIn() async throws {
        try await Self.withServer { server in
            let client = try await Self.signedInClient(server)
            #expect(try await Self.me(client, server) == 200)
            let cancelled = LatchkeyClient(baseURL: server.baseURL, tokenStore: InMemoryTokenStore())
            let url = cancelled.authorizationURL(provider: "google", clientID: Self.clientID, redirectURI: Self.redirectURI)
            await #expect(throws: LatchkeyClientError.rejected) {
                try await cancelled.completeAuthorization(callbackURL: try await Browser.signIn(url, email: "x@example.com", cancel: true))
            }
            await #expect(throws: LatchkeyClientError.invalidResponse) {
                try await cancelled.completeAuthorization(callbackURL: URL(string: "http://127.0.0.1/callback?code=x&state=not-mine")!)
            }
        }
    }

    @Test("guarantee 1: 50 concurrent callers across an expiry make one refresh, counted by the server too")
    func oneRefresh() async throws {
        try await Self.withServer { server in
            let transport = FaultyTransport()
            let clock = MutableClock(Date())
            let client = try await Self.signedInClient(server, transport: transport, clock: clock)
            let before = try await server.metric(#"latchkey_refreshes_total{outcome="ok"}"#)
            clock.advance(31)
            let tokens = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<50 { group.addTask { try await client.validAccessToken() } }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(tokens.count == 1)
            #expect(transport.refreshCount == 1)
            #expect(try await server.metric(#"latchkey_refreshes_total{outcome="ok"}"#) == before + 1)
            #expect(try await Self.me(client, server) == 200)
        }
    }

    @Test("guarantee 3: a process killed after the server rotated and before its save; the next launch keeps the session without a reuse")
    func killedMidRefresh() async throws {
        try await Self.withServer { server in
            let file = server.directory + "/session.json"
            _ = try await Self.signedInClient(server, store: FileTokenStore(url: URL(fileURLWithPath: file)))
            // Another process refreshes, receives the server's answer and exits before saving it.
            let killed = try await Self.probe(server, file: file, refreshes: 1, dieAfterAnswer: true)
            #expect(killed.status == 3, "\(killed.output)")
            #expect(killed.presented.count == 1)
            // Next launch: the marker's process is gone, so the recorded token is presented again.
            let clock = MutableClock(Date().addingTimeInterval(3600))
            let transport = FaultyTransport()
            let relaunched = LatchkeyClient(
                baseURL: server.baseURL, tokenStore: FileTokenStore(url: URL(fileURLWithPath: file)), transport: transport, clock: clock)
            #expect(try await Self.me(relaunched, server) == 200)
            #expect(transport.refreshCount == 1)
            #expect(try await server.metric(#"latchkey_refreshes_total{outcome="invalid_grant"}"#) == 0, "no reuse revocation")
            clock.advance(3600)
            _ = try await relaunched.validAccessToken()
            #expect(try await Self.me(relaunched, server) == 200, "the recovered successor rotates on")
        }
    }

    @Test("guarantee 3, in one process: a client whose answer was lost is stopped; another on the same file recovers once the claim's lease ends")
    func stoppedClientInProcess() async throws {
        try await Self.withServer { server in
            let file = URL(fileURLWithPath: server.directory + "/session.json")
            let transport = FaultyTransport()
            // The stopped client's clock never moves again, so it never retries: it is as good as killed.
            let stopped = MutableClock(Date())
            let first = try await Self.signedInClient(server, store: FileTokenStore(url: file), transport: transport, clock: stopped)
            stopped.advance(31)
            transport.loseAnswers(1)
            await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await first.validAccessToken() }
            #expect(transport.refreshCount == 1)
            let clock = MutableClock(stopped.now.addingTimeInterval(RefreshPolicy().pendingRefreshLease + 1))
            let relaunched = LatchkeyClient(baseURL: server.baseURL, tokenStore: FileTokenStore(url: file), transport: FaultyTransport(), clock: clock)
            #expect(try await Self.me(relaunched, server) == 200)
            #expect(try await server.metric(#"latchkey_refreshes_total{outcome="invalid_grant"}"#) == 0, "no reuse revocation")
        }
    }

    @Test("guarantee 2: a save that fails once keeps the rotated pair in memory, reports storageUnavailable, and saves it later")
    func storeFailsOnce() async throws {
        try await Self.withServer { server in
            let store = FlakyStore()
            let clock = MutableClock(Date())
            let client = try await Self.signedInClient(server, store: store, clock: clock)
            let events = EventLog(client.events)
            store.failSaves(1)
            clock.advance(31)
            let token = try await client.validAccessToken()
            #expect(try await events.wait { $0.contains(.storageUnavailable) }.contains(.storageUnavailable))
            await client.refreshIfNeeded()
            #expect(try store.inner.load()?.accessToken == token)
            #expect(try await Self.me(client, server) == 200)
            #expect(try await server.metric(#"latchkey_refreshes_total{outcome="invalid_grant"}"#) == 0)
        }
    }

    @Test("guarantee 4: dropped connections never end the session; the refresh succeeds once they stop")
    func droppedRequests() async throws {
        try await Self.withServer { server in
            let transport = FaultyTransport()
            let clock = MutableClock(Date())
            let client = try await Self.signedInClient(server, transport: transport, clock: clock)
            transport.dropRequests(1)
            clock.advance(31)
            await #expect(throws: LatchkeyClientError.temporarilyUnavailable) { try await client.validAccessToken() }
            clock.advance(120)
            // On a loaded machine a real connection may fail too: that is the same guarantee, so the test waits it out.
            try await poll(until: "a refresh once requests are no longer dropped", within: .seconds(30), every: .milliseconds(200)) {
                (try? await client.validAccessToken()) != nil
            }
            #expect(try await Self.me(client, server) == 200)
        }
    }

    @Test("a slow network: callers arriving while a delayed refresh is in flight share it")
    func delayedRefresh() async throws {
        try await Self.withServer { server in
            let transport = FaultyTransport()
            let clock = MutableClock(Date())
            let client = try await Self.signedInClient(server, transport: transport, clock: clock)
            transport.delayRefreshes(milliseconds: 400)
            clock.advance(31)
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<20 { group.addTask { try await Self.me(client, server) } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 200, count: 20))
            #expect(transport.refreshCount == 1)
        }
    }

    @Test("guarantee 6: the client refreshes ahead of expiry on its own, and a failed attempt does not stop the next")
    func refreshAhead() async throws {
        try await Self.withServer { server in
            let transport = FaultyTransport()
            let clock = MutableClock(Date())
            let client = try await Self.signedInClient(server, transport: transport, clock: clock)
            let events = EventLog(client.events)
            transport.dropRequests(1)
            clock.advance(29)
            try await poll(until: "the timer's first refresh attempt (dropped)", within: .seconds(30)) { transport.refreshCount == 1 }
            // Time passes in small steps, so the next attempt comes due whenever the client schedules it after the drop.
            try await poll(until: "a later attempt to succeed without any caller", within: .seconds(30)) { events.all.contains(.refreshed) || tick(clock) }
            #expect(transport.refreshCount == 2)
            #expect(try await Self.me(client, server) == 200)
        }
    }

    @Test("guarantee 8: a locked store at launch is not a sign-out; the session is used once the store opens")
    func lockedStore() async throws {
        try await Self.withServer { server in
            let inner = InMemoryTokenStore()
            _ = try await Self.signedInClient(server, store: inner)
            let locked = FlakyStore(inner)
            locked.failLoads(true)
            let relaunched = LatchkeyClient(baseURL: server.baseURL, tokenStore: locked, transport: FaultyTransport(), clock: MutableClock(Date()))
            let events = EventLog(relaunched.events)
            await #expect(throws: LatchkeyClientError.storageUnavailable) { try await relaunched.validAccessToken() }
            #expect(try await events.wait { $0.contains(.storageUnavailable) }.first == .storageUnavailable)
            #expect(try inner.load() != nil, "nothing was deleted")
            locked.failLoads(false)
            await relaunched.refreshIfNeeded()
            #expect(try await Self.me(relaunched, server) == 200)
            #expect(!events.all.contains { if case .sessionEnded = $0 { true } else { false } })
        }
    }

    @Test("guarantee 5: a refresh the server has answered, whose answer arrives after signOut(), writes nothing back")
    func signOutDuringRefresh() async throws {
        try await Self.withServer { server in
            let store = InMemoryTokenStore()
            let clock = MutableClock(Date())
            let transport = FaultyTransport()
            let client = try await Self.signedInClient(server, store: store, transport: transport, clock: clock)
            let events = EventLog(client.events)
            clock.advance(31)
            // The order is forced: the server rotates, then the sign-out runs, then the answer reaches the client.
            let answer = transport.holdNextRefreshAnswer()
            let refreshing = Task { try await client.validAccessToken() }
            try await poll(until: "the server's answer to the refresh, held", within: .seconds(30)) { transport.answersHeld == 1 }
            await client.signOut()
            #expect(try store.load() == nil)
            answer.open()
            await #expect(throws: LatchkeyClientError.notSignedIn) { try await refreshing.value }
            #expect(try store.load() == nil)
            #expect(client.currentAccessToken == nil)
            #expect(await client.state == .signedOut)
            #expect(!events.all.contains(.refreshed), "\(events.all)")
            await client.background.finish()
        }
    }

    @Test("passkey sign-up (passkeys.allowSignUp): a new passkey-only account, signed in; its passkey signs in again after a sign-out")
    func passkeySignUp() async throws {
        try await Self.withServer { server in
            let port = try #require(server.baseURL.port)
            let authenticator = SoftwarePasskeyAuthenticator(origin: "http://localhost:\(port)")
            let client = LatchkeyClient(baseURL: server.baseURL, tokenStore: InMemoryTokenStore(), transport: FaultyTransport(), clock: MutableClock(Date()))
            let signedUp = try await client.signUpWithPasskey(displayName: "Ada", passkeyName: "Test iPhone", using: authenticator)
            #expect(signedUp.isNewUser)
            #expect(signedUp.user.identities.map(\.provider) == ["passkey"])
            #expect(try await Self.me(client, server) == 200)
            #expect(try await client.passkeys().map(\.name) == ["Test iPhone"])
            await client.signOut()
            let signedIn = try await client.signInWithPasskey(using: authenticator)
            #expect(signedIn.user.id == signedUp.user.id && !signedIn.isNewUser)
        }
    }

    @Test("guarantee 7: two processes refreshing one file at once, in every round: one sends the token, the other waits for its claim")
    func twoProcesses() async throws {
        try await Self.withServer { server in
            let file = server.directory + "/shared-session.json"
            let barrier = server.directory + "/barrier"
            try FileManager.default.createDirectory(atPath: barrier, withIntermediateDirectories: true)
            _ = try await Self.signedInClient(server, store: FileTokenStore(url: URL(fileURLWithPath: file)))
            // Each round starts in both processes at once (a barrier), on clocks that agree, with the access token
            // expired; the process that claims the refresh holds its request until the other has seen the claim.
            let rounds = 5
            let results = try await withThrowingTaskGroup(of: ProbeResult.self) { group in
                for _ in 0..<2 { group.addTask { try await Self.probe(server, file: file, refreshes: rounds, barrier: barrier) } }
                return try await group.reduce(into: [ProbeResult]()) { $0.append($1) }
            }
            for result in results { #expect(result.status == 0, "\(result.output)") }
            let presented = results.flatMap(\.presented)
            #expect(presented.count == rounds, "one refresh per round: \(results.map(\.output))")
            #expect(Set(presented).count == presented.count, "a refresh token was sent twice")
            // The race happened in every round: the process that did not send saw the other's claim, then used its pair.
            #expect(results.flatMap(\.claimsSeen).sorted() == Array(0..<rounds), "\(results.map(\.output))")
            #expect(results.count == 2 && results[0].tokens == results[1].tokens && results[0].tokens.count == rounds, "\(results.map(\.output))")
            #expect(try await server.metric(#"latchkey_refreshes_total{outcome="invalid_grant"}"#) == 0)
            let last = LatchkeyClient(baseURL: server.baseURL, tokenStore: FileTokenStore(url: URL(fileURLWithPath: file)))
            #expect(try await Self.me(last, server) == 200)
        }
    }

    struct ProbeResult: Sendable {
        let status: Int32
        let output: String
        /// Hashes of the refresh tokens this process sent.
        var presented: [String] { output.split(separator: "\n").filter { $0.hasPrefix("presented ") }.map { String($0.dropFirst(10)) } }
        /// The rounds in which this process saw the other's refresh claim.
        var claimsSeen: [Int] { lines("claim seen ").compactMap { Int($0) } }
        /// Hashes of the access token each round ended with.
        var tokens: [String] { lines("token ") }
        private func lines(_ prefix: String) -> [String] {
            output.split(separator: "\n").filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
        }
    }

    /// `latchkey-sdk-probe refresh`: another process running a client on the same file.
    /// `barrier`: a directory the probes of one test share (see `latchkey-sdk-probe refresh --barrier`).
    static func probe(_ server: DevServer, file: String, refreshes: Int, dieAfterAnswer: Bool = false, barrier: String? = nil) async throws -> ProbeResult {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(
                    with: Result {
                        let process = Process()
                        process.executableURL = DevServer.executable.deletingLastPathComponent().appendingPathComponent("latchkey-sdk-probe")
                        process.arguments =
                            ["refresh", "--base-url", server.baseURL.absoluteString, "--store", file, "--refreshes", String(refreshes)]
                            + (dieAfterAnswer ? ["--die-after-answer"] : []) + (barrier.map { ["--barrier", $0] } ?? [])
                        let output = Pipe()
                        process.standardOutput = output
                        process.standardError = output
                        try process.run()
                        let data = output.fileHandleForReading.readDataToEndOfFile()
                        process.waitUntilExit()
                        return ProbeResult(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
                    })
            }
        }
    }
}
