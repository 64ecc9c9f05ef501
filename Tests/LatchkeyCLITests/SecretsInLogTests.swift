import Foundation
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

/// `serve` in production mode with every kind of secret configured, at log level trace, in both formats: its whole
/// output (start-up, services, shutdown) holds none of them.
@Suite("CLI: no configured secret reaches the log, at any level")
struct SecretsInLogTests {
    static let secrets = [
        "encryptionKey": "c2VjcmV0LWVuY3J5cHRpb24ta2V5LTMyLWJ5dGVzISE=",
        "oidc": "oidc-secret-2d7f19c4e8",
        "client": "confidential-client-secret-5c9a",
        // A webhook endpoint's secret, and (checked below) its key without the prefix.
        "webhook": "whsec_d2ViaG9vay1zaWduaW5nLWtleS0zMi1ieXRlcy1sb25nISE=",
        // Under a misspelt key: the warning that names the key must not quote its value.
        "misspelt": "misspelt-secret-7f3e2a9d1c",
        // The SMTP server's password (in its URL) and an App Review code.
        "smtp": "smtp-password-9e4b7c1d2a",
        "review": "7319046285",
    ]

    /// Every module of the registry but Apple (whose key is the fixture's .p8 file), configured as `serve --dev` points it
    /// at an emulator, here at `nowhere`, with a value of its own (32 characters or more) for each secret setting: a
    /// setting read inline or from a file (`clientSecret / clientSecretFile`). By module name, and the secrets by full key.
    static func modules(at nowhere: String) -> (settings: [String: [String: String]], secrets: [String: String]) {
        var settings: [String: [String: String]] = [:]
        var secrets: [String: String] = [:]
        for module in ProviderModules.all where module.name != AppleModule.name {
            var values = module.emulatedSettings(baseURL: nowhere + "/" + module.name, clientIDs: ["\(module.name)-app"])
            for setting in module.settings {
                let keys = setting.key.components(separatedBy: " / ")
                guard keys.count == 2, keys[1] == keys[0] + "File" else { continue }
                let secret = "\(module.name)-\(keys[0])-" + String(UUID().uuidString.filter(\.isHexDigit).lowercased().prefix(24))
                values[keys[0]] = secret
                secrets[module.name + "." + keys[0]] = secret
            }
            settings[module.name] = values
        }
        return (settings, secrets)
    }

    /// The private key's base64 lines: any one of them in the log gives part of the key away.
    static var privateKeyLines: [String] {
        Fixtures.p8.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("-----") && $0.count >= 16 }
    }

    @Test(
        "serve at trace, text and JSON: the log never holds the encryption key, the .p8 key, any client secret or a webhook secret",
        arguments: ["text", "json"])
    func noSecretInLog(format: String) async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let nowhere = "http://127.0.0.1:9"
        let modules = Self.modules(at: nowhere)
        #expect(modules.secrets.count >= 2, "the registry's secret settings: \(modules.secrets.keys.sorted())")
        var config: [String: Any] = [
            "mode": "production", "publicUrl": "https://auth.example.com", "port": 0, "encryptionKey": Self.secrets["encryptionKey"]!,
            "log": ["level": "trace", "format": format], "database": ["url": directory + "/latchkey.sqlite"],
            "apple": [
                "teamId": Fixtures.teamID, "keyId": Fixtures.keyID, "privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"), "clientIds": Fixtures.bundleID,
                "baseUrl": nowhere,
            ],
            "oidc": ["providers": "corp", "corp": ["issuer": nowhere + "/oidc", "clientIds": "corp-app", "clientSecret": Self.secrets["oidc"]!]],
            "clients": [
                ["clientId": "web", "redirectUris": "https://app.example.com/cb", "type": "confidential", "clientSecret": Self.secrets["client"]!]
            ],
            "webhooks": [["url": nowhere + "/hooks", "secret": Self.secrets["webhook"]!]],
            "email": [
                "smtp": ["url": "smtp://codes:\(Self.secrets["smtp"]!)@127.0.0.1:1"], "from": "sign-in@example.com",
                "reviewAccess": [["address": "review@example.com", "code": Self.secrets["review"]!, "expiresAt": "2099-01-01T00:00:00Z"]],
            ],
        ]
        config.merge(modules.settings) { own, _ in own }
        var github = try #require(config["github"] as? [String: String], "GitHub is the module the misspelt key goes under")
        github["clientSecrte"] = Self.secrets["misspelt"]!
        config["github"] = github
        try CLI.write(config, to: directory + "/latchkey.json")
        _ = try await CLI.run(["migrate", "--config", directory + "/latchkey.json"], directory: directory)
        let log = try await Self.serveOnce(config: directory + "/latchkey.json", directory: directory)
        #expect(log.contains("Latchkey listening"), "serve did not start: \(log.suffix(2000))")
        // The test means something only if trace lines were written, services' among them.
        #expect(log.contains("trace") && log.contains("MaintenanceService") && log.contains("WebhookDeliveryService"), "\(log.suffix(2000))")
        #expect(log.contains("github.clientSecrte, which is not a setting; did you mean github.clientSecret?"), "\(log.suffix(2000))")
        for (name, secret) in Self.secrets.merging(modules.secrets, uniquingKeysWith: { $1 }) {
            #expect(!log.contains(secret), "the \(name) secret is in the log")
        }
        #expect(!log.contains(Self.secrets["webhook"]!.dropFirst("whsec_".count)), "the webhook signing key is in the log")
        for line in Self.privateKeyLines { #expect(!log.contains(line), "a line of the Apple private key is in the log") }
    }

    /// Runs `serve` until it listens, a second more (the services start, the JWKS refresh fails), then stops it with
    /// SIGTERM (sent only once it listens: a signal before its handler is set up would be lost) and returns all it wrote.
    static func serveOnce(config: String, directory: String) async throws -> String {
        let logPath = directory + "/serve.log"
        guard FileManager.default.createFile(atPath: logPath, contents: nil) else { throw HarnessError("cannot write \(logPath)") }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        defer { try? output.close() }
        let process = Process()
        process.executableURL = CLI.executable
        process.arguments = ["serve", "--config", config]
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LATCHKEY_") }
        (process.standardOutput, process.standardError) = (output, output)
        try process.run()
        func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
        try await poll(until: "serve to listen (or exit)", within: .seconds(60), every: .milliseconds(100)) {
            log().contains("Latchkey listening") || !process.isRunning
        }
        try await Task.sleep(for: .seconds(1))  // the services' start-up lines come just after
        process.terminate()
        try? await poll(until: "serve to stop", within: .seconds(30), every: .milliseconds(100)) { !process.isRunning }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            Issue.record("serve did not stop within 30 s of SIGTERM")
        }
        return log()
    }
}
