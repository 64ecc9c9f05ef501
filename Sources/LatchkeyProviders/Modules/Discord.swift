public import Configuration
import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// Discord: OAuth 2.0 with PKCE (S256), no ID token; the user is `GET /api/users/@me` (the snowflake `id` is the subject,
/// `verified` says whether the e-mail is). The refresh token is the grant; Discord rotates it on each refresh and revokes
/// it at `/api/oauth2/token/revoke`. See docs/providers.md.
public struct DiscordModule: ProviderModule {
    public static let name = "discord"
    public static let displayName = "Discord"
    public static let settings = [
        ProviderSettingDescription("clientId", "the application's client id"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "its client secret (secret); leave it out for a public client", default: "none"),
        ProviderSettingDescription("baseUrl", "Discord's origin", default: "https://discord.com"),
    ]

    public var clientID: String
    public var clientSecret: Secret?
    public var baseURL = "https://discord.com"

    public init(clientID: String, clientSecret: String? = nil, baseURL: String = "https://discord.com") {
        self.clientID = clientID
        self.clientSecret = clientSecret.map { Secret($0) }
        self.baseURL = baseURL
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let secret = try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "discord.clientSecretFile")
        let baseURL = try config.settingURL("baseUrl", fullKey: "discord.baseUrl")
        guard let clientID = config.string(forKey: "clientId") else {
            guard secret == nil, baseURL == nil else {
                throw LatchkeyError(.invalidConfiguration, "setting discord.clientId is missing (other discord.* settings are set)")
            }
            return nil
        }
        self.init(clientID: clientID, clientSecret: secret, baseURL: baseURL ?? "https://discord.com")
    }

    public var findings: [ProviderFinding] {
        [
            ProviderFinding(
                .ok, "discord",
                "Discord application \(clientID) (\(clientSecret == nil ? "public client" : "confidential client")): authorization codes with PKCE are accepted"
            )
        ]
    }

    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await (makeProvider(context) as? OAuth2CodeProvider)?.probeClient() ?? ProviderFinding(.warning, "live", "no live check")]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        OAuth2CodeProvider(
            OAuth2Profile(
                name: Self.name, displayName: Self.displayName, clientID: clientID, clientSecret: clientSecret, authorizeURL: baseURL + "/oauth2/authorize",
                tokenURL: baseURL + "/api/oauth2/token", revocationURL: baseURL + "/api/oauth2/token/revoke", scopes: ["identify", "email"],
                identity: { [baseURL, clientID] accessToken, calls, now throws(LatchkeyError) in
                    struct User: Decodable {
                        let id: String
                        let username: String
                        let global_name: String?
                        let email: String?
                        let verified: Bool?
                    }
                    let request = OutboundRequest(url: baseURL + "/api/users/@me", headers: [("Authorization", "Bearer \(accessToken)")])
                    let user = try calls.decode(User.self, try await calls.send(request, operation: "account", bearer: true), what: "GET /users/@me")
                    return VerifiedIdentity(
                        issuer: baseURL, subject: user.id, audience: clientID, checkedAt: now, email: user.email,
                        emailVerified: user.email == nil ? nil : user.verified ?? false, name: user.global_name ?? user.username)
                }),
            context: context)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let clientID = clientIDs.first ?? ""
        return ["clientId": clientID, "baseUrl": baseURL]
    }
}
