public import Configuration
public import Foundation
import LatchkeyCore
public import LatchkeyJOSE

/// Google: OpenID Connect (ID tokens from Google Sign-In, or codes with PKCE), with `azp` held to the client ids and,
/// optionally, the Workspace domains (`hd`) allowed.
public struct GoogleModule: OpenIDProviderModule {
    public static let name = "google"
    public static let displayName = "Google"
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        TokenVerification(policy: .google(clientIDs: audiences, leeway: leeway), keysURL: "https://www.googleapis.com/oauth2/v3/certs")
    }
    public static let settings = [
        ProviderSettingDescription("clientIds", "comma-separated OAuth client ids (iOS, web)"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "the web client's secret, to redeem its codes", default: "none"),
        ProviderSettingDescription("hostedDomains", "Workspace domains allowed (hd)", default: "any account"),
        ProviderSettingDescription("discoveryUrl", "the discovery document", default: "https://accounts.google.com/.well-known/openid-configuration"),
        ProviderSettingDescription("webClientId", "the client id the browser flow signs in with", default: "the first client id"),
    ]

    public var configuration: OpenIDProviderConfiguration
    public private(set) var warnings: [String] = []

    public init(_ configuration: OpenIDProviderConfiguration) {
        self.configuration = configuration
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        guard let clientIDs = config.settingList("clientIds") else { return nil }
        var google = OpenIDProviderConfiguration.google(
            clientIDs: clientIDs, hostedDomains: config.settingList("hostedDomains") ?? [],
            clientSecret: try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "google.clientSecretFile"))
        if let url = try config.settingURL("discoveryUrl", fullKey: "google.discoveryUrl", isBase: false) { google.discoveryURL = url }
        let warnings = try google.readSharedSettings(config, key: Self.name)
        self.init(google)
        self.warnings = warnings
    }

    public var findings: [ProviderFinding] {
        var findings = configuration.findings
        if configuration.policy.audiences.contains(where: { !$0.hasSuffix(".apps.googleusercontent.com") }) {
            findings.append(
                ProviderFinding(
                    .warning, "google.clientIds",
                    "a client id does not end in .apps.googleusercontent.com: Google client ids look like 1234-abc.apps.googleusercontent.com (ignore this for emulators)"
                ))
        }
        return findings
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        ["clientIds": clientIDs.joined(separator: ","), "discoveryUrl": baseURL + "/.well-known/openid-configuration"]
    }
}

/// Microsoft identity platform v2.0: OpenID Connect, multi-tenant, with the tenants allowed.
public struct MicrosoftModule: OpenIDProviderModule {
    public static let name = "microsoft"
    public static let displayName = "Microsoft"
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        TokenVerification(
            policy: .microsoft(clientIDs: audiences, leeway: leeway), keysURL: "https://login.microsoftonline.com/common/discovery/v2.0/keys")
    }
    public static let settings = [
        ProviderSettingDescription("clientIds", "comma-separated application (client) ids"),
        ProviderSettingDescription("tenants", "common, organizations, consumers or tenant GUIDs", default: "common"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "a confidential application's secret", default: "none"),
        ProviderSettingDescription("authority", "the identity platform's host (a national cloud's)", default: "https://login.microsoftonline.com"),
        ProviderSettingDescription("webClientId", "the client id the browser flow signs in with", default: "the first client id"),
    ]

    public var configuration: OpenIDProviderConfiguration
    public private(set) var warnings: [String] = []

    public init(_ configuration: OpenIDProviderConfiguration) {
        self.configuration = configuration
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        guard let clientIDs = config.settingList("clientIds") else { return nil }
        let tenants = config.settingList("tenants") ?? ["common"]
        for tenant in tenants where !["common", "organizations", "consumers"].contains(tenant.lowercased()) && UUID(uuidString: tenant) == nil {
            throw LatchkeyError(
                .invalidConfiguration, "setting microsoft.tenants has \"\(tenant.prefix(60))\"; use common, organizations, consumers or tenant GUIDs")
        }
        var microsoft = OpenIDProviderConfiguration.microsoft(
            clientIDs: clientIDs, tenants: tenants,
            clientSecret: try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "microsoft.clientSecretFile"),
            authority: try config.settingURL("authority", fullKey: "microsoft.authority") ?? "https://login.microsoftonline.com")
        let warnings = try microsoft.readSharedSettings(config, key: Self.name)
        self.init(microsoft)
        self.warnings = warnings
    }

    public var findings: [ProviderFinding] { configuration.findings }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        ["clientIds": clientIDs.joined(separator: ","), "authority": baseURL]
    }
}

/// A module whose provider is an ``OpenIDProvider`` over its ``configuration`` (Google, Microsoft): the provider and
/// `doctor --live`'s check of its discovery come from the configuration.
public protocol OpenIDProviderModule: ProviderModule {
    var configuration: OpenIDProviderConfiguration { get }
}

extension OpenIDProviderModule {
    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await .openIDPreflight(try? makeProvider(context), Self.displayName, settings: "\(Self.name).*")]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        OpenIDProvider(
            configuration: configuration, transport: context.transport, timeSource: context.timeSource, logger: context.logger, observer: context.observer)
    }
}

extension OpenIDProviderConfiguration {
    /// The settings every OpenID Connect module reads after its own, from its scoped `config`: `webClientId` and the
    /// nonce settings; then the client ids are checked. Returns the nonce settings' warning, if any.
    mutating func readSharedSettings(_ config: ConfigReader, key: String) throws(LatchkeyError) -> [String] {
        webClientID = config.string(forKey: "webClientId")
        let nonces = try config.settingNonces("", fullPrefix: key + ".", requireByDefault: false)
        (policy.nonceMatching, policy.requireNonce) = (nonces.matching, nonces.required)
        try checkClientIDs()
        return nonces.warning.map { [$0] } ?? []
    }

    /// Client ids listed, none blank, and a web client id among them.
    public func checkClientIDs() throws(LatchkeyError) {
        let key = policy.configurationKey ?? name
        guard !policy.audiences.isEmpty else {
            throw LatchkeyError(.invalidConfiguration, "setting \(key).clientIds is empty; list the OAuth client ids your apps use")
        }
        if let web = webClientID, !policy.audiences.contains(web) {
            throw LatchkeyError(.invalidConfiguration, "setting \(key).webClientId is \(web.prefix(200)), which \(key).clientIds does not list; add it there")
        }
    }

    /// What `doctor` says about an OpenID Connect provider's settings: its client ids and where discovery is read.
    public var findings: [ProviderFinding] {
        let key = policy.configurationKey ?? name
        var findings: [ProviderFinding] = []
        for clientID in policy.audiences where clientID.contains(" ") || clientID.isEmpty {
            findings.append(
                ProviderFinding(.error, key + ".clientIds", "\"\(clientID)\" is not a client id; copy the OAuth client id from the provider's console"))
        }
        let loopback = discoveryURL.contains("127.0.0.1") || discoveryURL.contains("localhost")
        guard discoveryURL.hasPrefix("https://") || loopback else {
            return findings + [ProviderFinding(.error, key, "\(discoveryURL) is not HTTPS: OpenID Connect discovery and keys must come over HTTPS")]
        }
        return findings + [ProviderFinding(.ok, key, "\(displayName): \(policy.audiences.count) client id(s), discovery at \(discoveryURL)")]
    }
}
