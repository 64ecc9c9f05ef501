public import Configuration
public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// GitLab (gitlab.com, or a self-managed instance by its base URL): OpenID Connect with PKCE. The issuer is the base
/// URL; discovery gives the endpoints and keys (RS256). Sign-ins are ID tokens (with the app's nonce) or codes; the
/// refresh token is the grant, revoked at `/oauth/revoke`. See docs/providers.md.
public struct GitLabModule: ProviderModule {
    public static let name = "gitlab"
    public static let displayName = "GitLab"
    /// gitlab.com's tokens; a self-managed instance's are checked with `--provider` its base URL.
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        TokenVerification(
            policy: IdentityTokenPolicy(providerName: displayName, issuers: ["https://gitlab.com"], audiences: audiences, leeway: leeway),
            keysURL: "https://gitlab.com/oauth/discovery/keys")
    }
    public static let settings = [
        ProviderSettingDescription("clientIds", "comma-separated application ids (the ID tokens' aud)"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "the application's secret (secret), for a confidential application", default: "none"),
        ProviderSettingDescription(
            "baseUrl", "the instance, which is the issuer: a self-managed GitLab's https://gitlab.example.com", default: "https://gitlab.com"),
    ]

    public var clientIDs: [String]
    public var clientSecret: Secret?
    public var baseURL = "https://gitlab.com"

    public init(clientIDs: [String], clientSecret: String? = nil, baseURL: String = "https://gitlab.com") {
        self.clientIDs = clientIDs
        self.clientSecret = clientSecret.map { Secret($0) }
        self.baseURL = baseURL
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let secret = try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "gitlab.clientSecretFile")
        let baseURL = try config.settingURL("baseUrl", fullKey: "gitlab.baseUrl")
        guard
            let clientIDs = try config.settingRequiredList(
                "clientIds", fullKey: "gitlab.clientIds", othersSet: secret != nil || baseURL != nil, what: "the application ids your apps use")
        else { return nil }
        self.init(clientIDs: clientIDs, clientSecret: secret, baseURL: baseURL ?? "https://gitlab.com")
    }

    public var findings: [ProviderFinding] {
        [ProviderFinding(.ok, "gitlab", "GitLab at \(baseURL), application ids \(clientIDs.joined(separator: ", ")): ID tokens and codes with PKCE")]
    }

    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await .openIDPreflight(makeProvider(context), Self.displayName, settings: "gitlab.baseUrl")]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        var configuration = OpenIDProviderConfiguration.generic(
            name: Self.name, displayName: Self.displayName, issuer: baseURL, clientIDs: clientIDs, clientSecret: clientSecret?.revealed)
        configuration.policy.configurationKey = Self.name
        configuration.policy.audienceHint = "GitLab puts the application id in aud; add it to gitlab.clientIds"
        return OpenIDProvider(
            configuration: configuration, transport: context.transport, timeSource: context.timeSource, logger: context.logger,
            observer: context.observer)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        return ["clientIds": clientIDs.joined(separator: ","), "baseUrl": baseURL]
    }
}
