public import Configuration
import Foundation
import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyStore
import LatchkeyWebAuthn
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
    /// | `database.maxWriteBatch` | writes sharing one commit (1–2000) | 512 |
    /// | `encryptionKey` / `encryptionKeyFile` | 32 bytes base64 (secret) | generated in development |
    /// | `accessToken.lifetime` | seconds | 600 |
    /// | `session.idleLifetime`, `session.absoluteLifetime`, `session.reuseGrace` | seconds | 30 d, 180 d, 10 |
    /// | `session.unusedSuccessorRecovery` | seconds a replayed token still gets its never-used successor | 3600 |
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
    /// | `providers.validationInterval`, `providers.unreachableGrace`, `providers.validationWait` (formerly `apple.*`) | seconds | 86400, 259200, 3 |
    /// | `rateLimit.perIp`, `rateLimit.perSubject` | requests per minute, per instance | 120, 30 |
    /// | `maintenance.interval` | seconds between key reloads, outbox retries and sweeps | 30 |
    /// | `outbox.lease` | seconds an instance holds the owed provider calls it took | 300 |
    /// | `http.maxBodySize` | bytes | 16384 |
    /// | `http.idleTimeout` | seconds a connection with no request under way stays open | 60 |
    /// | `http.readTimeout` | seconds a request may take to arrive, head and body, from its first byte | 10 |
    /// | `http.maxConnections` | connections open at once; more wait in the listen backlog | descriptor limit − 256, at most 10000 |
    /// | `cors.allowedOrigins` | comma-separated origins | none |
    /// | `google.clientIds`, `google.clientSecret`, `google.hostedDomains`, `google.discoveryUrl` | Google sign-in | off |
    /// | `microsoft.clientIds`, `microsoft.tenants`, `microsoft.clientSecret`, `microsoft.authority` | Microsoft sign-in | off |
    /// | `oidc.providers`; `oidc.<name>.issuer`, `.clientIds`, `.clientSecret`, `.displayName` | generic OpenID Connect providers | none |
    /// | `facebook.appId`, `facebook.appSecret`, `facebook.graphUrl`, `facebook.jwksUrl`, `facebook.issuers` | Facebook sign-in | off |
    /// | `dropbox.appKey`, `dropbox.appSecret`, `dropbox.apiUrl`, `dropbox.acceptAccessTokens` | Dropbox sign-in | off |
    /// | `<module>.*`: each ``ProviderModule``'s ``ProviderModule/settings`` (`github.clientId`, …) | that provider's sign-in | off |
    /// | `<provider>.nonceMatching`, `<provider>.requireNonce` | as for Apple; `requireNonce` defaults to false | `hashed`, false |
    /// | `signup.mode` | `open` or `invite` | `open` |
    /// | `email.smtp.url`, `email.smtp.passwordFile`, `email.from`, `email.productName`, `email.codeLength`, `email.codeLifetime` | e-mail one-time codes: the SMTP server (`smtp://`, STARTTLS unless on loopback, or `smtps://`), the sender, the product named in messages, digits (6–10) and seconds a code lives | off; `Latchkey`, 6, 600 |
    /// | `email.reviewAccess[]`: `address`, `code`, `expiresAt` | App Review's addresses: a fixed code of at least 8 digits, until an RFC 3339 time | none |
    /// | `anonymous.enabled`, `anonymous.perIpPerHour`, `anonymous.ttl` | guests (`POST /v1/auth/anonymous`): on, per-address hourly limit (fleet-wide), seconds unused before the sweep deletes one | false, 30, 2592000 |
    /// | `passkeys.rpId`, `passkeys.origins`, `passkeys.rpName` | passkeys' registrable domain, allowed origins and shown name | off |
    /// | `passkeys.userVerification` | `required`, `preferred` or `discouraged` | `required` |
    /// | `passkeys.allowSignUp` | bool: a passkey may create an account | false |
    /// | `clients[]`: `clientId`, `redirectUris`, `providers`, `type` (`public`/`confidential`), `clientSecret`/`clientSecretFile`, `dpop` (`allow`/`require`) | apps of the browser flow | none |
    /// | `otel.endpoint`, `otel.serviceName`, `otel.sampleRatio` | OpenTelemetry traces over OTLP/HTTP: the collector's base URL (off when unset), the service name, the share of new traces sampled | off, latchkey, 1 |
    /// | `dpop.mode` (`allow`/`require`), `dpop.maxAge`, `dpop.requireNonce` | DPoP (RFC 9449): sessions bound to a device key; a proof's age window; server nonces | allow, 60, false |
    /// | `appAttest.mode` (`off`/`report`/`require`), `appAttest.appIds`, `appAttest.environment`, `appAttest.rootCertificate`/`…File` | App Attest at sign-in: what it does, the apps' `TEAMID.bundle.id`, `production` or `development`, the root CA | off, none, production, Apple's App Attestation Root CA |
    /// | `apple.servicesId`, `<provider>.webClientId`, `dropbox.authorizeUrl` | the browser flow's client ids and Dropbox's sign-in page | first client id |
    /// | `webhooks[]`: `url`, `secret`/`secretFile`, `events` | the app backend's Standard Webhooks endpoints | none |
    /// | `webhookTimeout` | seconds one delivery attempt may take | 10 |
    /// - Parameter administrationOnly: see ``ServerConfiguration/administrationOnly``.
    public init(reading config: ConfigReader, administrationOnly: Bool = false) throws(LatchkeyError) {
        self.init()
        self.administrationOnly = administrationOnly
        if let mode = config.string(forKey: "mode") {
            guard let parsed = Mode(rawValue: mode) else { throw setting("mode", "is \"\(mode)\"; use development or production") }
            self.mode = parsed
        }
        host = config.string(forKey: "host") ?? host
        port = try Self.int(config, "port") ?? port
        // `https://auth.example.com/` means the same issuer as without the slash.
        publicURL = config.string(forKey: "publicUrl").map { $0.hasSuffix("/") && $0.count > 1 ? String($0.dropLast()) : $0 }
        audience = config.string(forKey: "audience") ?? audience
        if let url = config.string(forKey: "database.url", isSecret: true) {
            do { database = try StoreLocation(url: url) } catch { throw setting("database.url", "is invalid: \(error.reason)") }
        }
        databaseMaximumWriteBatch = try Self.int(config, "database.maxWriteBatch") ?? databaseMaximumWriteBatch
        encryptionKey = try Self.secret(config, "encryptionKey", fileKey: "encryptionKeyFile").map { Secret($0) }
        accessTokenLifetime = try Self.double(config, "accessToken.lifetime") ?? accessTokenLifetime
        session.refreshIdleLifetime = try Self.double(config, "session.idleLifetime") ?? session.refreshIdleLifetime
        session.refreshAbsoluteLifetime = try Self.double(config, "session.absoluteLifetime") ?? session.refreshAbsoluteLifetime
        session.reuseGraceWindow = try Self.double(config, "session.reuseGrace") ?? session.reuseGraceWindow
        session.unusedSuccessorRecovery = try Self.double(config, "session.unusedSuccessorRecovery") ?? session.unusedSuccessorRecovery
        // They govern every provider's grants; the apple.* names came first and still work.
        for (name, value) in [
            ("validationInterval", \SessionPolicy.providerValidationInterval), ("unreachableGrace", \SessionPolicy.providerUnreachableGrace),
            ("validationWait", \SessionPolicy.providerValidationWait),
        ] as [(String, WritableKeyPath<SessionPolicy, TimeInterval>)] {
            if let seconds = try Self.double(config, ConfigKey("providers." + name)) {
                session[keyPath: value] = seconds
            } else if let seconds = try Self.double(config, ConfigKey("apple." + name)) {
                session[keyPath: value] = seconds
                warnings.append("setting apple.\(name) is deprecated: it applies to every provider's grants; set providers.\(name) instead")
            }
        }
        rateLimit.perClientIP = try Self.int(config, "rateLimit.perIp") ?? rateLimit.perClientIP
        rateLimit.perSubject = try Self.int(config, "rateLimit.perSubject") ?? rateLimit.perSubject
        maintenanceInterval = try Self.double(config, "maintenance.interval") ?? maintenanceInterval
        outboxLease = try Self.double(config, "outbox.lease") ?? outboxLease
        maximumBodySize = try Self.int(config, "http.maxBodySize") ?? maximumBodySize
        connections.idleTimeout = try Self.double(config, "http.idleTimeout") ?? connections.idleTimeout
        connections.readTimeout = try Self.double(config, "http.readTimeout") ?? connections.readTimeout
        connections.maxConnections = try Self.int(config, "http.maxConnections") ?? connections.maxConnections
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

        try readProviders(config)
        providerModules = try ProviderModules.configured(config)
        warnings += providerModules.flatMap(\.warnings)
        try readClients(config)
        try readWebhooks(config)
        webhookTimeout = try Self.double(config, "webhookTimeout") ?? webhookTimeout
        if let mode = config.string(forKey: "signup.mode") {
            guard let parsed = SignUpMode(rawValue: mode) else { throw setting("signup.mode", "is \"\(mode)\"; use open or invite") }
            signUp = parsed
        }
        session.anonymous.enabled = try Self.bool(config, "anonymous.enabled") ?? session.anonymous.enabled
        try readDPoP(config)
        try readAppAttest(config)
        otel.endpoint = config.string(forKey: "otel.endpoint").map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        if let endpoint = otel.endpoint, let problem = OutboundURL.problem(endpoint) {
            throw setting("otel.endpoint", "is \(endpoint.prefix(200)): \(problem)")
        }
        otel.serviceName = config.string(forKey: "otel.serviceName") ?? otel.serviceName
        otel.sampleRatio = try Self.double(config, "otel.sampleRatio") ?? otel.sampleRatio
        guard (0...1).contains(otel.sampleRatio) else { throw setting("otel.sampleRatio", "is 0 to 1") }
        session.anonymous.perIPPerHour = try Self.int(config, "anonymous.perIpPerHour") ?? session.anonymous.perIPPerHour
        session.anonymous.ttl = try Self.double(config, "anonymous.ttl") ?? session.anonymous.ttl
        guard session.anonymous.perIPPerHour >= 1 else { throw setting("anonymous.perIpPerHour", "is at least 1") }
        guard session.anonymous.ttl >= 3600 else { throw setting("anonymous.ttl", "is at least 3600 seconds") }
        try readEmail(config)
        try readPasskeys(config)
        try validate()
    }

    /// `passkeys.*`: an `rpId` that is a domain name, and origins on it or its subdomains (`https`, or `http` on
    /// `localhost`), or Android apps' `android:apk-key-hash:` facets.
    private mutating func readPasskeys(_ config: ConfigReader) throws(LatchkeyError) {
        let origins = Self.list(config, "passkeys.origins")
        guard let rpID = config.string(forKey: "passkeys.rpId") else {
            if origins != nil { throw setting("passkeys.rpId", "is missing (passkeys.origins is set): set the domain passkeys are bound to") }
            return
        }
        let labels = rpID.split(separator: ".", omittingEmptySubsequences: false)
        guard rpID.count <= 253, rpID == rpID.lowercased(), rpID == "localhost" || labels.count > 1,
            labels.allSatisfy({ !$0.isEmpty && $0.count <= 63 && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") } }),
            labels.last?.allSatisfy(\.isNumber) == false
        else {
            throw setting(
                "passkeys.rpId", "is \"\(rpID.prefix(80))\"; use your registrable domain in lower case, such as example.com (no scheme, port or IP address)")
        }
        guard let origins, !origins.isEmpty else {
            throw setting("passkeys.origins", "is missing: list the origins your sign-in pages run on, such as https://\(rpID)")
        }
        for origin in origins where !origin.hasPrefix("android:apk-key-hash:") {
            guard let url = URL(string: origin), let host = url.host, url.path.isEmpty, url.query == nil,
                url.scheme == "https" || (url.scheme == "http" && host == "localhost"), host == rpID || host.hasSuffix("." + rpID)
            else {
                throw setting(
                    "passkeys.origins",
                    "has \"\(origin.prefix(80))\"; an origin is https://host[:port] on \(rpID) or one of its subdomains (http only on localhost), with no path")
            }
        }
        var settings = PasskeySettings(rpID: rpID, rpName: config.string(forKey: "passkeys.rpName"), origins: origins)
        if let verification = config.string(forKey: "passkeys.userVerification") {
            guard let parsed = PasskeySettings.UserVerification(rawValue: verification) else {
                throw setting("passkeys.userVerification", "is \"\(verification.prefix(40))\"; use required, preferred or discouraged")
            }
            settings.userVerification = parsed
        }
        settings.allowSignUp = try Self.bool(config, "passkeys.allowSignUp") ?? false
        passkeys = settings
    }

    /// `<key>.nonceMatching` and `<key>.requireNonce`, with a warning for matching that lets a token carry its own proof.
    private mutating func nonceSettings(_ config: ConfigReader, _ key: String, requireByDefault: Bool) throws(LatchkeyError) -> (NonceMatching, Bool) {
        let nonces = try config.settingNonces(key + ".", fullPrefix: key + ".", requireByDefault: requireByDefault)
        if let warning = nonces.warning { warnings.append(warning) }
        return (nonces.matching, nonces.required)
    }

    private mutating func readProviders(_ config: ConfigReader) throws(LatchkeyError) {
        for name in Self.list(config, "oidc.providers") ?? [] {
            guard name.count <= 32, name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-") }), name.first?.isLetter == true else {
                throw setting(
                    "oidc.providers", "has \"\(name.prefix(40))\"; a provider name is up to 32 lower-case letters, digits and dashes, starting with a letter")
            }
            guard !Self.builtInProviders.contains(name) else {
                throw setting(
                    "oidc.providers",
                    "has \"\(name)\", the name of a built-in provider; name the generic provider otherwise (its sign-ins would take \(name)'s behaviour)")
            }
            let key = "oidc.\(name)"
            guard let issuer = config.string(forKey: ConfigKey(key + ".issuer")) else {
                throw setting(key + ".issuer", "is missing: set the provider's issuer URL (its discovery document is read from there)")
            }
            if let problem = OutboundURL.problem(issuer) { throw setting(key + ".issuer", "is \(issuer.prefix(200)): \(problem)") }
            var generic = OpenIDProviderConfiguration.generic(
                name: name, displayName: config.string(forKey: ConfigKey(key + ".displayName")), issuer: issuer,
                clientIDs: Self.list(config, ConfigKey(key + ".clientIds")) ?? [],
                clientSecret: try Self.secret(config, ConfigKey(key + ".clientSecret"), fileKey: ConfigKey(key + ".clientSecretFile")))
            generic.webClientID = config.string(forKey: ConfigKey(key + ".webClientId"))
            (generic.policy.nonceMatching, generic.policy.requireNonce) = try nonceSettings(config, key, requireByDefault: false)
            openIDProviders.append(generic)
        }
    }

    /// The names a generic OpenID Connect provider may not take: each module's, and passkeys'.
    static let builtInProviders = Set(ProviderModules.all.map { $0.name } + ["passkey"])

    /// `dpop.mode`, `dpop.maxAge`, `dpop.requireNonce`.
    private mutating func readDPoP(_ config: ConfigReader) throws(LatchkeyError) {
        if let mode = config.string(forKey: "dpop.mode") {
            guard let parsed = DPoPMode(rawValue: mode) else { throw setting("dpop.mode", "is \"\(mode.prefix(40))\"; use allow or require") }
            dpop.mode = parsed
        }
        dpop.maximumAge = try Self.double(config, "dpop.maxAge") ?? dpop.maximumAge
        guard (5...600).contains(dpop.maximumAge) else { throw setting("dpop.maxAge", "is 5 to 600 seconds") }
        dpop.requireNonce = try Self.bool(config, "dpop.requireNonce") ?? dpop.requireNonce
    }

    /// `appAttest.mode`, `appAttest.appIds`, `appAttest.environment`, `appAttest.rootCertificate`/`…File`.
    private mutating func readAppAttest(_ config: ConfigReader) throws(LatchkeyError) {
        if let mode = config.string(forKey: "appAttest.mode") {
            guard let parsed = AppAttestMode(rawValue: mode) else { throw setting("appAttest.mode", "is \"\(mode.prefix(40))\"; use off, report or require") }
            appAttest.mode = parsed
        }
        appAttest.appIDs = Self.list(config, "appAttest.appIds") ?? appAttest.appIDs
        if let environment = config.string(forKey: "appAttest.environment") {
            guard let parsed = AppAttestEnvironment(rawValue: environment) else {
                throw setting("appAttest.environment", "is \"\(environment.prefix(40))\"; use production or development")
            }
            appAttest.environment = parsed
        }
        if let root = try Self.secret(config, "appAttest.rootCertificate", fileKey: "appAttest.rootCertificateFile") { appAttest.rootCertificatePEM = root }
        // A team id is 10 upper-case letters and digits.
        if let bad = appAttest.appIDs.first(where: { id in
            let parts = id.split(separator: ".", maxSplits: 1)
            return parts.count != 2 || parts[0].utf8.count != 10 || !parts[0].utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }
        }) {
            throw setting("appAttest.appIds", "holds \"\(bad.prefix(80))\", not TEAMID.bundle.id (a 10-character team id, a dot, the bundle id)")
        }
    }

    /// `clients`: in a JSON file an array of objects; in the environment `LATCHKEY_CLIENTS_0_CLIENT_ID` and so on.
    private mutating func readClients(_ config: ConfigReader) throws(LatchkeyError) {
        var index = 0
        while let clientID = config.string(forKey: ConfigKey("clients.\(index).clientId")) {
            let key = "clients.\(index)"
            let kind: OAuthClient.Kind
            switch config.string(forKey: ConfigKey(key + ".type")) ?? "public" {
            case "public": kind = .public
            case "confidential": kind = .confidential
            case let other: throw setting("clients[\(index)].type", "is \"\(other.prefix(40))\"; use public or confidential")
            }
            let dpop = try config.string(forKey: ConfigKey(key + ".dpop")).map { value throws(LatchkeyError) in
                guard let mode = DPoPMode(rawValue: value) else { throw setting("clients[\(index)].dpop", "is \"\(value.prefix(40))\"; use allow or require") }
                return mode
            }
            clients.append(
                OAuthClient(
                    clientID: clientID, redirectURIs: Self.list(config, ConfigKey(key + ".redirectUris")) ?? [],
                    providers: Self.list(config, ConfigKey(key + ".providers")), kind: kind,
                    secret: try Self.secret(config, ConfigKey(key + ".clientSecret"), fileKey: ConfigKey(key + ".clientSecretFile")), dpop: dpop))
            index += 1
        }
    }

    /// `email.*`; review access in a JSON file as an array of `{address, code, expiresAt}`, in the environment
    /// `LATCHKEY_EMAIL_REVIEW_ACCESS_0_ADDRESS`, `…_CODE`, `…_EXPIRES_AT`.
    private mutating func readEmail(_ config: ConfigReader) throws(LatchkeyError) {
        let url = config.string(forKey: "email.smtp.url", isSecret: true)
        guard url != nil || mode == .development || config.string(forKey: "email.from") != nil else { return }
        var settings = EmailSettings(smtpURL: url)
        if let url {
            guard url.hasPrefix("smtp://") || url.hasPrefix("smtps://") else {
                throw setting("email.smtp.url", "is not smtp://HOST:PORT or smtps://HOST:PORT (credentials may go in it: smtp://USER:PASSWORD@HOST:587)")
            }
        }
        settings.smtpPassword = try config.settingSecret("email.smtp.password", fileKey: "email.smtp.passwordFile", fullFileKey: "email.smtp.passwordFile")
            .map { Secret($0) }
        settings.from = config.string(forKey: "email.from") ?? settings.from
        guard EmailAddress(settings.from) != nil else { throw setting("email.from", "is not an e-mail address") }
        settings.policy.productName = config.string(forKey: "email.productName") ?? settings.policy.productName
        settings.policy.codeLength = try Self.int(config, "email.codeLength") ?? settings.policy.codeLength
        guard (6...10).contains(settings.policy.codeLength) else { throw setting("email.codeLength", "is 6 to 10 digits") }
        settings.policy.codeLifetime = try Self.double(config, "email.codeLifetime") ?? settings.policy.codeLifetime
        guard (60...3600).contains(settings.policy.codeLifetime) else { throw setting("email.codeLifetime", "is 60 to 3600 seconds") }
        var index = 0
        while let text = config.string(forKey: ConfigKey("email.reviewAccess.\(index).address")) {
            let key = "email.reviewAccess[\(index)]"
            guard let address = EmailAddress(text) else { throw setting("\(key).address", "is not an e-mail address") }
            guard let code = config.string(forKey: ConfigKey("email.reviewAccess.\(index).code"), isSecret: true), code.count >= 8,
                code.allSatisfy({ $0.isASCII && $0.isNumber })
            else { throw setting("\(key).code", "is at least 8 digits") }
            guard let expiry = config.string(forKey: ConfigKey("email.reviewAccess.\(index).expiresAt")),
                let expiresAt = try? Date(expiry, strategy: Date.ISO8601FormatStyle())
            else { throw setting("\(key).expiresAt", "is an RFC 3339 time, such as 2027-03-01T00:00:00Z") }
            settings.policy.reviewAccess.append(ReviewAccess(address: address, code: code, expiresAt: expiresAt))
            index += 1
        }
        email = settings
    }

    /// `webhooks`: in a JSON file an array of `{url, secret, events?}`; in the environment `LATCHKEY_WEBHOOKS_0_URL`,
    /// `LATCHKEY_WEBHOOKS_0_SECRET` (or `_SECRET_FILE`) and `LATCHKEY_WEBHOOKS_0_EVENTS` (comma-separated).
    private mutating func readWebhooks(_ config: ConfigReader) throws(LatchkeyError) {
        var index = 0
        while let url = config.string(forKey: ConfigKey("webhooks.\(index).url")) {
            let key = "webhooks.\(index)"
            guard let secret = try Self.secret(config, ConfigKey(key + ".secret"), fileKey: ConfigKey(key + ".secretFile")) else {
                throw setting("webhooks[\(index)].secret", "is missing; make one with `latchkey webhooks secret`")
            }
            var events: Set<LifecycleEvent.Kind>?
            if let names = Self.list(config, ConfigKey(key + ".events")) {
                events = []
                for name in names {
                    guard let kind = LifecycleEvent.Kind(rawValue: name), kind != .webhookTest else {
                        let known = LifecycleEvent.Kind.allCases.filter { $0 != .webhookTest }.map(\.rawValue).joined(separator: ", ")
                        throw setting("webhooks[\(index)].events", "names \"\(name.prefix(60))\", which is not an event type; use \(known)")
                    }
                    events?.insert(kind)
                }
            }
            webhooks.append(WebhookEndpoint(url: url, secret: Secret(secret), events: events))
            index += 1
        }
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
        try config.settingBool(key, fullKey: key.description)
    }

    /// A list setting as `serve` reads it: a JSON array of strings, or one comma-separated string.
    private static func list(_ config: ConfigReader, _ key: ConfigKey) -> [String]? {
        config.settingList(key)
    }

    /// A secret given inline or as a file path; the file wins when both are set.
    private static func secret(_ config: ConfigReader, _ key: ConfigKey, fileKey: ConfigKey) throws(LatchkeyError) -> String? {
        try config.settingSecret(key, fileKey: fileKey, fullFileKey: fileKey.description)
    }
}
