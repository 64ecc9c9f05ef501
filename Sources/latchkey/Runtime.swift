import Configuration
import Crypto
import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import Logging
import ServiceLifecycle
import SystemPackage

/// Composes a running Latchkey: configuration, store, encryption key, optional in-process emulator.
enum Runtime {
    /// Reads configuration: command-line overrides, then `LATCHKEY_*` environment variables, then the file, then defaults.
    /// `administrationOnly`: for commands that need only the store (see ``ServerConfiguration/administrationOnly``).
    /// Keys of the file and `LATCHKEY_*` variables that name no setting are warnings (with the nearest real name); when
    /// the configuration is refused, those with a near name are added to the reason (`apple.teamID` for `apple.teamId`).
    static func configuration(file: String?, overrides: [String: String], administrationOnly: Bool = false) async throws -> ServerConfiguration {
        let read = ReadKeys()
        let reader = try await configReader(file: file, overrides: overrides, reporting: read)
        let unknown = { UnknownSettings.findings(file: file, environment: ProcessInfo.processInfo.environment, known: read.known) }
        do {
            var configuration = try ServerConfiguration(reading: reader, administrationOnly: administrationOnly)
            configuration.warnings += unknown().map(\.warning)
            return configuration
        } catch {
            let slips = unknown().filter(\.hasSuggestion).map(\.warning)
            guard !slips.isEmpty else { throw error }
            throw CLIError("\(describe(error)) (\(slips.joined(separator: "; ")))")
        }
    }

    /// The sources every command reads settings from, in priority order; `serve` and `doctor` share it. `reporting`
    /// hears every key asked for.
    static func configReader(file: String?, overrides: [String: String] = [:], reporting: ReadKeys? = nil) async throws -> ConfigReader {
        var providers: [any ConfigProvider] = [
            InMemoryProvider(
                values: Dictionary(
                    uniqueKeysWithValues: overrides.map {
                        (AbsoluteConfigKey($0.key.split(separator: ".").map(String.init)), ConfigValue(.string($0.value), isSecret: false))
                    })),
            EnvironmentVariablesProvider().prefixKeys(with: ["latchkey"]),
        ]
        if let file {
            guard FileManager.default.fileExists(atPath: file) else { throw CLIError("configuration file \(file) does not exist") }
            do {
                providers.append(try await FileProvider<ConfigurationFileSnapshot>(filePath: FilePath(file)))
            } catch {
                guard let data = FileManager.default.contents(atPath: file), (try? JSONSerialization.jsonObject(with: data)) != nil else {
                    throw CLIError("configuration file \(file) is not valid JSON")
                }
                // Valid JSON the loader cannot take: say where, not "not valid JSON".
                throw CLIError(
                    "configuration file \(file) is valid JSON, but not a shape settings take: \(error); a setting is a string, number, boolean or "
                        + "array of them, inside objects, and only lists of records (clients, webhooks, email.reviewAccess) hold objects")
            }
        }
        return ConfigReader(providers: providers, accessReporter: reporting)
    }

    /// Settings that point every provider at an emulator on `baseURL`, with `clientIDs` registered at each
    /// (providers with one client id take the first): what `serve --dev` and `demo` run with. Apple's credentials are the team's.
    static func emulatedProviderSettings(baseURL: String, team: (teamID: String, keyID: String, keyFile: String), clientIDs: [String])
        -> [String: String]
    {
        let clientIDs = clientIDs.isEmpty ? ["com.example.app"] : clientIDs
        let ids = clientIDs.joined(separator: ",")
        return [
            "apple.teamId": team.teamID, "apple.keyId": team.keyID, "apple.privateKeyFile": team.keyFile, "apple.clientIds": ids, "apple.baseUrl": baseURL,
            "oidc.providers": "oidc", "oidc.oidc.issuer": baseURL + "/oidc", "oidc.oidc.clientIds": ids, "oidc.oidc.displayName": "Emulated OpenID Connect",
        ].merging(ProviderModules.emulatedSettings(emulatorBaseURL: baseURL, clientIDs: clientIDs)) { own, _ in own }
    }

    /// The configured key, or in development a key kept in `directory` (created on first use, mode 0600).
    static func encryptionKey(_ configuration: ServerConfiguration, directory: String) throws -> String {
        if let key = configuration.encryptionKey { return key.revealed }
        guard configuration.mode == .development else { throw CLIError("setting encryptionKey is required in production") }
        let path = (directory as NSString).appendingPathComponent("dev-encryption.key")
        if let existing = try? String(contentsOfFile: path, encoding: .utf8) { return existing.trimmingCharacters(in: .whitespacesAndNewlines) }
        let key = SecretBox.generateKey()
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try key.write(toFile: path, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        } catch {
            throw CLIError("could not keep the development encryption key in \(directory): \(describe(error))")
        }
        return key
    }

    /// The directory holding development files next to an SQLite database.
    static func dataDirectory(_ configuration: ServerConfiguration) -> String {
        if case .sqlite(let path) = configuration.database {
            let directory = (path as NSString).deletingLastPathComponent
            return directory.isEmpty ? "." : directory
        }
        return "latchkey-data"
    }

    static func openStore(_ configuration: ServerConfiguration, logger: Logger) async throws -> SQLAuthStore {
        let store: SQLAuthStore
        do {
            store = try await SQLAuthStore.open(configuration.database, maximumWriteBatch: configuration.databaseMaximumWriteBatch, logger: logger)
        } catch {
            throw CLIError("could not open the database at \(configuration.database): \(Self.describe(error))")
        }
        do {
            try await store.migrate()
        } catch {
            await store.close()
            throw CLIError("could not open or migrate the database at \(configuration.database): \(Self.describe(error))")
        }
        return store
    }

    /// An error in one line, without Foundation's wrapping.
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as LatchkeyError: error.reason
        case let error as CocoaError: "\(reason(of: error)) (\(error.filePath ?? "no path"))"
        default: "\(error)"
        }
    }

    /// The system's own reason ("Not a directory") where Foundation has one, else Foundation's generic sentence.
    private static func reason(of error: CocoaError) -> String {
        guard let underlying = error.underlying as NSError?, underlying.domain == NSPOSIXErrorDomain else { return error.localizedDescription }
        return String(cString: strerror(Int32(underlying.code)))
    }

    /// An emulator configuration for a development team, with the server's notification URL.
    /// With `serverIssuer`, each provider's page may also answer the browser flow at `{serverIssuer}/oauth2/callback/{provider}`,
    /// on loopback too (which Apple itself refuses).
    static func emulatorConfiguration(
        team: (teamID: String, keyID: String, keyFile: String), clientIDs: [String], notificationURL: String, serverIssuer: String? = nil
    ) throws -> EmulatorConfiguration {
        let pem = try String(contentsOfFile: team.keyFile, encoding: .utf8)
        let key = try P256.Signing.PrivateKey(pemRepresentation: pem)
        var configuration = EmulatorConfiguration()
        configuration.addTeam(teamID: team.teamID, keyID: team.keyID, publicKeyPEM: key.publicKey.pemRepresentation)
        let callbacks =
            serverIssuer.map { issuer in
                (ProviderModules.all.map { $0.name } + ["oidc"]).map {
                    LatchkeyServer.callbackURL(issuer: issuer, provider: $0)
                }
            }
            ?? []
        configuration.allowLoopbackRedirectURIs = serverIssuer != nil
        for clientID in clientIDs {
            let redirectURIs = ["https://app.example.com/callback"] + callbacks
            configuration.addApp(clientID: clientID, teamID: team.teamID, redirectURIs: redirectURIs, notificationURL: notificationURL)
            configuration.addClientEverywhere(clientID, redirectURIs: redirectURIs)
        }
        return configuration
    }
}

/// The JSON configuration file. swift-configuration reads arrays of strings and numbers only, so an array of
/// objects (`clients`, `email.reviewAccess`), at any depth, is read as an object keyed by index: `clients.0.clientId`,
/// as the environment spells it.
struct ConfigurationFileSnapshot: FileConfigSnapshot {
    typealias ParsingOptions = JSONSnapshot.ParsingOptions
    private let json: JSONSnapshot

    init(data: RawSpan, providerName: String, parsingOptions: ParsingOptions) throws {
        guard let object = try JSONSerialization.jsonObject(with: data.withUnsafeBytes { Data($0) }) as? [String: Any] else {
            json = try JSONSnapshot(data: data, providerName: providerName, parsingOptions: parsingOptions)
            return
        }
        let rewritten = [UInt8](try JSONSerialization.data(withJSONObject: Self.indexingArraysOfObjects(object)))
        json = try JSONSnapshot(data: rewritten.span.bytes, providerName: providerName, parsingOptions: parsingOptions)
    }

    /// `value` with every array that holds an object turned into an object keyed by index, at every depth.
    private static func indexingArraysOfObjects(_ value: Any) -> Any {
        if let object = value as? [String: Any] { return object.mapValues(indexingArraysOfObjects) }
        if let array = value as? [Any], array.contains(where: { $0 is [String: Any] }) {
            return [String: Any](uniqueKeysWithValues: array.enumerated().map { (String($0.offset), indexingArraysOfObjects($0.element)) })
        }
        return value
    }

    var providerName: String { json.providerName }
    func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult { try json.value(forKey: key, type: type) }
    var description: String { json.description }
    var debugDescription: String { json.debugDescription }
}

/// A command-line failure with a message for people; exits 1 (or 2 for usage).
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
