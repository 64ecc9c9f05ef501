public import Configuration
public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// LINE Login v2.1: OpenID Connect (issuer `https://access.line.me`, discovery, PKCE). The app SDKs' ID tokens are
/// ES256, verified against LINE's published keys; the web login's are HS256, signed with the channel secret, which is
/// accepted from LINE only (no other provider's tokens may be HMAC-signed). The `aud` is the channel id. The grant is
/// the refresh token; LINE revokes access tokens, so deletion refreshes the grant and revokes the access token it gets.
/// See docs/providers.md.
public struct LINEModule: ProviderModule {
    /// The emulator's channels' secret is the channel id with this after it (32 characters or more, as LINE's are).
    public static let emulatedSecretSuffix = "-channel-secret-0123456789abcdef"

    public static let name = "line"
    public static let displayName = "LINE"
    /// The app SDK's ES256 tokens; the web login's HS256 ones need the channel secret, which `token verify` never takes.
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        TokenVerification(
            policy: IdentityTokenPolicy(
                providerName: displayName, issuers: ["https://access.line.me"], audiences: audiences, allowedAlgorithms: ["ES256"], leeway: leeway),
            keysURL: "https://api.line.me/oauth2/v2.1/certs")
    }
    public static let settings = [
        ProviderSettingDescription("channelIds", "comma-separated LINE Login channel ids (the ID tokens' aud)"),
        ProviderSettingDescription(
            "channelSecret / channelSecretFile", "the channel secret (secret): redeems codes and verifies the web login's HS256 ID tokens", default: "none"),
        ProviderSettingDescription("issuer", "LINE's issuer; its discovery document gives the endpoints", default: "https://access.line.me"),
    ]

    public var channelIDs: [String]
    public var channelSecret: Secret?
    public var issuer = "https://access.line.me"
    public private(set) var warnings: [String] = []

    public init(channelIDs: [String], channelSecret: String? = nil, issuer: String = "https://access.line.me") {
        self.channelIDs = channelIDs
        self.channelSecret = channelSecret.map { Secret($0) }
        self.issuer = issuer
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let secret = try config.settingSecret("channelSecret", fileKey: "channelSecretFile", fullFileKey: "line.channelSecretFile")
        let issuer = try config.settingURL("issuer", fullKey: "line.issuer")
        guard
            let channelIDs = try config.settingRequiredList(
                "channelIds", fullKey: "line.channelIds", othersSet: secret != nil || issuer != nil, what: "the LINE Login channel id")
        else { return nil }
        if let secret, secret.utf8.count < 32 {
            throw LatchkeyError(
                .invalidConfiguration, "setting line.channelSecret is \(secret.utf8.count) characters; a LINE channel secret is 32 (Basic settings tab)")
        }
        // One secret verifies the web login's tokens: with several channels, it would be taken for all of them.
        if secret != nil, channelIDs.count > 1 {
            throw LatchkeyError(
                .invalidConfiguration, "setting line.channelSecret is one channel's secret, but line.channelIds lists \(channelIDs.count) channels; keep one")
        }
        self.init(channelIDs: channelIDs, channelSecret: secret, issuer: issuer ?? "https://access.line.me")
    }

    public var findings: [ProviderFinding] {
        var findings = [ProviderFinding(.ok, "line", "LINE Login, channels \(channelIDs.joined(separator: ", ")): the app SDK's ID tokens and codes")]
        if channelSecret == nil {
            findings.append(
                ProviderFinding(
                    .warning, "line.channelSecret", "not set: only the app SDK's ES256 ID tokens sign in (codes and the web login need the channel secret)"
                ))
        }
        return findings
    }

    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await .openIDPreflight(makeProvider(context), Self.displayName, settings: "line.issuer")]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        var configuration = OpenIDProviderConfiguration.generic(
            name: Self.name, displayName: Self.displayName, issuer: issuer, clientIDs: channelIDs, clientSecret: channelSecret?.revealed)
        configuration.policy.configurationKey = Self.name
        configuration.policy.audienceHint = "LINE puts the channel id in aud; add it to line.channelIds"
        configuration.clientSecretSignsIDTokens = true
        configuration.revocation = .accessTokenOfGrant
        return OpenIDProvider(
            configuration: configuration, transport: context.transport, timeSource: context.timeSource, logger: context.logger, observer: context.observer)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let channelID = clientIDs.first ?? ""
        return ["channelIds": channelID, "channelSecret": channelID + emulatedSecretSuffix, "issuer": baseURL]
    }
}
