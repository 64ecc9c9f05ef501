public import Configuration
import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// X (formerly Twitter): OAuth 2.0 with PKCE, no ID token and no e-mail; the user is `GET /2/users/me` (`data.id` is the
/// subject). With `offline.access` X issues a refresh token, the grant: it rotates on each refresh, and
/// `/2/oauth2/revoke` revokes it. Confidential clients authenticate with a Basic header. See docs/providers.md.
public struct XModule: ProviderModule {
    public static let name = "x"
    public static let displayName = "X"
    public static let settings = [
        ProviderSettingDescription("clientId", "the app's OAuth 2.0 client id"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "its client secret (secret), for a confidential client", default: "none"),
        ProviderSettingDescription("authorizeUrl", "where users sign in", default: "https://x.com/i/oauth2/authorize"),
        ProviderSettingDescription("apiUrl", "the API", default: "https://api.x.com"),
    ]

    public var clientID: String
    public var clientSecret: Secret?
    public var authorizeURL = "https://x.com/i/oauth2/authorize"
    public var apiURL = "https://api.x.com"

    public init(clientID: String, clientSecret: String? = nil, authorizeURL: String = "https://x.com/i/oauth2/authorize", apiURL: String = "https://api.x.com")
    {
        self.clientID = clientID
        self.clientSecret = clientSecret.map { Secret($0) }
        self.authorizeURL = authorizeURL
        self.apiURL = apiURL
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let secret = try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "x.clientSecretFile")
        let authorizeURL = try config.settingURL("authorizeUrl", fullKey: "x.authorizeUrl")
        let apiURL = try config.settingURL("apiUrl", fullKey: "x.apiUrl")
        guard let clientID = config.string(forKey: "clientId") else {
            guard secret == nil, authorizeURL == nil, apiURL == nil else {
                throw LatchkeyError(.invalidConfiguration, "setting x.clientId is missing (other x.* settings are set)")
            }
            return nil
        }
        self.init(
            clientID: clientID, clientSecret: secret, authorizeURL: authorizeURL ?? "https://x.com/i/oauth2/authorize", apiURL: apiURL ?? "https://api.x.com")
    }

    public var findings: [ProviderFinding] {
        [
            ProviderFinding(.ok, "x", "X app \(clientID): authorization codes with PKCE are accepted"),
            ProviderFinding(.warning, "x", "X shares no e-mail address: X users are matched to accounts by their X id only"),
        ]
    }

    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await (makeProvider(context) as? OAuth2CodeProvider)?.probeClient() ?? ProviderFinding(.warning, "live", "no live check")]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        OAuth2CodeProvider(
            OAuth2Profile(
                name: Self.name, displayName: Self.displayName, clientID: clientID, clientSecret: clientSecret, authorizeURL: authorizeURL,
                tokenURL: apiURL + "/2/oauth2/token", revocationURL: apiURL + "/2/oauth2/revoke", scopes: ["users.read", "tweet.read", "offline.access"],
                secretInBasicHeader: true,
                identity: { [apiURL, clientID] accessToken, calls, now throws(LatchkeyError) in
                    struct Me: Decodable {
                        struct User: Decodable {
                            let id: String
                            let name: String?
                            let username: String
                        }
                        let data: User
                    }
                    let request = OutboundRequest(url: apiURL + "/2/users/me", headers: [("Authorization", "Bearer \(accessToken)")])
                    let me = try calls.decode(Me.self, try await calls.send(request, operation: "account", bearer: true), what: "GET /2/users/me")
                    return VerifiedIdentity(
                        issuer: "https://x.com", subject: me.data.id, audience: clientID, checkedAt: now, name: me.data.name ?? me.data.username)
                }),
            context: context)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let clientID = clientIDs.first ?? ""
        return ["clientId": clientID, "authorizeUrl": baseURL + "/i/oauth2/authorize", "apiUrl": baseURL]
    }
}
