import ArgumentParser
import Configuration
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import Logging
import SystemPackage

/// `latchkey doctor`: finds what is wrong with a sign-in set-up, offline, and with `--live` at the providers.
struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check a sign-in set-up (Apple and every other configured provider) and say how to fix what is wrong.",
        discussion: """
            Reads the same configuration as `latchkey serve` (--config file and LATCHKEY_* variables).
            Examples:
              latchkey doctor --config latchkey.json
              latchkey doctor --config latchkey.json --live     # proves the client secret against apple.baseUrl
              LATCHKEY_APPLE_TEAM_ID=... latchkey doctor --json
            --live redeems a deliberately invalid authorization code: invalid_grant means Apple accepted the
            client (team id, key id, key and client id are right); invalid_client means it did not. For the other
            providers, --live reads their discovery documents and signing keys.
            Exit codes: 0 no errors (warnings allowed), 1 at least one error, 64 usage.
            """
    )

    @Option(help: "A JSON configuration file.") var config: String?
    @Flag(help: "Also ask Apple (apple.baseUrl) whether it accepts the client secret, and read every provider's discovery and keys.") var live = false
    @Flag(help: "Print a JSON object instead.") var json = false

    struct Finding {
        enum Status: String {
            case ok, warning, error

            init(_ level: ProviderFinding.Level) {
                switch level {
                case .ok: self = .ok
                case .warning: self = .warning
                case .error: self = .error
                }
            }
        }
        let status: Status
        let check: String
        let message: String
        let fix: String?
    }

    func run() async throws {
        var findings: [Finding] = []
        func add(_ status: Finding.Status, _ check: String, _ message: String, fix: String? = nil) {
            findings.append(Finding(status: status, check: check, message: message, fix: fix))
        }

        // The very reader `serve` uses, so both see the same values.
        let reader: ConfigReader
        let read = ReadKeys()
        var readFile = config
        do {
            reader = try await Runtime.configReader(file: config, reporting: read)
            if let config { add(.ok, "config", "\(config) is valid JSON") }
        } catch {
            add(.error, "config", "\(error)", fix: "check the path and the JSON syntax")
            reader = try await Runtime.configReader(file: nil, reporting: read)
            readFile = nil
        }
        var serverConfiguration: ServerConfiguration?
        do {
            let configuration = try ServerConfiguration(reading: reader)
            try configuration.validateAppAttest()
            for warning in configuration.warnings { add(.warning, "config", warning, fix: "change the setting it names") }
            serverConfiguration = configuration
        } catch {
            add(.error, "config", "latchkey serve refuses this configuration: \(error.reason)", fix: "change the setting it names")
        }
        let mode = reader.string(forKey: "mode") ?? "development"

        // Each provider's settings on its own, so every problem shows; with none configured, the first's (Apple's) are expected.
        let noneConfigured = serverConfiguration?.providerNames.isEmpty ?? false
        var notConfigured: [String] = []
        for (index, module) in ProviderModules.all.enumerated() {
            for finding in module.diagnose(reader.scoped(to: ConfigKey(module.name)), expected: noneConfigured && index == 0) {
                if finding == .notConfigured(module) {
                    notConfigured.append(module.name)
                } else {
                    add(Finding.Status(finding.level), finding.key, finding.message, fix: finding.fix)
                }
            }
        }
        if !notConfigured.isEmpty { add(.ok, "providers", "not configured: \(notConfigured.joined(separator: ", "))") }
        await checkProviders(serverConfiguration, add)
        if let serverConfiguration { await checkStore(serverConfiguration, add) }
        if let email = serverConfiguration?.email { checkEmail(email, add) }
        finishChecks(reader: reader, mode: mode, add)
        // After every setting above was read: what is left in the file or the environment names none.
        for finding in UnknownSettings.findings(file: readFile, environment: ProcessInfo.processInfo.environment, known: read.known) {
            add(.warning, "config", finding.warning, fix: "rename it to the setting it means, or remove it; it is ignored")
        }

        report(findings)
        if findings.contains(where: { $0.status == .error }) { throw ExitStatus.failure }
    }

    /// E-mail codes: where they go, and App Review addresses that have expired or will within 7 days.
    private func checkEmail(_ email: EmailSettings, _ add: (Finding.Status, String, String, String?) -> Void) {
        report(SetupChecks.email(email, now: Date(), describe: { describeInstant($0) }), add)
    }

    /// Findings the server's checks made (``SetupChecks``), in this report.
    private func report(_ findings: [SetupFinding], _ add: (Finding.Status, String, String, String?) -> Void) {
        for finding in findings { add(Finding.Status(rawValue: finding.status) ?? .error, finding.check, finding.message, finding.fix) }
    }

    /// What the store holds that needs the operator: Apple identities whose grant deletion cannot revoke, and an app
    /// transfer in progress. Skipped while there is no database yet.
    private func checkStore(_ configuration: ServerConfiguration, _ add: (Finding.Status, String, String, String?) -> Void) async {
        if case .sqlite(let path) = configuration.database, !FileManager.default.fileExists(atPath: path) { return }
        var logger = Logger(label: "latchkey")
        logger.logLevel = .critical
        let store: SQLAuthStore
        do {
            store = try await SQLAuthStore.open(configuration.database, logger: logger)
        } catch {
            add(.warning, "store", "could not read the store: \(Runtime.describe(error))", "check database.url")
            return
        }
        do {
            let missing = try await store.appleIdentitiesWithoutGrant()
            if missing > 0 {
                add(
                    .warning, "store.appleGrants",
                    "\(missing) Apple identities have no Apple refresh token (imported, or moved by an app transfer): deleting those users cannot revoke "
                        + "them at Apple", "each grant is obtained when its user next signs in with an authorization code; send the code from the app")
            }
            let transfer = try await store.appleTransferSummary()
            if transfer.prepared + transfer.refused > 0 {
                let now = Date()
                let status: Finding.Status = transfer.endedIncomplete(at: now) ? .error : transfer.left > 0 ? .warning : .ok
                let days = transfer.windowEndsAt.map { max(0, Int(($0.timeIntervalSince(now) / 86_400).rounded(.up))) }
                add(
                    status, "apple.transfer",
                    "app transfer to team \(transfer.targetTeam ?? "-"): \(transfer.prepared) prepared, \(transfer.moved) moved, \(transfer.left) left, "
                        + "\(transfer.refused) refused by Apple; " + (days.map { "\($0) day(s) left in the 60-day window" } ?? "window not started"),
                    transfer.left > 0 ? "run `latchkey apple transfer complete` with the recipient team's settings" : nil)
            }
        } catch {
            add(.warning, "store", "could not read the store: \(Runtime.describe(error))", nil)
        }
        await store.close()
    }

    /// The checks every set-up shares: encryption key, production settings, clock.
    private func finishChecks(reader: ConfigReader, mode: String, _ record: (Finding.Status, String, String, String?) -> Void) {
        func add(_ status: Finding.Status, _ check: String, _ message: String, fix: String? = nil) { record(status, check, message, fix) }
        // Encryption key and mode.
        // As `serve` reads it: the file wins when both are set.
        let encryptionKey =
            reader.string(forKey: "encryptionKeyFile").flatMap { try? String(contentsOfFile: $0, encoding: .utf8) }
            ?? reader.string(forKey: "encryptionKey", isSecret: true)
        if let encryptionKey {
            do {
                _ = try SecretBox(base64Key: encryptionKey)
                add(.ok, "encryptionKey", "32 bytes; Apple refresh tokens and signing keys are sealed with it")
            } catch {
                add(.error, "encryptionKey", error.reason, fix: "generate one: openssl rand -base64 32")
            }
        } else {
            add(
                mode == "production" ? .error : .warning, "encryptionKey",
                "not set" + (mode == "production" ? "" : "; development mode keeps a generated key in latchkey-data/"),
                fix: "set encryptionKeyFile to a file holding `openssl rand -base64 32`")
        }
        if mode == "production" {
            if let url = reader.string(forKey: "publicUrl"), url.hasPrefix("https://") {
                add(.ok, "publicUrl", "\(url)")
            } else {
                add(.error, "publicUrl", "production needs the HTTPS URL clients reach the server at", fix: "set publicUrl, e.g. https://auth.example.com")
            }
        }

        // Clock.
        let now = Date()
        if now.timeIntervalSince1970 < 1_735_689_600 {
            add(
                .error, "clock", "this machine's clock says \(describeInstant(now, now: now)), before 2025",
                fix: "fix the system clock (NTP): token expiry and client secrets depend on it")
        } else {
            add(.ok, "clock", "the system clock reads \(describeInstant(now, now: now))")
        }

    }

    /// Each configured provider other than Apple: its settings offline, and with --live its discovery and keys.
    private func checkProviders(_ configuration: ServerConfiguration?, _ add: (Finding.Status, String, String, String?) -> Void) async {
        guard let configuration else {
            if live { add(.error, "live", "skipped: fix the errors above first", nil) }
            return
        }
        // Generic OpenID Connect providers: their settings, and with --live their discovery and keys.
        var providerFindings = configuration.openIDProviders.flatMap(\.findings)
        if live {
            for provider in configuration.openIDProviders {
                providerFindings.append(
                    await .openIDPreflight(
                        OpenIDProvider(configuration: provider, transport: AsyncHTTPClientTransport()), provider.displayName,
                        settings: provider.policy.configurationKey ?? provider.name))
            }
        }
        if live {
            let context = ProviderContext(transport: AsyncHTTPClientTransport(), timeSource: .system, observer: nil)
            for module in configuration.providerModules { providerFindings += await module.liveFindings(context) }
        }
        for finding in providerFindings {
            add(Finding.Status(finding.level), finding.key, finding.message, finding.fix)
        }
        if configuration.signUp == .invite {
            add(.ok, "signup.mode", "invite: new users need a code from `latchkey invites create`", nil)
        }
        checkBrowserFlow(configuration, add)
        checkWebhooks(configuration, add)
    }

    /// What each webhook endpoint receives (its URL and secret were checked as the configuration was read).
    private func checkWebhooks(_ configuration: ServerConfiguration, _ add: (Finding.Status, String, String, String?) -> Void) {
        report(SetupChecks.webhooks(configuration), add)
    }

    /// The browser flow: each registered client, and the callback each provider must accept.
    private func checkBrowserFlow(_ configuration: ServerConfiguration, _ add: (Finding.Status, String, String, String?) -> Void) {
        report(SetupChecks.browserFlow(configuration), add)
    }

    private func report(_ findings: [Finding]) {
        let printer = Printer(json: json)
        if json {
            printer.emit([
                "findings": findings.map { finding -> [String: Any] in
                    var object: [String: Any] = ["status": finding.status.rawValue, "check": finding.check, "message": finding.message]
                    if let fix = finding.fix { object["fix"] = fix }
                    return object
                },
                "errors": findings.filter { $0.status == .error }.count,
                "warnings": findings.filter { $0.status == .warning }.count,
            ])
            return
        }
        for finding in findings {
            let label =
                switch finding.status {
                case .ok: printer.green("ok     ")
                case .warning: printer.yellow("warning")
                case .error: printer.red("error  ")
                }
            print("\(label) \(finding.check): \(finding.message)")
            if let fix = finding.fix, finding.status != .ok { print("        fix: \(fix)") }
        }
        let errors = findings.filter { $0.status == .error }.count
        let warnings = findings.filter { $0.status == .warning }.count
        print(errors == 0 ? printer.green("\nno errors, \(warnings) warning(s)") : printer.red("\n\(errors) error(s), \(warnings) warning(s)"))
    }
}
