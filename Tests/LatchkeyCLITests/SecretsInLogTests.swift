import Foundation
import LatchkeyTestSupport
import Testing

/// `serve` in production mode with every kind of secret configured, at log level trace, in both formats: its whole
/// output (start-up, services, shutdown) holds none of them.
@Suite("CLI: no configured secret reaches the log, at any level")
struct SecretsInLogTests {
    static let secrets = [
        "encryptionKey": "c2VjcmV0LWVuY3J5cHRpb24ta2V5LTMyLWJ5dGVzISE=",
        "google": "google-secret-9f2c41d7e3",
        "microsoft": "microsoft-secret-6b0e83a5c1",
        "oidc": "oidc-secret-2d7f19c4e8",
        "facebook": "facebook-secret-4a8c62e0b9",
        "dropbox": "dropbox-secret-8e1b57d3f6",
        "github": "github-secret-71d0a4c9e2",
        "gitlab": "gitlab-secret-3e85b1f06d",
        "slack": "slack-secret-c40f92e7a1",
        "discord": "discord-secret-5a2d7e8c03",
        "x": "x-secret-9b61c3f4d8",
        "line": "line-channel-secret-0d4e8a2f6b1c9e73",
        "client": "confidential-client-secret-5c9a",
        // A webhook endpoint's secret, and (checked below) its key without the prefix.
        "webhook": "whsec_d2ViaG9vay1zaWduaW5nLWtleS0zMi1ieXRlcy1sb25nISE=",
        // Under a misspelt key: the warning that names the key must not quote its value.
        "misspelt": "misspelt-secret-7f3e2a9d1c",
    ]

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
        let config: [String: Any] = [
            "mode": "production", "publicUrl": "https://auth.example.com", "port": 0, "encryptionKey": Self.secrets["encryptionKey"]!,
            "log": ["level": "trace", "format": format], "database": ["url": directory + "/latchkey.sqlite"],
            "apple": [
                "teamId": Fixtures.teamID, "keyId": Fixtures.keyID, "privateKeyFile": Fixtures.path("AuthKey_TESTKEY123.p8"), "clientIds": Fixtures.bundleID,
                "baseUrl": nowhere,
            ],
            "google": ["clientIds": "g.apps", "clientSecret": Self.secrets["google"]!, "discoveryUrl": nowhere + "/google"],
            "microsoft": ["clientIds": "m-app", "clientSecret": Self.secrets["microsoft"]!, "authority": nowhere + "/microsoft"],
            "oidc": ["providers": "corp", "corp": ["issuer": nowhere + "/oidc", "clientIds": "corp-app", "clientSecret": Self.secrets["oidc"]!]],
            "facebook": ["appId": "fb-app", "appSecret": Self.secrets["facebook"]!, "graphUrl": nowhere, "jwksUrl": nowhere + "/jwks"],
            "dropbox": ["appKey": "db-app", "appSecret": Self.secrets["dropbox"]!, "apiUrl": nowhere],
            "github": [
                "clientId": "gh-app", "clientSecret": Self.secrets["github"]!, "clientSecrte": Self.secrets["misspelt"]!, "baseUrl": nowhere,
                "apiUrl": nowhere,
            ],
            "gitlab": ["clientIds": "gl-app", "clientSecret": Self.secrets["gitlab"]!, "baseUrl": nowhere + "/gitlab"],
            "slack": ["clientIds": "sl-app", "clientSecret": Self.secrets["slack"]!, "issuer": nowhere + "/slack"],
            "discord": ["clientId": "dc-app", "clientSecret": Self.secrets["discord"]!, "baseUrl": nowhere],
            "x": ["clientId": "x-app", "clientSecret": Self.secrets["x"]!, "authorizeUrl": nowhere, "apiUrl": nowhere],
            "line": ["channelIds": "1657000000", "channelSecret": Self.secrets["line"]!, "issuer": nowhere + "/line"],
            "clients": [
                ["clientId": "web", "redirectUris": "https://app.example.com/cb", "type": "confidential", "clientSecret": Self.secrets["client"]!]
            ],
            "webhooks": [["url": nowhere + "/hooks", "secret": Self.secrets["webhook"]!]],
        ]
        try CLI.write(config, to: directory + "/latchkey.json")
        _ = try await CLI.run(["migrate", "--config", directory + "/latchkey.json"], directory: directory)
        let log = try await Self.serveOnce(config: directory + "/latchkey.json", directory: directory)
        #expect(log.contains("Latchkey listening"), "serve did not start: \(log.suffix(2000))")
        // The test means something only if trace lines were written, services' among them.
        #expect(log.contains("trace") && log.contains("MaintenanceService") && log.contains("WebhookDeliveryService"), "\(log.suffix(2000))")
        #expect(log.contains("github.clientSecrte, which is not a setting; did you mean github.clientSecret?"), "\(log.suffix(2000))")
        for (name, secret) in Self.secrets { #expect(!log.contains(secret), "the \(name) secret is in the log") }
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
