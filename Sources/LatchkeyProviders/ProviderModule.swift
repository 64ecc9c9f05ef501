public import Configuration
public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
public import Logging

/// One provider's whole part in Latchkey, in one file: its settings (read from its own key), what `doctor` says
/// about them, the ``IdentityProvider`` they make, and the settings that point it at the emulator.
///
/// ``ProviderModules/all`` registers the modules; the server's configuration, construction and routes, `doctor`,
/// `serve --dev`, the demo page and `/openapi.json` iterate that list, so adding a provider is its module file and one
/// line there (and its emulator profile).
public protocol ProviderModule: Sendable {
    /// The settings' key, the path segment of `/v1/auth/{name}` and the stored provider name: `github`.
    static var name: String { get }
    /// The provider's name for people.
    static var displayName: String { get }
    /// The settings: each key under ``name`` with what it means and its default. docs/configuration.md must name
    /// every one (a test holds it to that).
    static var settings: [ProviderSettingDescription] { get }
    /// Reads the settings from `config`, scoped to ``name``; nil when none is set (the provider is off). Throws for a
    /// setting that is wrong, naming it in full (`github.clientSecret`).
    init?(reading config: ConfigReader) throws(LatchkeyError)
    /// What `doctor` reports about the settings read.
    var findings: [ProviderFinding] { get }
    /// Settings that work but weaken something, each with what to use instead: `serve` logs them at start-up and
    /// `doctor` reports them.
    var warnings: [String] { get }
    /// What `doctor --live` learns from the provider itself: whether it accepts the client (a made-up code answered
    /// `invalid_grant` means it did), or its discovery document and keys.
    func liveFindings(_ context: ProviderContext) async -> [ProviderFinding]
    /// Checks the settings as a whole (a module made in code rather than read may hold anything); throws naming the setting.
    func validate() throws(LatchkeyError)
    /// What `doctor` says about the settings under ``name`` in `config`, read one by one so that every problem shows.
    /// With `expected` (no provider is configured, and this is the one to set up) a setting left out is an error.
    static func diagnose(_ config: ConfigReader, expected: Bool) -> [ProviderFinding]
    /// What `doctor` says about the provider's browser sign-ins coming back to `callbackURL`, when an app of the browser
    /// flow uses the provider (Apple takes only `https` on a domain name).
    func callbackFindings(_ callbackURL: String) -> [ProviderFinding]
    /// The provider these settings make.
    func makeProvider(_ context: ProviderContext) throws(LatchkeyError) -> any IdentityProvider
    /// How `latchkey token verify --provider {name}` checks one of the provider's ID tokens: the policy for
    /// `audiences` and where the provider publishes its keys; nil for a provider that issues no ID tokens.
    static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification?
    /// Settings (keys under ``name``) that point the provider at the emulator's stand-in at `baseURL` (its own path,
    /// such as `{emulator}/github`) with the apps registered there as `clientIDs` (a provider with one client id takes
    /// the first): for `serve --dev` and `demo`.
    static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String]
}

/// The provider modules Latchkey knows, in the order they are listed.
public enum ProviderModules {
    public static let all: [any ProviderModule.Type] = [
        AppleModule.self,
        GoogleModule.self,
        MicrosoftModule.self,
        FacebookConfiguration.self,
        DropboxConfiguration.self,
        GitHubModule.self,
        GitLabModule.self,
        SlackModule.self,
        DiscordModule.self,
        XModule.self,
        LINEModule.self,
    ]

    /// The modules whose settings `config` holds.
    public static func configured(_ config: ConfigReader) throws(LatchkeyError) -> [any ProviderModule] {
        var modules: [any ProviderModule] = []
        for module in all {
            if let configured = try module.init(reading: config.scoped(to: ConfigKey(module.name))) { modules.append(configured) }
        }
        return modules
    }

    /// Every module's emulator settings, with their full keys.
    public static func emulatedSettings(emulatorBaseURL: String, clientIDs: [String]) -> [String: String] {
        var settings: [String: String] = [:]
        for module in all {
            for (key, value) in module.emulatedSettings(baseURL: emulatorBaseURL + "/" + module.name, clientIDs: clientIDs) {
                settings[module.name + "." + key] = value
            }
        }
        return settings
    }
}

/// What a module's provider is made with.
public struct ProviderContext: Sendable {
    public var transport: any HTTPTransport
    public var timeSource: TimeSource
    public var observer: ProviderCallObserver?
    /// Where key-cache refreshes are logged.
    public var logger: Logger?
    /// The server's issuer, under which each provider's browser sign-ins come back; nil outside a server.
    public var issuer: String?

    public init(transport: any HTTPTransport, timeSource: TimeSource, observer: ProviderCallObserver?, logger: Logger? = nil, issuer: String? = nil) {
        self.transport = transport
        self.timeSource = timeSource
        self.observer = observer
        self.logger = logger
        self.issuer = issuer
    }

    /// Where `provider` answers a browser sign-in at this server: `{issuer}/oauth2/callback/{provider}`.
    public func callbackURL(_ provider: String) -> String? {
        issuer.map { Self.callbackURL(issuer: $0, provider: provider) }
    }

    /// Where `provider` answers a browser sign-in at the server `issuer`.
    public static func callbackURL(issuer: String, provider: String) -> String {
        issuer + "/oauth2/callback/" + provider
    }
}

/// One setting of a module, for the documentation.
public struct ProviderSettingDescription: Sendable, Equatable {
    /// The key under the module's name (`clientId`).
    public var key: String
    public var meaning: String
    public var defaultValue: String

    public init(_ key: String, _ meaning: String, default defaultValue: String = "—") {
        self.key = key
        self.meaning = meaning
        self.defaultValue = defaultValue
    }
}

/// A line of `doctor`'s report about a module's settings.
public struct ProviderFinding: Sendable, Equatable {
    public enum Level: Sendable { case ok, warning, error }
    public var level: Level
    /// The setting it is about, in full (`github.clientId`).
    public var key: String
    public var message: String
    /// What to do about it, when it is not all right.
    public var fix: String?

    public init(_ level: Level, _ key: String, _ message: String, fix: String? = nil) {
        self.level = level
        self.key = key
        self.message = message
        self.fix = fix
    }
}

/// What an ID token of a provider is checked against, offline but for its keys.
public struct TokenVerification: Sendable {
    public var policy: IdentityTokenPolicy
    /// Where the provider publishes its signing keys (JWKS).
    public var keysURL: String

    public init(policy: IdentityTokenPolicy, keysURL: String) {
        self.policy = policy
        self.keysURL = keysURL
    }
}

extension ProviderModule {
    public var warnings: [String] { [] }
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? { nil }
    public func validate() throws(LatchkeyError) {}
    public func callbackFindings(_ callbackURL: String) -> [ProviderFinding] { [] }

    /// The settings as ``init(reading:)`` takes them: its refusal, or the module's ``findings``.
    public static func diagnose(_ config: ConfigReader, expected: Bool) -> [ProviderFinding] {
        do {
            if let module = try Self(reading: config) { return module.findings }
            return [expected ? ProviderFinding(.error, name, "\(displayName) is not configured", fix: "set the \(name).* settings") : .notConfigured(self)]
        } catch {
            return [ProviderFinding(.error, name, error.reason, fix: "change the setting it names")]
        }
    }
}

extension ProviderFinding {
    /// The finding of a module none of whose settings is set (`doctor` lists these on one line).
    public static func notConfigured(_ module: any ProviderModule.Type) -> ProviderFinding {
        ProviderFinding(.ok, module.name, "\(module.displayName) is not configured")
    }

    /// What `doctor --live` finds at an OpenID Connect provider: its discovery document and keys, or why not.
    public static func openIDPreflight(_ provider: (any IdentityProvider)?, _ displayName: String, settings: String) async -> ProviderFinding {
        do {
            let found = try await (provider as? OpenIDProvider)?.preflight() ?? "no live check"
            return ProviderFinding(.ok, "live", "\(displayName): \(found)")
        } catch {
            return ProviderFinding(
                .error, "live", "\(displayName): \((error as? LatchkeyError)?.reason ?? "\(error)")",
                fix: "check network access to \((provider as? OpenIDProvider)?.configuration.discoveryURL ?? "the provider") and the \(settings) settings")
        }
    }

    /// The finding of a token request with a made-up code: `invalid_grant` means the provider accepted the client.
    static func clientProbe(_ name: String, _ displayName: String, _ outcome: Result<Void, LatchkeyError>) -> ProviderFinding {
        switch outcome {
        case .success: ProviderFinding(.warning, "live", "\(displayName) accepted a made-up authorization code; check \(name).* URLs")
        case .failure(let error) where error.code == .invalidGrant:
            ProviderFinding(.ok, "live", "\(displayName) accepted the client (it refused only the made-up code: invalid_grant)")
        case .failure(let error) where error.code == .invalidClient:
            ProviderFinding(.error, "live", "\(displayName) did not accept the client id or secret (invalid_client); check the \(name).* settings")
        case .failure(let error): ProviderFinding(.error, "live", "\(displayName): \(error.reason)")
        }
    }
}

extension ConfigReader {
    /// A list setting: a JSON array of strings, or one comma-separated string.
    package func settingList(_ key: ConfigKey) -> [String]? {
        if let array = stringArray(forKey: key) { return array.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
        return string(forKey: key).map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
    }

    /// The list that turns a module on: nil when it and every other setting of the module is unset (`othersSet`
    /// says whether one is); refused when missing beside other settings or empty. `fullKey` names it, `what` says
    /// what to list.
    package func settingRequiredList(_ key: ConfigKey, fullKey: String, othersSet: Bool, what: String) throws(LatchkeyError) -> [String]? {
        guard let list = settingList(key) else {
            guard !othersSet else {
                let module = fullKey.split(separator: ".").first.map(String.init) ?? fullKey
                throw LatchkeyError(.invalidConfiguration, "setting \(fullKey) is missing (other \(module).* settings are set)")
            }
            return nil
        }
        guard !list.isEmpty else { throw LatchkeyError(.invalidConfiguration, "setting \(fullKey) is empty; list \(what)") }
        return list
    }

    /// A secret given inline (`key`) or as a file path (`fileKey`, which wins); `fullFileKey` names the latter in errors.
    package func settingSecret(_ key: ConfigKey, fileKey: ConfigKey, fullFileKey: String) throws(LatchkeyError) -> String? {
        if let path = string(forKey: fileKey) {
            guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw LatchkeyError(.invalidConfiguration, "setting \(fullFileKey) points at \(path), which cannot be read")
            }
            return contents.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return string(forKey: key, isSecret: true)
    }

    /// `<prefix>nonceMatching` and `<prefix>requireNonce` (`prefix` is `google.` in the whole configuration, empty in a
    /// module's scope; `fullPrefix` names them in errors), with a warning for matching that lets a token carry its own proof.
    package func settingNonces(_ prefix: String, fullPrefix: String, requireByDefault: Bool) throws(LatchkeyError) -> (
        matching: NonceMatching, required: Bool, warning: String?
    ) {
        var matching = NonceMatching.hashed
        var warning: String?
        if let mode = string(forKey: ConfigKey(prefix + "nonceMatching")) {
            guard let parsed = NonceMatching(rawValue: mode) else {
                throw LatchkeyError(
                    .invalidConfiguration, "setting \(fullPrefix)nonceMatching is \"\(mode)\"; use hashed, verbatim or hashed_or_verbatim")
            }
            matching = parsed
            if parsed != .hashed {
                warning =
                    "\(fullPrefix)nonceMatching is \(mode): a token whose nonce claim is the raw nonce itself carries the proof with it, so a stolen token signs in anyway; use hashed (the default: the app puts SHA-256 of its raw nonce in the request)"
            }
        }
        let required = try settingBool(ConfigKey(prefix + "requireNonce"), fullKey: fullPrefix + "requireNonce") ?? requireByDefault
        return (matching, required, warning)
    }

    /// A boolean setting: true, false, 1, 0, yes or no; `fullKey` names it in errors.
    package func settingBool(_ key: ConfigKey, fullKey: String) throws(LatchkeyError) -> Bool? {
        guard let text = string(forKey: key) else { return bool(forKey: key) }
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "true", "1", "yes": return true
        case "false", "0", "no": return false
        default: throw LatchkeyError(.invalidConfiguration, "setting \(fullKey) is \"\(text)\", not true or false")
        }
    }

    /// A URL setting: http or https, with a host and a port that is one (``OutboundURL/problem(_:)``); `fullKey` names it
    /// in errors. A trailing `/` is dropped from a base URL that paths are appended to, and kept on a document's URL.
    package func settingURL(_ key: ConfigKey, fullKey: String, isBase: Bool = true) throws(LatchkeyError) -> String? {
        guard let value = string(forKey: key) else { return nil }
        if let problem = OutboundURL.problem(value) {
            throw LatchkeyError(.invalidConfiguration, "setting \(fullKey) is \(value.prefix(200)): \(problem)")
        }
        return isBase && value.hasSuffix("/") ? String(value.dropLast()) : value
    }
}
