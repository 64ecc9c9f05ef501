public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
public import LatchkeyProviders
public import LatchkeyStore
public import Logging

/// Everything `latchkey serve` needs, with a default for every field. See `docs/configuration.md`.
public struct ServerConfiguration: Sendable {
    public enum Mode: String, Sendable { case development, production }

    public var mode: Mode = .development
    public var host = "127.0.0.1"
    public var port = 8080
    /// The URL clients reach this server at: the `iss` of access tokens.
    public var publicURL: String?
    /// The `aud` of access tokens.
    public var audience = "latchkey"
    public var database: StoreLocation = .sqlite(path: "latchkey-data/latchkey.sqlite")
    /// How many concurrent writes may share one durable commit.
    public var databaseMaximumWriteBatch = 512
    /// 32 bytes in base64; seals Apple refresh tokens and signing keys at rest.
    public var encryptionKey: Secret?
    public var accessTokenLifetime: TimeInterval = 600
    /// How often each instance reloads signing keys, retries owed provider calls and sweeps (seconds).
    public var maintenanceInterval: TimeInterval = 30
    /// How long an instance holds the outbox items it took before another instance may retry them (seconds).
    public var outboxLease: TimeInterval = 300
    public var session = SessionPolicy()
    /// DPoP (RFC 9449): sessions bound to a key on the device (`dpop.*`).
    public var dpop = DPoPPolicy()
    /// App Attest at sign-in (`appAttest.*`).
    public var appAttest = AppAttestPolicy()
    /// OpenTelemetry traces (`otel.*`), off while ``OTelSettings/endpoint`` is unset.
    public var otel = OTelSettings()

    /// Where `serve` sends traces: an OTLP/HTTP collector.
    public struct OTelSettings: Sendable, Equatable {
        /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to `{endpoint}/v1/traces`.
        public var endpoint: String?
        public var serviceName = "latchkey"
        /// The share of new traces sampled, 0 to 1; a request that carries a `traceparent` follows its sampling flag.
        public var sampleRatio = 1.0

        public init() {}
    }
    /// Sign in with Apple, the first of ``providerModules`` when configured.
    public var apple: AppleModule? {
        get { module(AppleModule.self) }
        set {
            providerModules.removeAll { $0 is AppleModule }
            if let newValue { providerModules.insert(newValue, at: 0) }
        }
    }
    /// Generic OpenID Connect providers (`oidc.providers`).
    public var openIDProviders: [OpenIDProviderConfiguration] = []
    /// The providers configured through their modules (``ProviderModules/all``): Apple, Google, GitHub, …
    public var providerModules: [any ProviderModule] = []

    /// The configured module of type `module`, if any.
    public func module<Module: ProviderModule>(_ module: Module.Type) -> Module? {
        providerModules.lazy.compactMap { $0 as? Module }.first
    }
    /// Who may create an account by signing in.
    public var signUp: SignUpMode = .open
    /// Passkeys (`passkeys.*`): off until `passkeys.rpId` is set.
    public var passkeys: PasskeySettings?
    /// Apps registered for the browser flow (`/oauth2/authorize`, `/oauth2/token`).
    public var clients: [OAuthClient] = []
    /// For administration commands (`users`, `admin-keys`, `migrate`, …): only the store's settings matter, so
    /// production mode needs no provider and no public URL. Not a setting.
    public var administrationOnly = false
    /// The app's backend endpoints that hear of users' lifecycle events (Standard Webhooks).
    public var webhooks: [WebhookEndpoint] = []
    /// How long one webhook delivery attempt may take before it counts as failed, in seconds.
    public var webhookTimeout: TimeInterval = 10
    /// E-mail one-time codes (`email.*`); nil while `email.smtp.url` is not set, outside development.
    public var email: EmailSettings?
    /// Serve the demo sign-in page at `/` (and its `/callback`): `serve --dev` turns it on.
    public var servesDemoPage = false
    public var rateLimit = RateLimits()
    /// Largest request body accepted, in bytes.
    public var maximumBodySize = 16 * 1024
    /// Idle and read timeouts, and the cap on open connections.
    public var connections = ConnectionLimits()
    /// Origins allowed by CORS; empty disables CORS headers.
    public var corsAllowedOrigins: [String] = []
    /// The reverse proxies in front of the server, whose `X-Forwarded-For` entries are believed.
    public var trustedProxies: TrustedProxies = .none
    /// The least severe log level written.
    public var logLevel: Logger.Level = .info
    /// How log lines are written.
    public var logFormat: LogFormat = .text
    /// Settings that work but weaken something or will go away, each with what to use instead;
    /// `serve` logs them at start-up and `doctor` reports them.
    public var warnings: [String] = []

    /// Log lines for people (`text`) or one JSON object per line for log shippers (`json`).
    public enum LogFormat: String, Sendable, CaseIterable { case text, json }

    /// Sign in with Apple's settings (`apple.*`).
    public typealias Apple = AppleModule

    /// `open`: anyone who signs in gets an account. `invite`: a new user needs a valid invite code.
    public enum SignUpMode: String, Sendable { case open, invite }

    /// The names of the configured providers, as they appear in `/v1/auth/{provider}`.
    public var providerNames: [String] {
        providerModules.map { type(of: $0).name } + openIDProviders.map(\.name)
    }

    /// Requests per minute.
    public struct RateLimits: Sendable {
        public var perClientIP = 120
        public var perSubject = 30
        public init() {}
    }

    public init() {}

    /// How long after its creation a new signing key starts signing: every instance reloads keys once per
    /// ``maintenanceInterval``, so by then all of them publish and accept it.
    public var keyPropagationDelay: TimeInterval { 2 * maintenanceInterval + 5 }

    /// How long after a rotation the previous signing key must keep verifying: until its successor signs, then
    /// for an access token's lifetime, with five minutes to spare.
    public var signingKeyOverlap: TimeInterval { keyPropagationDelay + accessTokenLifetime + 300 }

    /// The issuer: ``publicURL`` or `http://host:port`.
    public var issuer: String { publicURL ?? "http://\(host):\(port)" }

    /// Checks the configuration as a whole, naming the setting that is wrong.
    public func validate() throws(LatchkeyError) {
        guard (1...65_535).contains(port) || port == 0 else { throw setting("port", "must be between 1 and 65535") }
        guard accessTokenLifetime >= 30, accessTokenLifetime <= 86_400 else { throw setting("accessToken.lifetime", "must be between 30 and 86400 seconds") }
        guard maximumBodySize >= 1024 else { throw setting("http.maxBodySize", "must be at least 1024 bytes") }
        try connections.validate()
        guard (1...SQLAuthStore.maximumWriteBatchLimit).contains(databaseMaximumWriteBatch) else {
            throw setting("database.maxWriteBatch", "must be between 1 and \(SQLAuthStore.maximumWriteBatchLimit)")
        }
        let year: TimeInterval = 365 * 86_400
        for (name, value, range) in [
            ("session.idleLifetime", session.refreshIdleLifetime, 60...(10 * year)),
            ("session.absoluteLifetime", session.refreshAbsoluteLifetime, 60...(10 * year)),
            ("session.reuseGrace", session.reuseGraceWindow, 0...300), ("session.unusedSuccessorRecovery", session.unusedSuccessorRecovery, 0...86_400),
            ("providers.validationInterval", session.providerValidationInterval, 60...(30 * 86_400)),
            ("providers.unreachableGrace", session.providerUnreachableGrace, 0...(365 * 86_400)),
            ("providers.validationWait", session.providerValidationWait, 0...60),
            ("maintenance.interval", maintenanceInterval, 1...3600), ("outbox.lease", outboxLease, 5...86_400), ("webhookTimeout", webhookTimeout, 1...60),
        ] as [(String, TimeInterval, ClosedRange<TimeInterval>)] {
            guard value.isFinite, range.contains(value) else {
                throw setting(name, "must be between \(Int(range.lowerBound)) and \(Int(range.upperBound)) seconds")
            }
        }
        for (name, limit) in [("rateLimit.perIp", rateLimit.perClientIP), ("rateLimit.perSubject", rateLimit.perSubject)] where limit < 1 {
            throw setting(name, "is \(limit); it must be at least 1 (requests per minute)")
        }
        if let publicURL, let problem = Self.publicURLProblem(publicURL) { throw setting("publicUrl", "is \(publicURL.prefix(200)): \(problem)") }
        if let encryptionKey { _ = try SecretBox(base64Key: encryptionKey.revealed) }
        try validateWebhooks()
        for module in providerModules { try module.validate() }
        let names = providerNames
        if let repeated = names.first(where: { name in names.filter { $0 == name }.count > 1 }) {
            throw setting("oidc.providers", "names \(repeated) twice or reuses a built-in provider's name")
        }
        var clientIDs: Set<String> = []
        for (index, client) in clients.enumerated() {
            let key = "clients[\(index)]"
            guard !client.clientID.isEmpty else { throw setting(key + ".clientId", "is missing") }
            guard clientIDs.insert(client.clientID).inserted else { throw setting(key + ".clientId", "registers \(client.clientID) twice") }
            guard !client.redirectURIs.isEmpty else { throw setting(key + ".redirectUris", "is empty; list the exact URIs the app receives codes at") }
            for uri in client.redirectURIs {
                if let problem = Self.redirectURIProblem(uri) { throw setting(key + ".redirectUris", "has \(uri.prefix(200)): \(problem)") }
            }
            if client.kind == .confidential, (client.secret?.revealed ?? "").count < 16 {
                throw setting(key + ".clientSecret", "is missing or shorter than 16 characters (a confidential client authenticates with it)")
            }
            for provider in client.providers ?? [] where !names.contains(provider) {
                throw setting(key + ".providers", "names \(provider.prefix(40)), which is not configured; configured: \(names.joined(separator: ", "))")
            }
        }
        for provider in openIDProviders { try provider.checkClientIDs() }
        if mode == .production && !administrationOnly {
            guard !names.isEmpty else {
                throw setting(
                    "apple",
                    "production mode needs at least one provider (apple.teamId, apple.keyId, apple.privateKeyFile and apple.clientIds, or another provider's settings)"
                )
            }
        }
        if mode == .production {
            guard encryptionKey != nil else {
                throw setting("encryptionKey", "production mode needs an encryption key (32 random bytes in base64: openssl rand -base64 32)")
            }
            guard publicURL != nil || administrationOnly else {
                throw setting("publicUrl", "production mode needs the URL clients reach this server at")
            }
        }
    }
}

extension ServerConfiguration {
    /// Why `publicUrl` cannot be the issuer: tokens' `iss` and every callback URL are built by appending paths to it.
    static func publicURLProblem(_ url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
            components.host?.isEmpty == false
        else { return "not an http or https URL with a host (https://auth.example.com)" }
        if let problem = OutboundURL.problem(url) { return problem }
        if components.query != nil || components.fragment != nil { return "a public URL cannot have a query or a fragment" }
        if url.hasSuffix("/") { return "leave out the trailing /" }
        return nil
    }

    /// Why a client's redirect URI cannot be registered: RFC 9700 wants exact, fragment-free URIs; plain `http`
    /// only on loopback (RFC 8252 §7.3); private schemes (`com.example.app:/oauth2redirect`) for native apps.
    static func redirectURIProblem(_ uri: String) -> String? {
        guard let components = URLComponents(string: uri), let scheme = components.scheme?.lowercased() else { return "not an absolute URI" }
        if components.fragment != nil { return "a redirect URI cannot have a fragment" }
        switch scheme {
        case "https":
            return components.host?.isEmpty == false ? nil : "an https redirect URI needs a host"
        case "http":
            if OAuthClient.isLoopback(uri) { return nil }
            return OAuthClient.loopbackHosts.contains(components.host ?? "")
                ? "its port is not a port (1 to 65535)" : "plain http is allowed only on loopback (127.0.0.1, [::1], localhost); use https"
        case "javascript", "data", "file", "vbscript":
            return "the \(scheme) scheme cannot receive codes"
        default:
            // RFC 8252 §7.1 recommends a reverse domain name (com.example.app:/oauth2redirect); any private scheme works.
            return nil
        }
    }
}

func setting(_ name: String, _ problem: String) -> LatchkeyError {
    LatchkeyError(.invalidConfiguration, "setting \(name) \(problem)")
}

extension ServerConfiguration {
    /// Each endpoint: https (or http to a loopback address), a `whsec_` secret of at least 24 bytes, known event types,
    /// and no URL twice (deliveries name their endpoint by URL).
    /// App Attest needs the apps' App IDs. Checked when the server is made, not when the settings are read:
    /// `serve --dev` names the emulated team's apps after reading them.
    public func validateAppAttest() throws(LatchkeyError) {
        guard appAttest.mode == .off || !appAttest.appIDs.isEmpty else {
            throw setting("appAttest.appIds", "lists the apps' App IDs (TEAMID.bundle.id) when appAttest.mode is \(appAttest.mode.rawValue)")
        }
    }

    public func validateWebhooks() throws(LatchkeyError) {
        var seen: Set<String> = []
        for (index, endpoint) in webhooks.enumerated() {
            if let problem = WebhookEndpoint.problem(url: endpoint.url) {
                throw setting("webhooks[\(index)].url", "is \(endpoint.url.prefix(200)): \(problem)")
            }
            guard seen.insert(endpoint.url).inserted else { throw setting("webhooks[\(index)].url", "is \(endpoint.url.prefix(200)), listed twice") }
            if case .failure(let problem) = WebhookSignature.key(fromSecret: endpoint.secret.revealed) {
                throw setting("webhooks[\(index)].secret", "\(problem)")
            }
            if endpoint.events?.isEmpty == true { throw setting("webhooks[\(index)].events", "is empty; leave it out to receive every event") }
        }
    }
}

/// `email.*`: where codes are sent from and how they look.
public struct EmailSettings: Sendable {
    /// `smtp://` or `smtps://`, credentials in it or in `email.smtp.passwordFile`; nil: the development mailbox
    /// (`serve --dev`'s emulator, `GET /emulator/mail?to=`).
    public var smtpURL: String?
    public var smtpPassword: Secret?
    /// Without SMTP, in development: where messages go instead (`serve --dev` sets its emulator's `/emulator/mail`).
    public var mailboxURL: String?
    /// The `From` address.
    public var from: String
    public var policy: EmailPolicy

    public init(smtpURL: String? = nil, smtpPassword: Secret? = nil, from: String = "sign-in@latchkey.localhost", policy: EmailPolicy = EmailPolicy()) {
        self.smtpURL = smtpURL
        self.smtpPassword = smtpPassword
        self.from = from
        self.policy = policy
    }
}
