import AsyncHTTPClient
import Configuration
import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import LatchkeyTestSupport
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import Synchronization
import Testing

/// A Latchkey server on loopback, backed by a fresh SQLite file and talking to an in-process Apple emulator
/// that sends its notifications back to the server.
struct ServerHarness: Sendable {
    let emulator: EmulatorHarness
    let server: LatchkeyServer
    let store: SQLAuthStore
    let baseURL: String
    let clock: MutableClock
    /// The key the server seals secrets with; a second instance on the same store needs it too.
    let encryptionKey: String
    private let group: ServiceGroup
    private let task: Task<Void, any Error>
    private let path: String
    let http: HTTPClient

    static func with(
        configure: (inout ServerConfiguration) -> Void = { _ in },
        emulator emulatorConfiguration: EmulatorConfiguration = EmulatorHarness.configuration(),
        logger: Logger? = nil,
        transport: any HTTPTransport = AsyncHTTPClientTransport(),
        emailSender: (any EmailSender)? = nil,
        _ body: (ServerHarness) async throws -> Void
    ) async throws {
        await running.acquire()
        defer { running.release() }
        let harness = try await start(
            configure: configure, emulator: emulatorConfiguration, logger: logger, transport: transport, emailSender: emailSender)
        do {
            try await body(harness)
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    /// How many harnesses run at once. Swift Testing starts every test together, and unbounded the harnesses held
    /// 3,000 descriptors (each store's four SQLite connections among them). Foundation's `Process.run()` on Linux
    /// lists /proc/self/fd with a read past the end of its buffer once the listing fills it (about 1,350
    /// descriptors; swift-corelibs-foundation#5472), which crashed the whole test process while a CLI test started
    /// a process.
    private static let running = Permits(32)

    /// `transport`: how the server reaches the providers (the emulator).
    static func start(
        configure: (inout ServerConfiguration) -> Void, emulator emulatorConfiguration: EmulatorConfiguration, logger: Logger? = nil,
        transport: any HTTPTransport = AsyncHTTPClientTransport(), emailSender: (any EmailSender)? = nil
    ) async throws -> ServerHarness {
        let emulator = try await EmulatorHarness.start(emulatorConfiguration)
        var configuration = ServerConfiguration()
        configuration.port = 0
        // Off unless a test turns it on; then attestations of the emulator's stand-in chain to this root.
        configuration.appAttest.rootCertificatePEM = emulator.emulator.appAttestRootPEM
        let base = emulator.emulator.baseURL
        let everywhere = EmulatorHarness.providerClientID
        configuration.openIDProviders = [
            .generic(name: "oidc", displayName: "Emulated OpenID Connect", issuer: emulator.emulator.oidcIssuer, clientIDs: [everywhere])
        ]
        // Every module of ProviderModules.all, at the emulator, as `serve --dev` configures it. Apple also takes the
        // fixtures' bundle id and Services ID (the browser flow's), Google the Google-only test client.
        configuration.providerModules = try emulatedModules(
            emulator: base, clientIDs: [everywhere],
            overrides: [
                "apple.clientIds": [Fixtures.bundleID, Fixtures.servicesID, everywhere].joined(separator: ","), "apple.servicesId": Fixtures.servicesID,
                "google.clientIds": [EmulatorHarness.googleClientID, everywhere].joined(separator: ","), "google.webClientId": everywhere,
            ])
        configuration.rateLimit.perClientIP = 10_000
        configuration.rateLimit.perSubject = 10_000
        // The emulator answers a daily validation at once; on a loaded machine it may still take longer than the
        // default 3 s, and the refresh would answer before the validation it tests. Tests of the wait set their own.
        configuration.session.providerValidationWait = 30
        configure(&configuration)
        let path = NSTemporaryDirectory() + "latchkey-server-\(UUID().uuidString).sqlite"
        let logger =
            logger
            ?? {
                var quiet = Logger(label: "latchkey.test")
                quiet.logLevel = .critical
                return quiet
            }()
        let store = try await SQLAuthStore.open(.sqlite(path: path), logger: logger)
        try await store.migrate()
        let clock = MutableClock(Date())
        let encryptionKey = SecretBox.generateKey()
        let server = try await LatchkeyServer.make(
            configuration: configuration, store: store, encryptionKey: encryptionKey,
            transport: transport, timeSource: clock.source, logger: logger, emailSender: emailSender
        )
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = server.makeApplication { port in continuation.yield(port) }
        let group = ServiceGroup(services: [application], gracefulShutdownSignals: [], logger: logger)
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw HarnessError("the server did not start") }
        let baseURL = "http://127.0.0.1:\(port)"
        await emulator.emulator.setNotificationURL(baseURL + "/v1/apple/notifications", for: Fixtures.bundleID)
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        return ServerHarness(
            emulator: emulator, server: server, store: store, baseURL: baseURL, clock: clock, encryptionKey: encryptionKey, group: group, task: task,
            path: path, http: http
        )
    }

    /// Every module of ``ProviderModules/all`` pointed at the emulator at `base`, read as the server reads its settings:
    /// the settings `serve --dev` gives each module (``ProviderModules/emulatedSettings(emulatorBaseURL:clientIDs:)``),
    /// Apple's team and key from the fixtures, and `overrides` (full keys) on top.
    static func emulatedModules(emulator base: String, clientIDs: [String], overrides: [String: String] = [:]) throws -> [any ProviderModule] {
        let settings = ProviderModules.emulatedSettings(emulatorBaseURL: base, clientIDs: clientIDs)
            .merging([
                "apple.teamId": Fixtures.teamID, "apple.keyId": Fixtures.keyID, "apple.privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"),
                "apple.baseUrl": base,
            ]) { $1 }
            .merging(overrides) { $1 }
        let values = Dictionary(
            uniqueKeysWithValues: settings.map {
                (AbsoluteConfigKey($0.key.split(separator: ".").map(String.init)), ConfigValue(.string($0.value), isSecret: false))
            })
        return try ProviderModules.configured(ConfigReader(provider: InMemoryProvider(values: values)))
    }

    /// Another server on this harness's store, emulator and clock, its configuration as this one's with `configure`
    /// applied and its Apple settings overridden by `apple` (full keys: `apple.teamId`, …): a restart with new settings.
    /// Its base URL, and how to stop it.
    func secondServer(apple overrides: [String: String], configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> (
        server: LatchkeyServer, baseURL: String, stop: @Sendable () async -> Void
    ) {
        var configuration = ServerConfiguration()
        configuration.port = 0
        let base = emulator.emulator.baseURL
        let everywhere = EmulatorHarness.providerClientID
        configuration.providerModules = try Self.emulatedModules(
            emulator: base, clientIDs: [everywhere],
            overrides: [
                "apple.clientIds": [Fixtures.bundleID, Fixtures.servicesID, everywhere].joined(separator: ","), "apple.servicesId": Fixtures.servicesID,
            ].merging(overrides) { $1 })
        configuration.rateLimit.perClientIP = 100_000
        configuration.rateLimit.perSubject = 100_000
        configuration.session.providerValidationWait = 30
        configure(&configuration)
        var logger = Logger(label: "latchkey.test")
        logger.logLevel = .critical
        let server = try await LatchkeyServer.make(
            configuration: configuration, store: store, encryptionKey: encryptionKey, transport: AsyncHTTPClientTransport(), timeSource: clock.source,
            logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = server.makeApplication { port in continuation.yield(port) }
        let group = ServiceGroup(services: [application], gracefulShutdownSignals: [], logger: logger)
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw HarnessError("the second server did not start") }
        return (
            server, "http://127.0.0.1:\(port)",
            {
                await group.triggerGracefulShutdown()
                _ = try? await task.value
            }
        )
    }

    /// The SQLite file behind ``store``.
    var databasePath: String { path }

    func stop() async {
        try? await http.shutdown()
        await group.triggerGracefulShutdown()
        _ = try? await task.value
        await store.close()
        await emulator.stop()
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    // MARK: HTTP

    struct Answer: Sendable {
        let status: Int
        let headers: [String: String]
        let body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:] }
        var error: String? { json["error"] as? String }
        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return try decoder.decode(T.self, from: Data(body))
        }
    }

    func send(
        _ method: String, _ path: String, body: String? = nil, contentType: String = "application/json", bearer: String? = nil,
        headers: [(String, String)] = [],
        bytes: [UInt8]? = nil
    ) async throws -> Answer {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = HTTPMethod(rawValue: method)
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let bytes = bytes ?? body.map({ Array($0.utf8) }) {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: bytes))
        }
        let response = try await http.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        var answerHeaders: [String: String] = [:]
        for (name, value) in response.headers { answerHeaders[name.lowercased()] = value }
        return Answer(status: Int(response.status.code), headers: answerHeaders, body: Array(buffer: bytes))
    }

    func post(_ path: String, json object: [String: any Sendable], bearer: String? = nil, headers: [(String, String)] = []) async throws -> Answer {
        try await send(
            "POST", path, body: String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self), bearer: bearer, headers: headers)
    }

    // MARK: Flows

    /// A native sign-in at the emulator, then `POST /v1/auth/apple`.
    func signIn(sub: String, nonce: String = "nonce-\(UUID().uuidString)", withCode: Bool = true, fullName: [String: String]? = nil) async throws -> Answer {
        let apple = try await emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
        var body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": nonce]
        if withCode { body["authorizationCode"] = apple.code }
        if let fullName { body["fullName"] = fullName }
        return try await post("/v1/auth/apple", json: body)
    }

    /// Signs in a new user and returns the token pair.
    func signedIn(email: String = "jane@example.com") async throws -> (sub: String, tokens: SignInResponse) {
        let sub = try await emulator.createUser(email: email)
        let answer = try await signIn(sub: sub)
        guard answer.status == 200 else { throw HarnessError("sign-in answered \(answer.status): \(answer.text)") }
        return (sub, try answer.decode(SignInResponse.self))
    }

    /// A Google authorization at the emulator's consent page for the emulator user with `email` (made if new),
    /// returning a code bound to `verifier`'s S256 challenge and the harness's redirect URI.
    func googleCode(email: String, verifier: String) async throws -> String {
        let answer = try await emulator.send(
            "POST", "/google/o/oauth2/v2/auth",
            form: [
                ("client_id", EmulatorHarness.googleClientID), ("redirect_uri", EmulatorHarness.redirectURI), ("response_type", "code"),
                ("scope", "openid email profile"), ("state", "s"), ("email", email), ("action", "continue"),
                ("code_challenge", PKCE.challenge(for: verifier)), ("code_challenge_method", "S256"),
            ])
        guard let location = answer.headers["location"], let code = URLComponents(string: location)?.queryItems?.first(where: { $0.name == "code" })?.value
        else { throw HarnessError("the emulator's Google consent answered \(answer.status) without a code") }
        return code
    }

    /// `POST /v1/auth/google` (or `path`) with a fresh Google code for `email`.
    func googleSignIn(
        email: String, path: String = "/v1/auth/google", bearer: String? = nil, extra: [String: any Sendable] = [:], headers: [(String, String)] = []
    ) async throws -> Answer {
        let verifier = PKCE.makeVerifier()
        let code = try await googleCode(email: email, verifier: verifier)
        let body: [String: any Sendable] = ["authorizationCode": code, "codeVerifier": verifier, "redirectUri": EmulatorHarness.redirectURI]
        return try await post(path, json: body.merging(extra) { $1 }, bearer: bearer, headers: headers)
    }

    /// Checks that a later sign-in found `created`'s user and that its session works (`/v1/me`, one rotation).
    @discardableResult
    func expectReturningUser(_ answer: Answer, _ created: SignInResponse, sourceLocation: SourceLocation = #_sourceLocation) async throws -> SignInResponse {
        #expect(answer.status == 200, "\(answer.text)", sourceLocation: sourceLocation)
        let again = try answer.decode(SignInResponse.self)
        #expect(!again.isNewUser, sourceLocation: sourceLocation)
        #expect(again.user.id == created.user.id, sourceLocation: sourceLocation)
        #expect(try await send("GET", "/v1/me", bearer: again.accessToken).status == 200, sourceLocation: sourceLocation)
        #expect(try await refresh(again.refreshToken).status == 200, sourceLocation: sourceLocation)
        return again
    }

    func refresh(_ token: String) async throws -> Answer {
        try await send("POST", "/v1/token", body: "grant_type=refresh_token&refresh_token=\(token)", contentType: "application/x-www-form-urlencoded")
    }
}

/// A loopback HTTP receiver that keeps the bodies POSTed to `/capture`: where tests point the emulator's
/// notifications to hold them back and replay them by hand.
struct NotificationCapture: Sendable {
    private actor Bodies {
        var received: [String] = []
        func add(_ body: String) { received.append(body) }
    }

    let port: Int
    private let bodiesReceived: Bodies
    private let task: Task<Void, any Error>

    static func start() async throws -> NotificationCapture {
        let bodies = Bodies()
        let router = Router()
        router.post("/capture") { request, _ -> HTTPResponse.Status in
            await bodies.add(String(buffer: try await request.body.collect(upTo: 1 << 16)))
            return .ok
        }
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let receiver = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress!.port!) })
        let task = Task { try await receiver.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw HarnessError("the capture receiver did not start") }
        return NotificationCapture(port: port, bodiesReceived: bodies, task: task)
    }

    /// The bodies received so far, oldest first.
    func bodies() async -> [String] { await bodiesReceived.received }

    func stop() { task.cancel() }
}

/// At most a fixed number of holders at once; the others wait their turn.
final class Permits: Sendable {
    private struct State {
        var free: Int
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state: Mutex<State>

    init(_ count: Int) { state = Mutex(State(free: count)) }

    func acquire() async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state in
                guard state.free > 0 else {
                    state.waiting.append(continuation)
                    return false
                }
                state.free -= 1
                return true
            }
            if ready { continuation.resume() }
        }
    }

    func release() {
        let next: CheckedContinuation<Void, Never>? = state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.free += 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
