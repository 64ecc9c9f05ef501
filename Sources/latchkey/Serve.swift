import ArgumentParser
import AsyncHTTPClient
import CMallocTuning
import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import LatchkeyWebAuthn
import Logging
import NIOCore
import NIOHTTP1
import OTel
import ServiceLifecycle
import Tracing
import UnixSignals

/// `latchkey serve`: the Latchkey server.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the Latchkey server.",
        discussion: """
            With no configuration it runs in development mode on an embedded SQLite database with generated keys.
            Configuration comes from --config (JSON), LATCHKEY_* environment variables and these flags; see docs/configuration.md.

            Examples:
              latchkey serve --dev                         # server on :8080, emulated Apple, Google, Microsoft, Facebook, Dropbox and OIDC on :8081
              latchkey serve --config /etc/latchkey.json   # production set-up
              LATCHKEY_MODE=production LATCHKEY_ENCRYPTION_KEY_FILE=/run/secrets/key latchkey serve
            """
    )

    @Option(help: "A JSON configuration file.") var config: String?
    @Option(help: "Port to listen on.") var port: Int?
    @Option(help: "Address to listen on.") var host: String?
    @Flag(help: "Also run the emulator in-process and point every provider (Apple, Google, Microsoft, Facebook, Dropbox, OIDC) at it.") var dev = false
    @Option(help: "With --dev: the emulator's port.") var emulatorPort = 8081
    @Option(
        help: "With --dev: use the emulator already running at this URL (another instance's) instead of starting one; for a local fleet on one database."
    ) var emulatorUrl: String?
    @Option(help: "With --dev: the client id (bundle id) the emulator registers at every provider; repeatable.") var clientID: [String] = []

    func run() async throws {
        // Usage errors (64, with usage text) are about the command line; everything after is a run failure (1, one line).
        if let config, !FileManager.default.fileExists(atPath: config) { throw ValidationError("configuration file \(config) does not exist") }
        if emulatorUrl != nil, !dev { throw ValidationError("--emulator-url goes with --dev") }
        guard (1...65_535).contains(emulatorPort) else { throw ValidationError("--emulator-port is a port from 1 to 65535") }
        if let emulatorUrl, let problem = OutboundURL.problem(emulatorUrl) { throw ValidationError("--emulator-url is \(emulatorUrl): \(problem)") }
        // glibc's malloc is tuned before main (CMallocTuning); this keeps the object file linked.
        _ = latchkey_malloc_tuned()
        _ = OpenFileLimit.raised
        var (configuration, team) = try await loadConfiguration()
        let tracing = try Self.bootstrapTracing(configuration)
        LogOutput.bootstrap(
            format: configuration.logFormat, level: configuration.logLevel, metadataProvider: tracing == nil ? nil : OTel.makeLoggingMetadataProvider())
        let logger = Logger(label: "latchkey")
        for warning in configuration.warnings { logger.warning("\(warning)") }
        do {
            var services: [any Service] = tracing.map { [$0] } ?? []
            if let team {
                let rootPEM: String
                if let emulatorUrl {
                    rootPEM = try await Self.appAttestRoot(emulatorURL: emulatorUrl)
                } else {
                    let emulator = try emulator(team: team, configuration: configuration)
                    services += [emulator.makeApplication(port: emulatorPort) as any Service, emulator.notificationService]
                    rootPEM = emulator.appAttestRootPEM
                }
                Self.trustEmulatedAppAttest(&configuration, rootPEM: rootPEM, teamID: team.teamID, clientIDs: devClientIDs)
            }
            try await serve(configuration, extraServices: services, logger: logger)
        } catch {
            throw Self.failure(error)
        }
    }

    private var devClientIDs: [String] { clientID.isEmpty ? ["com.example.app"] : clientID }

    /// The configuration `serve` runs with and, with `--dev`, the team the emulator signs for.
    private func loadConfiguration() async throws -> (ServerConfiguration, DevTeam?) {
        var overrides: [String: String] = [:]
        if let port { overrides["port"] = String(port) }
        if let host { overrides["host"] = host }
        let configuration = try await Self.reading(file: config, overrides: overrides)
        guard dev else { return (configuration, nil) }
        if configuration.mode != .development { throw ValidationError("--dev runs only in development mode (mode is \(configuration.mode.rawValue))") }
        let team = try devTeam(configuration)
        // Every provider points at the emulator with the dev client ids; the other settings (requireNonce,
        // nonceMatching, redirectUris, signup.mode…) still come from the configuration.
        overrides.merge(
            Runtime.emulatedProviderSettings(
                baseURL: emulatorUrl ?? "http://127.0.0.1:\(emulatorPort)", team: (team.teamID, team.keyID, team.keyFile), clientIDs: devClientIDs)
        ) { $1 }
        // Passkeys on this machine: the demo page's origin, unless the configuration sets its own.
        if configuration.passkeys == nil {
            overrides["passkeys.rpId"] = "localhost"
            overrides["passkeys.origins"] = "http://localhost:\(configuration.port)"
        }
        var devConfiguration = try await Self.reading(file: config, overrides: overrides)
        // Each client id is also a public client of the browser flow, with every emulated provider, and `/` shows the demo.
        for clientID in devClientIDs where !devConfiguration.clients.contains(where: { $0.clientID == clientID }) {
            devConfiguration.clients.append(
                OAuthClient(clientID: clientID, redirectURIs: ["http://127.0.0.1/callback", "http://localhost/callback", clientID + ":/oauth2redirect"]))
        }
        devConfiguration.servesDemoPage = true
        if devConfiguration.email != nil, devConfiguration.email?.smtpURL == nil {
            devConfiguration.email?.mailboxURL = (emulatorUrl ?? "http://127.0.0.1:\(emulatorPort)") + "/emulator/mail"
        }
        return (devConfiguration, team)
    }

    /// The configuration, or exit 1 with the line that names the setting.
    private static func reading(file: String?, overrides: [String: String]) async throws -> ServerConfiguration {
        do {
            return try await Runtime.configuration(file: file, overrides: overrides)
        } catch {
            throw failure(error)
        }
    }

    private func devTeam(_ configuration: ServerConfiguration) throws -> DevTeam {
        do {
            let made = try TestTeam.createOrLoad(in: (Runtime.dataDirectory(configuration) as NSString).appendingPathComponent("dev-team"))
            return DevTeam(teamID: made.teamID, keyID: made.keyID, keyFile: made.keyFile)
        } catch {
            throw Self.failure(error)
        }
    }

    /// The `--dev` team: the emulator's Apple signs for it.
    struct DevTeam {
        let teamID: String
        let keyID: String
        let keyFile: String
    }

    /// With `otel.endpoint`: spans exported over OTLP/HTTP to `{endpoint}/v1/traces` (swift-otel's batch processor, which
    /// the returned service runs and flushes at shutdown), W3C trace context propagated, log lines carrying `trace_id`
    /// and `span_id`. The OTEL_* environment variables of the OpenTelemetry specification override these.
    static func bootstrapTracing(_ configuration: ServerConfiguration) throws -> (any Service)? {
        guard let endpoint = configuration.otel.endpoint else { return nil }
        var otel = OTel.Configuration.default
        otel.serviceName = configuration.otel.serviceName
        otel.logs.enabled = false
        otel.metrics.enabled = false
        otel.traces.enabled = true
        otel.propagators = [.traceContext]
        otel.traces.sampler = .parentBasedTraceIDRatio(ratio: configuration.otel.sampleRatio) ?? .parentBasedAlwaysOn
        otel.traces.otlpExporter.endpoint = endpoint + "/v1/traces"
        otel.traces.otlpExporter.protocol = .httpProtobuf
        let backend = try OTel.makeTracingBackend(configuration: otel)
        InstrumentationSystem.bootstrap(backend.factory)
        return backend.service
    }

    /// `--dev`'s App Attest: the emulator's root, the emulated team's App IDs, `development`, and `report` unless the
    /// configuration chose a mode.
    static func trustEmulatedAppAttest(_ configuration: inout ServerConfiguration, rootPEM: String, teamID: String, clientIDs: [String]) {
        configuration.appAttest.rootCertificatePEM = rootPEM
        configuration.appAttest.environment = .development
        if configuration.appAttest.appIDs.isEmpty { configuration.appAttest.appIDs = clientIDs.map { teamID + "." + $0 } }
        if configuration.appAttest.mode == .off { configuration.appAttest.mode = .report }
    }

    /// The App Attest root of the emulator at `emulatorURL` (another instance's).
    private static func appAttestRoot(emulatorURL: String) async throws -> String {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: emulatorURL + "/emulator/appattest/root.pem"), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 64 * 1024)
        guard response.status == .ok else { throw ValidationError("the emulator at \(emulatorURL) answered \(response.status.code) for its App Attest root") }
        return String(buffer: body)
    }

    /// The in-process emulator of `--dev`.
    private func emulator(team: DevTeam, configuration: ServerConfiguration) throws -> Emulator {
        let emulatorConfiguration = try Runtime.emulatorConfiguration(
            team: (team.teamID, team.keyID, team.keyFile), clientIDs: devClientIDs,
            notificationURL: "http://127.0.0.1:\(configuration.port)/v1/apple/notifications", serverIssuer: configuration.issuer
        )
        var emulatorLogger = Logger(label: "latchkey.emulator")
        emulatorLogger.logLevel = .warning
        let emulator = try Emulator(configuration: emulatorConfiguration, logger: emulatorLogger)
        print(
            "emulator on http://127.0.0.1:\(emulatorPort) (control API under /emulator/): Apple (team \(team.teamID)), \(ProviderModules.all.filter { $0.name != AppleModule.name }.map { $0.displayName }.joined(separator: ", ")) and OIDC, client ids \(devClientIDs.joined(separator: ", "))"
        )
        return emulator
    }

    /// Opens the store and runs the server with its services until a signal stops it.
    private func serve(_ configuration: ServerConfiguration, extraServices: [any Service], logger: Logger) async throws {
        let key = try Runtime.encryptionKey(configuration, directory: Runtime.dataDirectory(configuration))
        let store = try await Runtime.openStore(configuration, logger: logger)
        let server: LatchkeyServer
        do {
            server = try await LatchkeyServer.make(configuration: configuration, store: store, encryptionKey: key, logger: logger)
        } catch {
            await store.close()
            throw error
        }
        if configuration.providerNames.isEmpty {
            logger.warning("no sign-in provider is configured; POST /v1/auth/{provider} answers 503 (use --dev, or set apple.* or another provider's settings)")
        }
        let application = server.makeApplication { bound in
            // Start-up's code (configuration, migrations, key loading) need not stay resident; what serving uses faults back in.
            let released = latchkey_release_clean_file_pages()
            logger.debug("start-up pages released from the resident set", metadata: ["kilobytes": "\(released)"])
            print("Latchkey listening on http://\(configuration.host):\(bound) (\(configuration.mode.rawValue), database \(configuration.database))")
            if configuration.servesDemoPage { print("demo sign-in page: http://\(configuration.host):\(bound)/") }
            flushStandardOutput()
        }
        // The emulator (`--dev`) first, so it stops last: requests in flight may still call it.
        let group = ServiceGroup(services: extraServices + server.services(with: application), gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        do {
            try await group.run()
        } catch {
            await store.close()
            throw Self.listenFailure(error, configuration: configuration) ?? error
        }
        await store.close()
    }

    /// Prints one line naming what stopped the server, and exits 1.
    static func failure(_ error: any Error) -> ExitCode {
        let reason = Runtime.describe(error)
        FileHandle.standardError.write(Data("latchkey serve: \(reason.replacingOccurrences(of: "\n", with: " "))\n".utf8))
        return ExitStatus.failure
    }

    /// The port already taken, or an address that cannot be bound, said plainly.
    static func listenFailure(_ error: any Error, configuration: ServerConfiguration) -> CLIError? {
        guard let error = error as? IOError else { return nil }
        let address = "\(configuration.host):\(configuration.port)"
        switch error.errnoCode {
        case EADDRINUSE: return CLIError("cannot listen on \(address): the port is already in use (set --port or port)")
        case EADDRNOTAVAIL: return CLIError("cannot listen on \(address): this machine has no such address (set --host or host)")
        case EACCES: return CLIError("cannot listen on \(address): permission denied (ports below 1024 need privileges)")
        default: return CLIError("cannot listen on \(address): \(error)")
        }
    }
}

/// `latchkey migrate`: applies database migrations and exits.
struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply database migrations to the configured store and exit.")

    @Option(help: "A JSON configuration file.") var config: String?

    func run() async throws {
        do {
            let configuration = try await Runtime.configuration(file: config, overrides: [:], administrationOnly: true)
            let store = try await Runtime.openStore(configuration, logger: Logger(label: "latchkey"))
            let versions = try await store.appliedMigrations()
            await store.close()
            print("database \(configuration.database) is at schema version \(versions.last ?? 0)")
        } catch  where error is LatchkeyError || error is CLIError {
            throw ExitStatus.configurationError(error)
        }
    }
}
