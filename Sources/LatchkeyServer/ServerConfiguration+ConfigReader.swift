public import Configuration
import Foundation
public import LatchkeyCore
import LatchkeyStore
import Logging

extension ServerConfiguration {
    /// Reads the configuration. Keys (JSON file paths; environment variables are `LATCHKEY_` + the key in
    /// upper snake case, e.g. `apple.teamId` → `LATCHKEY_APPLE_TEAM_ID`):
    ///
    /// | key | type | default |
    /// | --- | --- | --- |
    /// | `mode` | `development` or `production` | `development` |
    /// | `host`, `port` | string, int | `127.0.0.1`, `8080` |
    /// | `publicUrl` | URL, the access tokens' `iss` | `http://host:port` |
    /// | `audience` | the access tokens' `aud` | `latchkey` |
    /// | `database.url` | `postgres://…`, `sqlite://path` or a path | `latchkey-data/latchkey.sqlite` |
    /// | `database.maxWriteBatch` | writes sharing one commit | 512 |
    /// | `encryptionKey` / `encryptionKeyFile` | 32 bytes base64 (secret) | generated in development |
    /// | `accessToken.lifetime` | seconds | 600 |
    /// | `session.idleLifetime`, `session.absoluteLifetime`, `session.reuseGrace` | seconds | 30 d, 180 d, 10 |
    /// | `apple.teamId`, `apple.keyId` | 10 characters | — |
    /// | `apple.privateKey` / `apple.privateKeyFile` | the `.p8` PEM (secret) | — |
    /// | `apple.clientIds` | comma-separated bundle ids and Services IDs | — |
    /// | `apple.baseUrl` | URL | `https://appleid.apple.com` |
    /// | `apple.redirectUris` | comma-separated, for web codes | none |
    /// | `apple.nonceMatching` | `hashed`, `verbatim`, `hashed_or_verbatim` | `hashed` |
    /// | `apple.requireNonce` | bool: refuse identity tokens without a nonce | true |
    /// | `http.trustedProxies` | a hop count, or comma-separated CIDRs of the proxies in front | none |
    /// | `http.trustForwardedFor` | deprecated: `true` means `http.trustedProxies` = 1 | false |
    /// | `log.level` | `trace`, `debug`, `info`, `notice`, `warning`, `error`, `critical` | `info` |
    /// | `log.format` | `text` or `json` (one object a line) | `text` |
    /// | `apple.validationInterval`, `apple.unreachableGrace` | seconds | 86400, 259200 |
    /// | `rateLimit.perIp`, `rateLimit.perSubject` | requests per minute | 120, 30 |
    /// | `http.maxBodySize` | bytes | 16384 |
    /// | `cors.allowedOrigins` | comma-separated origins | none |
    public init(reading config: ConfigReader) throws(LatchkeyError) {
        self.init()
        if let mode = config.string(forKey: "mode") {
            guard let parsed = Mode(rawValue: mode) else { throw setting("mode", "is \"\(mode)\"; use development or production") }
            self.mode = parsed
        }
        host = config.string(forKey: "host") ?? host
        port = try Self.int(config, "port") ?? port
        publicURL = config.string(forKey: "publicUrl")
        audience = config.string(forKey: "audience") ?? audience
        if let url = config.string(forKey: "database.url", isSecret: true) {
            do { database = try StoreLocation(url: url) } catch { throw setting("database.url", "is invalid: \(error.reason)") }
        }
        databaseMaximumWriteBatch = try Self.int(config, "database.maxWriteBatch") ?? databaseMaximumWriteBatch
        encryptionKey = try Self.secret(config, "encryptionKey", fileKey: "encryptionKeyFile")
        accessTokenLifetime = try Self.double(config, "accessToken.lifetime") ?? accessTokenLifetime
        session.refreshIdleLifetime = try Self.double(config, "session.idleLifetime") ?? session.refreshIdleLifetime
        session.refreshAbsoluteLifetime = try Self.double(config, "session.absoluteLifetime") ?? session.refreshAbsoluteLifetime
        session.reuseGraceWindow = try Self.double(config, "session.reuseGrace") ?? session.reuseGraceWindow
        session.providerValidationInterval = try Self.double(config, "apple.validationInterval") ?? session.providerValidationInterval
        session.providerUnreachableGrace = try Self.double(config, "apple.unreachableGrace") ?? session.providerUnreachableGrace
        rateLimit.perClientIP = try Self.int(config, "rateLimit.perIp") ?? rateLimit.perClientIP
        rateLimit.perSubject = try Self.int(config, "rateLimit.perSubject") ?? rateLimit.perSubject
        maximumBodySize = try Self.int(config, "http.maxBodySize") ?? maximumBodySize
        corsAllowedOrigins = Self.list(config, "cors.allowedOrigins") ?? []
        if let proxies = Self.list(config, "http.trustedProxies") ?? config.int(forKey: "http.trustedProxies").map({ [String($0)] }) {
            do { trustedProxies = try TrustedProxies(parsing: proxies) } catch { throw setting("http.trustedProxies", error.reason) }
        } else if try Self.bool(config, "http.trustForwardedFor") == true {
            trustedProxies = .hops(1)
            warnings.append(
                "setting http.trustForwardedFor is deprecated and now means http.trustedProxies = 1 (one proxy in front); set http.trustedProxies instead")
        }
        if let level = config.string(forKey: "log.level") {
            guard let parsed = Logger.Level(rawValue: level.lowercased()) else {
                throw setting("log.level", "is \"\(level)\"; use trace, debug, info, notice, warning, error or critical")
            }
            logLevel = parsed
        }
        if let format = config.string(forKey: "log.format") {
            guard let parsed = LogFormat(rawValue: format.lowercased()) else { throw setting("log.format", "is \"\(format)\"; use text or json") }
            logFormat = parsed
        }

        let teamID = config.string(forKey: "apple.teamId")
        let keyID = config.string(forKey: "apple.keyId")
        let key = try Self.secret(config, "apple.privateKey", fileKey: "apple.privateKeyFile")
        let clientIDs = Self.list(config, "apple.clientIds")
        if teamID != nil || keyID != nil || key != nil || clientIDs != nil {
            guard let teamID else { throw setting("apple.teamId", "is missing (the other apple.* settings are set)") }
            guard let keyID else { throw setting("apple.keyId", "is missing (the other apple.* settings are set)") }
            guard let key else { throw setting("apple.privateKeyFile", "is missing: point it at the .p8 file (or set apple.privateKey)") }
            guard let clientIDs, !clientIDs.isEmpty else {
                throw setting("apple.clientIds", "is missing: list your bundle id and Services ID, comma-separated")
            }
            var nonceMatching = NonceMatching.hashed
            if let mode = config.string(forKey: "apple.nonceMatching") {
                guard let parsed = NonceMatching(rawValue: mode) else {
                    throw setting("apple.nonceMatching", "is \"\(mode)\"; use hashed, verbatim or hashed_or_verbatim")
                }
                nonceMatching = parsed
                if parsed != .hashed {
                    warnings.append(
                        "apple.nonceMatching is \(mode): a token whose nonce claim is the raw nonce itself carries the proof with it, so a stolen token signs in anyway; use hashed (the default: the app puts SHA-256 of its raw nonce in the request)"
                    )
                }
            }
            apple = Apple(
                teamID: teamID, keyID: keyID, privateKeyPEM: key, clientIDs: clientIDs,
                baseURL: config.string(forKey: "apple.baseUrl") ?? "https://appleid.apple.com",
                redirectURIs: Self.list(config, "apple.redirectUris") ?? [], nonceMatching: nonceMatching,
                requireNonce: try Self.bool(config, "apple.requireNonce") ?? true
            )
        }
        try validate()
    }

    private static func int(_ config: ConfigReader, _ key: ConfigKey) throws(LatchkeyError) -> Int? {
        guard let text = config.string(forKey: key) else { return config.int(forKey: key) }
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)) else { throw setting(key.description, "is \"\(text)\", not a whole number") }
        return value
    }

    private static func double(_ config: ConfigReader, _ key: ConfigKey) throws(LatchkeyError) -> Double? {
        guard let text = config.string(forKey: key) else { return config.double(forKey: key) ?? config.int(forKey: key).map(Double.init) }
        guard let value = Double(text.trimmingCharacters(in: .whitespaces)) else { throw setting(key.description, "is \"\(text)\", not a number of seconds") }
        return value
    }

    private static func bool(_ config: ConfigReader, _ key: ConfigKey) throws(LatchkeyError) -> Bool? {
        guard let text = config.string(forKey: key) else { return config.bool(forKey: key) }
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "true", "1", "yes": return true
        case "false", "0", "no": return false
        default: throw setting(key.description, "is \"\(text)\", not true or false")
        }
    }

    /// A list setting as `serve` reads it: a JSON array of strings, or one comma-separated string.
    public static func list(_ config: ConfigReader, _ key: ConfigKey) -> [String]? {
        if let array = config.stringArray(forKey: key) { return array.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
        return config.string(forKey: key).map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
    }

    /// A secret given inline or as a file path; the file wins when both are set.
    private static func secret(_ config: ConfigReader, _ key: ConfigKey, fileKey: ConfigKey) throws(LatchkeyError) -> String? {
        if let path = config.string(forKey: fileKey) {
            guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw setting(fileKey.description, "points at \(path), which cannot be read")
            }
            return contents.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return config.string(forKey: key, isSecret: true)
    }
}
