import ArgumentParser
import Crypto
import Foundation
import LatchkeyEmulator
import Logging
import ServiceLifecycle
import UnixSignals

/// `latchkey emulate`: Apple's (and Google's) identity endpoints, offline, on loopback.
struct Emulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run an offline stand-in for Sign in with Apple and Google's identity endpoints.",
        discussion: """
            Examples:
              latchkey emulate --generate ./emulator-team
              latchkey emulate --team-id TEAMID1234 --key-id KEYID12345 --key-file AuthKey_KEYID12345.p8 \\
                  --client-id com.example.app --client-id com.example.web --redirect-uri https://app.example.com/callback

            Point your server's Apple base URL at http://127.0.0.1:PORT; Google lives under /google.
            The control API (users, native sign-ins, consent revocation, faults, request log) is under /emulator/.
            """
    )

    @Option(help: "Port to listen on (0 picks a free one).") var port = 8081
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Team ID of the test team (10 upper-case letters and digits).") var teamID: String?
    @Option(help: "Key ID of the team's Sign in with Apple key.") var keyID: String?
    @Option(help: "The team's .p8 private key; the emulator keeps only its public half.") var keyFile: String?
    @Option(help: "A client id of the team (bundle id or Services ID); repeatable.") var clientID: [String] = []
    @Option(help: "A redirect URI registered for web sign-ins; repeatable.") var redirectURI: [String] = []
    @Option(help: "Where server-to-server notifications are POSTed.") var notificationURL: String?
    @Option(help: "A Google OAuth client id (public, PKCE); repeatable.") var googleClientID: [String] = []
    @Option(help: "Identity token lifetime in seconds.") var identityTokenLifetime: Double = 600
    @Option(help: "Apple boolean claims as 'strings' or 'booleans'.") var booleanStyle = "strings"
    @Option(help: "Account deletion event type: account-delete or account-deleted.") var accountDeletionEvent = "account-delete"
    @Flag(help: "Allow plain-HTTP redirect URIs on domain names (for local web apps behind a hosts entry).") var allowHTTPRedirects = false
    @Option(help: "Create (or reuse) a test team in DIR: a .p8 key, its key id and team id.") var generate: String?

    func validate() throws {
        if generate == nil {
            guard teamID != nil, keyID != nil, keyFile != nil else {
                throw ValidationError("pass --team-id, --key-id and --key-file, or --generate DIR to create a test team")
            }
        }
        guard EmulatorConfiguration.BooleanStyle(rawValue: booleanStyle) != nil else { throw ValidationError("--boolean-style is strings or booleans") }
        guard ["account-delete", "account-deleted"].contains(accountDeletionEvent) else {
            throw ValidationError("--account-deletion-event is account-delete or account-deleted")
        }
    }

    func run() async throws {
        let team = try generate.map(TestTeam.createOrLoad(in:)) ?? (teamID: teamID ?? "", keyID: keyID ?? "", keyFile: keyFile ?? "")
        let pem: String
        do {
            pem = try String(contentsOfFile: team.keyFile, encoding: .utf8)
        } catch {
            throw ValidationError("cannot read --key-file \(team.keyFile)")
        }
        guard let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) else {
            throw ValidationError("\(team.keyFile) is not a PKCS#8 P-256 private key (.p8)")
        }
        var configuration = EmulatorConfiguration()
        configuration.addTeam(teamID: team.teamID, keyID: team.keyID, publicKeyPEM: key.publicKey.pemRepresentation)
        let clientIDs = clientID.isEmpty ? ["com.example.app", "com.example.web"] : clientID
        for id in clientIDs {
            configuration.addApp(
                clientID: id, teamID: team.teamID, redirectURIs: redirectURI.isEmpty ? ["https://app.example.com/callback"] : redirectURI,
                notificationURL: notificationURL)
        }
        // The Google client ids and the Apple ones are registered at every other provider too (Microsoft, Facebook,
        // Dropbox, OpenID Connect), so one id works with any stand-in.
        for id in clientIDs + (googleClientID.isEmpty ? ["emulator-google-client"] : googleClientID) {
            configuration.addClientEverywhere(id, redirectURIs: redirectURI.isEmpty ? ["https://app.example.com/callback"] : redirectURI)
        }
        configuration.identityTokenLifetime = identityTokenLifetime
        configuration.booleanStyle = EmulatorConfiguration.BooleanStyle(rawValue: booleanStyle)!
        configuration.accountDeletionEventType = accountDeletionEvent
        configuration.allowHTTPRedirectURIs = allowHTTPRedirects

        var logger = Logger(label: "latchkey.emulator")
        logger.logLevel = .warning
        let emulator = try Emulator(configuration: configuration, logger: logger)
        let application = emulator.makeApplication(host: host, port: port) { bound in
            print(
                """
                Latchkey emulator listening on http://\(host):\(bound)
                  Apple:  http://\(host):\(bound)/auth/keys, /auth/token, /auth/revoke, /auth/authorize
                  Google: http://\(host):\(bound)/google/.well-known/openid-configuration
                  Microsoft: http://\(host):\(bound)/microsoft/common/v2.0/.well-known/openid-configuration
                  Facebook: http://\(host):\(bound)/facebook/.well-known/openid-configuration/
                  Dropbox: http://\(host):\(bound)/dropbox/oauth2/token, /dropbox/2/users/get_current_account
                  GitHub: http://\(host):\(bound)/github/login/oauth/access_token, /github/api/user
                  OpenID Connect: http://\(host):\(bound)/oidc/.well-known/openid-configuration
                  Control API: http://\(host):\(bound)/emulator/

                Server configuration for this team:
                  LATCHKEY_APPLE_TEAM_ID=\(team.teamID)
                  LATCHKEY_APPLE_KEY_ID=\(team.keyID)
                  LATCHKEY_APPLE_PRIVATE_KEY_FILE=\(team.keyFile)
                  LATCHKEY_APPLE_CLIENT_IDS=\(clientIDs.joined(separator: ","))
                  LATCHKEY_APPLE_BASE_URL=http://\(host):\(bound)
                """)
            flushStandardOutput()
        }
        let group = ServiceGroup(services: [application, emulator.notificationService], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}

/// A test team kept in a directory: `AuthKey_<KEYID>.p8` and `team.json`.
enum TestTeam {
    static func createOrLoad(in directory: String) throws -> (teamID: String, keyID: String, keyFile: String) {
        let manager = FileManager.default
        try manager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let teamFile = (directory as NSString).appendingPathComponent("team.json")
        if let data = manager.contents(atPath: teamFile), let saved = try? JSONDecoder().decode([String: String].self, from: data),
            let teamID = saved["teamID"], let keyID = saved["keyID"], let keyFile = saved["keyFile"], manager.fileExists(atPath: keyFile)
        {
            return (teamID, keyID, keyFile)
        }
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        let teamID = String((0..<10).map { _ in alphabet.randomElement()! })
        let keyID = String((0..<10).map { _ in alphabet.randomElement()! })
        let keyFile = (directory as NSString).appendingPathComponent("AuthKey_\(keyID).p8")
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        try manager.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyFile)
        let saved = ["teamID": teamID, "keyID": keyID, "keyFile": (keyFile as NSString).standardizingPath]
        try JSONEncoder().encode(saved).write(to: URL(fileURLWithPath: teamFile))
        return (teamID, keyID, saved["keyFile"]!)
    }
}

/// Scripts read the printed configuration through a pipe, where stdout is block-buffered.
func flushStandardOutput() {
    fflush(nil)
}
