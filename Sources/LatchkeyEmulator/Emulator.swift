import Foundation
public import Hummingbird
public import Logging
public import ServiceLifecycle

/// An offline stand-in for Sign in with Apple (`appleid.apple.com`), Google's, Microsoft's, Facebook's and
/// Dropbox's identity endpoints, and a generic OpenID Connect issuer; and for App Attest (`DCAppAttestService`), with a
/// root CA of its own (``appAttestRootPEM``).
///
/// Point a client at ``RunningEmulator/baseURL`` instead of `https://appleid.apple.com`, and at
/// `baseURL + "/google"` (`/microsoft`, `/facebook`, `/dropbox`, `/oidc`) instead of the other providers' hosts. A control API under `/emulator/` creates users,
/// mints native sign-ins, revokes consent, injects faults and shows every request received.
///
/// ```swift
/// let emulator = try await Emulator.start(configuration: configuration)
/// defer { Task { await emulator.stop() } }
/// print(emulator.baseURL)  // http://127.0.0.1:53127
/// ```
public struct Emulator: Sendable {
    public let configuration: EmulatorConfiguration
    let state: EmulatorState
    let logger: Logger
    /// The App Attest stand-in's root and intermediate, made for this emulator.
    let appAttestAuthority: AppAttestAuthority

    public init(configuration: EmulatorConfiguration, logger: Logger = Logger(label: "latchkey.emulator")) throws {
        self.configuration = configuration
        self.state = EmulatorState(configuration: configuration)
        self.logger = logger
        self.appAttestAuthority = try AppAttestAuthority()
    }

    /// The HTTP application serving every endpoint.
    public func makeApplication(
        host: String = "127.0.0.1",
        port: Int = 0,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            router: makeRouter(),
            configuration: .init(address: .hostname(host, port: port), serverName: "latchkey-emulator"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
            logger: logger
        )
    }

    /// Sends `clientID`'s server-to-server notifications to `url` from now on (nil stops them).
    @discardableResult
    public func setNotificationURL(_ url: String?, for clientID: String) async -> Bool {
        await state.setNotificationURL(url, clientID: clientID)
    }

    /// Delivers server-to-server notifications, retrying with backoff until the receiver answers 200.
    public var notificationService: some Service { NotificationDeliveryService(state: state, configuration: configuration, logger: logger) }

    /// The App Attest stand-in's root CA certificate (PEM), also served at `GET /emulator/appattest/root.pem`: a server
    /// that checks App Attest attestations trusts it in place of Apple App Attestation Root CA to accept the stand-in's.
    /// Made with the emulator, so each emulator has its own.
    public var appAttestRootPEM: String { appAttestAuthority.rootPEM }

    /// Starts the emulator in-process on loopback, on `port` (0 picks a free one).
    public static func start(configuration: EmulatorConfiguration, port: Int = 0, logger: Logger = Logger(label: "latchkey.emulator")) async throws
        -> RunningEmulator
    {
        let emulator = try Emulator(configuration: configuration, logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = emulator.makeApplication(port: port) { port in continuation.yield(port) }
        let group = ServiceGroup(services: [application, emulator.notificationService], gracefulShutdownSignals: [], logger: logger)
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let bound = await iterator.next() else { throw CancellationError() }
        return RunningEmulator(
            baseURL: "http://127.0.0.1:\(bound)", port: bound, state: emulator.state, appAttestRootPEM: emulator.appAttestRootPEM, group: group, task: task)
    }
}

/// An emulator running in this process.
public final class RunningEmulator: Sendable {
    /// `http://127.0.0.1:PORT`: use it where Apple's base URL would go.
    public let baseURL: String
    public let port: Int
    /// The App Attest stand-in's root CA certificate, PEM (``Emulator/appAttestRootPEM``).
    public let appAttestRootPEM: String
    private let state: EmulatorState
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    init(baseURL: String, port: Int, state: EmulatorState, appAttestRootPEM: String, group: ServiceGroup, task: Task<Void, any Error>) {
        self.baseURL = baseURL
        self.port = port
        self.state = state
        self.appAttestRootPEM = appAttestRootPEM
        self.group = group
        self.task = task
    }

    /// Sends `clientID`'s server-to-server notifications to `url` from now on (nil stops them).
    @discardableResult
    public func setNotificationURL(_ url: String?, for clientID: String) async -> Bool {
        await state.setNotificationURL(url, clientID: clientID)
    }

    /// Google's endpoints live under this prefix.
    public var googleBaseURL: String { baseURL + "/google" }
    /// The generic OpenID Connect issuer (`iss` of its tokens) and the prefix of its endpoints.
    public var oidcIssuer: String { baseURL + "/oidc" }

    /// Stops serving and waits until the port is closed.
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}
