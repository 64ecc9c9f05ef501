import ArgumentParser
import Configuration
import Foundation
import LatchkeyCore
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import Logging
import SystemPackage

/// `latchkey doctor`: finds what is wrong with a Sign in with Apple set-up, offline, and with `--live` at Apple.
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
        enum Status: String { case ok, warning, error }
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
        do {
            reader = try await Runtime.configReader(file: config)
            if let config { add(.ok, "config", "\(config) is valid JSON") }
        } catch {
            add(.error, "config", "\(error)", fix: "check the path and the JSON syntax")
            reader = try await Runtime.configReader(file: nil)
        }
        var serverConfiguration: ServerConfiguration?
        do {
            let configuration = try ServerConfiguration(reading: reader)
            for warning in configuration.warnings { add(.warning, "config", warning, fix: "change the setting it names") }
            serverConfiguration = configuration
        } catch {
            add(.error, "config", "latchkey serve refuses this configuration: \(error.reason)", fix: "change the setting it names")
        }
        let mode = reader.string(forKey: "mode") ?? "development"

        // Apple credentials, each on its own so every problem shows.
        let teamID = reader.string(forKey: "apple.teamId")
        let keyID = reader.string(forKey: "apple.keyId")
        let keyFile = reader.string(forKey: "apple.privateKeyFile")
        let inlineKey = reader.string(forKey: "apple.privateKey", isSecret: true)
        let clientIDs = ServerConfiguration.list(reader, "apple.clientIds") ?? []
        let baseURL = reader.string(forKey: "apple.baseUrl") ?? "https://appleid.apple.com"
        var keyPEM: String?
        let otherProviders = (serverConfiguration?.providerNames ?? []).filter { $0 != "apple" }
        await checkProviders(serverConfiguration, add)
        let appleSet = teamID != nil || keyID != nil || keyFile != nil || inlineKey != nil || !clientIDs.isEmpty
        if !appleSet && !otherProviders.isEmpty {
            add(.ok, "apple", "Sign in with Apple is not configured; \(otherProviders.joined(separator: ", ")) \(otherProviders.count == 1 ? "is" : "are")")
            finishChecks(reader: reader, mode: mode, add)
            report(findings)
            if findings.contains(where: { $0.status == .error }) { throw ExitStatus.failure }
            return
        }

        if let teamID {
            checkIdentifier(teamID, "apple.teamId", "the Team ID shown under Membership in the developer portal", add)
        } else {
            add(.error, "apple.teamId", "not set", fix: "set apple.teamId (LATCHKEY_APPLE_TEAM_ID) to your 10-character Team ID")
        }
        if let keyID {
            checkIdentifier(keyID, "apple.keyId", "the Key ID next to your Sign in with Apple key (Certificates, Identifiers & Profiles → Keys)", add)
        } else {
            add(.error, "apple.keyId", "not set", fix: "set apple.keyId to the 10-character Key ID")
        }
        if let keyFile {
            if let text = try? String(contentsOfFile: keyFile, encoding: .utf8) {
                keyPEM = text
                let name = (keyFile as NSString).lastPathComponent
                if let keyID, name.hasPrefix("AuthKey_"), name != "AuthKey_\(keyID).p8" {
                    add(
                        .warning, "apple.keyId", "the key file is named \(name) but apple.keyId is \(keyID)",
                        fix: "Apple names the download AuthKey_<KEYID>.p8: use that file's key id, or the matching file")
                }
            } else {
                add(
                    .error, "apple.privateKeyFile", "\(keyFile) cannot be read",
                    fix: "point apple.privateKeyFile at the .p8 file and make it readable by the server user")
            }
        } else if let inlineKey {
            keyPEM = inlineKey
        } else {
            add(.error, "apple.privateKeyFile", "not set", fix: "set apple.privateKeyFile to the .p8 downloaded for the Sign in with Apple key")
        }
        if let keyPEM {
            do {
                _ = try AppleSigningCredentials(teamID: "AAAAAAAAAA", keyID: "AAAAAAAAAA", privateKeyPEM: keyPEM)
                add(.ok, "apple.privateKeyFile", "the key is a PKCS#8 P-256 (ES256) key")
            } catch {
                add(
                    .error, "apple.privateKeyFile", error.reason,
                    fix: "download the key again from the developer portal (it can be downloaded once) or create a new one with Sign in with Apple enabled")
            }
        }
        if clientIDs.isEmpty {
            add(.error, "apple.clientIds", "not set", fix: "list your app's bundle id and, for web sign-ins, your Services ID, comma-separated")
        } else {
            for clientID in clientIDs {
                let shape = clientID.split(separator: ".").count >= 2 && !clientID.contains(" ") && clientID == clientID.trimmingCharacters(in: .whitespaces)
                if !shape {
                    add(
                        .error, "apple.clientIds", "\"\(clientID)\" does not look like a bundle id or Services ID (reverse-DNS, e.g. com.example.app)",
                        fix: "copy the identifier from Certificates, Identifiers & Profiles")
                } else if let teamID, clientID.hasPrefix(teamID + ".") {
                    add(
                        .error, "apple.clientIds", "\"\(clientID)\" starts with the Team ID",
                        fix: "use the bundle id without the team prefix (Apple's client_id never includes the Team ID)")
                } else {
                    add(
                        .ok, "apple.clientIds",
                        "\(clientID): native sign-ins from an app with this bundle id, or web sign-ins if it is a Services ID, are accepted")
                }
            }
            if clientIDs.count == 1 {
                add(
                    .warning, "apple.clientIds", "only one client id",
                    fix: "native tokens carry the bundle id, web tokens the Services ID: add the Services ID if you also sign in on the web (else ignore this)")
            }
        }
        for uri in ServerConfiguration.list(reader, "apple.redirectUris") ?? [] {
            if let problem = redirectURIProblem(uri) {
                add(
                    .error, "apple.redirectUris", "\(uri): \(problem)",
                    fix:
                        "Apple accepts only HTTPS redirect URIs on a domain name (no IP address, no localhost, no fragment); use a real domain, e.g. through a tunnel, for local web sign-in tests"
                )
            } else {
                add(
                    .ok, "apple.redirectUris",
                    "\(uri) has the shape Apple accepts; it must also be registered on the Services ID and sent unchanged when redeeming web codes")
            }
        }
        if let url = reader.string(forKey: "apple.notificationUrl") {
            if !url.hasPrefix("https://") {
                add(
                    .error, "apple.notificationUrl", "\(url) is not HTTPS",
                    fix: "Apple delivers server-to-server notifications only to HTTPS endpoints (TLS 1.2+)")
            } else if !url.hasSuffix("/v1/apple/notifications") {
                add(
                    .warning, "apple.notificationUrl", "\(url) does not end in /v1/apple/notifications",
                    fix:
                        "register https://<your host>/v1/apple/notifications in the developer portal (Sign in with Apple → server-to-server notification endpoint)"
                )
            } else {
                add(.ok, "apple.notificationUrl", "\(url) points at Latchkey's notification endpoint")
            }
        } else {
            add(
                .warning, "apple.notificationUrl", "not set",
                fix:
                    "register https://<your host>/v1/apple/notifications with Apple so consent revocations and deletions reach Latchkey at once (the daily check catches them otherwise)"
            )
        }
        if !baseURL.hasPrefix("https://") && !baseURL.contains("127.0.0.1") && !baseURL.contains("localhost") {
            add(.warning, "apple.baseUrl", "\(baseURL) is not HTTPS", fix: "use https://appleid.apple.com (the default) outside tests")
        }

        finishChecks(reader: reader, mode: mode, add)

        if live {
            await liveChecks(teamID: teamID, keyID: keyID, keyPEM: keyPEM, clientIDs: clientIDs, baseURL: baseURL, add)
        }

        report(findings)
        if findings.contains(where: { $0.status == .error }) { throw ExitStatus.failure }
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
        guard let configuration else { return }
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
        providerFindings += configuration.providerModules.flatMap(\.findings)
        if live {
            let context = ProviderContext(transport: AsyncHTTPClientTransport(), timeSource: .system, observer: nil)
            for module in configuration.providerModules { providerFindings += await module.liveFindings(context) }
        }
        for finding in providerFindings {
            add(finding.level == .ok ? .ok : finding.level == .warning ? .warning : .error, finding.key, finding.message, finding.fix)
        }
        if configuration.signUp == .invite {
            add(.ok, "signup.mode", "invite: new users need a code from `latchkey invites create`", nil)
        }
        checkBrowserFlow(configuration, add)
        checkWebhooks(configuration, add)
    }

    /// The browser flow: each registered client, and the callback Apple must accept.
    /// What each webhook endpoint receives (its URL and secret were checked as the configuration was read).
    private func checkWebhooks(_ configuration: ServerConfiguration, _ add: (Finding.Status, String, String, String?) -> Void) {
        for (index, endpoint) in configuration.webhooks.enumerated() {
            let events = endpoint.events.map { $0.map(\.rawValue).sorted().joined(separator: ", ") } ?? "every event type"
            add(.ok, "webhooks[\(index)]", "\(endpoint.url) receives \(events); `latchkey webhooks test \(index)` sends it a signed test event", nil)
        }
    }

    private func checkBrowserFlow(_ configuration: ServerConfiguration, _ add: (Finding.Status, String, String, String?) -> Void) {
        for client in configuration.clients {
            add(
                .ok, "clients",
                "\(client.clientID): \(client.kind.rawValue) client, \(client.redirectURIs.count) redirect URI(s), providers \((client.providers ?? configuration.providerNames.filter { $0 != "facebook" }).joined(separator: ", "))",
                nil)
        }
        guard !configuration.clients.isEmpty, configuration.apple != nil, configuration.clients.contains(where: { $0.allows(provider: "apple") }) else {
            return
        }
        let callback = LatchkeyServer.callbackURL(issuer: configuration.issuer, provider: "apple")
        if let problem = redirectURIProblem(callback) {
            add(
                .warning, "publicUrl", "Sign in with Apple on the web answers at \(callback), which Apple refuses (\(problem))",
                "set publicUrl to the server's https URL on a domain name and register \(callback) as a return URL of the Services ID")
        } else {
            add(
                .ok, "apple.servicesId",
                "register \(callback) as a return URL of the Services ID \(configuration.apple?.servicesID ?? configuration.apple?.clientIDs.first ?? "")", nil)
        }
    }

    private func checkIdentifier(_ value: String, _ setting: String, _ source: String, _ add: (Finding.Status, String, String, String?) -> Void) {
        if value.count == 10, value.allSatisfy({ $0.isUppercase || $0.isNumber }), value.allSatisfy(\.isASCII) {
            add(.ok, setting, "\(value) has the right shape", nil)
        } else {
            add(.error, setting, "\"\(value)\" is not 10 upper-case letters and digits", "use \(source)")
        }
    }

    private func redirectURIProblem(_ uri: String) -> String? {
        guard let url = URLComponents(string: uri), let host = url.host, !host.isEmpty else { return "not a URL" }
        if url.scheme != "https" { return "not HTTPS" }
        if host == "localhost" || host.hasSuffix(".localhost") { return "localhost is refused" }
        if host.split(separator: ".").count == 4 && host.split(separator: ".").allSatisfy({ UInt8($0) != nil }) || host.contains(":") {
            return "an IP address is refused"
        }
        if url.fragment != nil { return "a fragment (#…) is refused" }
        return nil
    }

    /// Redeems an invalid code for each client id: Apple's answer tells whether it accepted the client.
    private func liveChecks(
        teamID: String?, keyID: String?, keyPEM: String?, clientIDs: [String], baseURL: String, _ add: (Finding.Status, String, String, String?) -> Void
    ) async {
        guard let teamID, let keyID, let keyPEM, !clientIDs.isEmpty,
            let credentials = try? AppleSigningCredentials(teamID: teamID, keyID: keyID, privateKeyPEM: keyPEM)
        else {
            add(.error, "live", "skipped: fix the errors above first", nil)
            return
        }
        guard
            let client = try? AppleClient(
                configuration: AppleConfiguration(credentials: credentials, clientIDs: clientIDs, baseURL: baseURL, requestTimeout: .seconds(10), retry: .never)
            )
        else {
            add(.error, "live", "cannot build the Apple client", nil)
            return
        }
        for clientID in clientIDs {
            do {
                _ = try await client.exchangeCode("latchkey-doctor-invalid-code", clientID: clientID)
                add(.warning, "live", "\(clientID): \(baseURL) accepted a made-up code", "this is not Apple's behaviour; check apple.baseUrl")
            } catch {
                switch error.code {
                case .invalidGrant:
                    add(.ok, "live", "\(clientID): \(baseURL) accepted the client secret (it refused only the made-up code: invalid_grant)", nil)
                case .invalidClient:
                    add(
                        .error, "live", "\(clientID): \(baseURL) answered invalid_client — it did not accept the client",
                        "check, most likely first:\n      " + error.likelyCauses.joined(separator: "\n      "))
                case .providerUnavailable, .providerRateLimited:
                    add(.error, "live", "\(clientID): \(error.reason)", "check network access to \(baseURL)")
                default:
                    add(.warning, "live", "\(clientID): \(error.errorCode) — \(error.reason)", nil)
                }
            }
        }
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
