public import Foundation

/// How the emulator is set up: which teams and apps exist, and which contested behaviours it imitates.
///
/// ```swift
/// var configuration = EmulatorConfiguration()
/// configuration.addTeam(teamID: "TEAMID1234", keyID: "KEYID12345", publicKeyPEM: p8PublicKey)
/// configuration.addApp(clientID: "com.example.app", teamID: "TEAMID1234")
/// ```
public struct EmulatorConfiguration: Sendable {
    /// A developer team and the public halves of its Sign in with Apple keys, by key id.
    public struct Team: Sendable, Equatable {
        public var teamID: String
        public var keys: [String: String]

        public init(teamID: String, keys: [String: String]) {
            self.teamID = teamID
            self.keys = keys
        }
    }

    /// A client id registered with Sign in with Apple: a bundle id (native) or a Services ID (web).
    public struct App: Sendable, Equatable {
        public var clientID: String
        public var teamID: String
        /// Redirect URIs registered for web sign-ins; matched exactly.
        public var redirectURIs: [String]
        /// Where server-to-server notifications are POSTed.
        public var notificationURL: String?

        public init(clientID: String, teamID: String, redirectURIs: [String] = [], notificationURL: String? = nil) {
            self.clientID = clientID
            self.teamID = teamID
            self.redirectURIs = redirectURIs
            self.notificationURL = notificationURL
        }
    }

    /// An OAuth client of Google, Microsoft or the generic OpenID Connect issuer. Public clients (iOS, desktop)
    /// have no secret and must use PKCE.
    public struct OAuthClient: Sendable, Equatable {
        public var clientID: String
        public var clientSecret: String?
        public var redirectURIs: [String]

        public init(clientID: String, clientSecret: String? = nil, redirectURIs: [String] = []) {
            self.clientID = clientID
            self.clientSecret = clientSecret
            self.redirectURIs = redirectURIs
        }
    }

    public typealias GoogleClient = OAuthClient
    /// A Microsoft app registration: the application (client) id.
    public typealias MicrosoftClient = OAuthClient
    public typealias OIDCClient = OAuthClient

    /// A Facebook app: its id is the `aud` of Limited Login tokens; id and secret make the app token of `debug_token`.
    public struct FacebookApp: Sendable, Equatable {
        public var appID: String
        public var appSecret: String
        /// The app's name, `application` in `debug_token`.
        public var name: String

        public init(appID: String, appSecret: String, name: String = "Emulated App") {
            self.appID = appID
            self.appSecret = appSecret
            self.name = name
        }
    }

    /// A Dropbox app: the app key is the `client_id`; PKCE token requests need no secret.
    public struct DropboxApp: Sendable, Equatable {
        public var appKey: String
        public var appSecret: String?
        public var redirectURIs: [String]

        public init(appKey: String, appSecret: String? = nil, redirectURIs: [String] = []) {
            self.appKey = appKey
            self.appSecret = appSecret
            self.redirectURIs = redirectURIs
        }
    }

    /// How Apple's boolean claims are written: the documented strings or plain JSON booleans.
    public enum BooleanStyle: String, Sendable, CaseIterable {
        case strings
        case booleans
    }

    /// The unit of `event_time` in notifications: Apple's examples use seconds, captured payloads milliseconds.
    public enum EventTimeUnit: String, Sendable, CaseIterable {
        case seconds
        case milliseconds
    }

    public var teams: [Team] = []
    public var apps: [App] = []
    public var googleClients: [GoogleClient] = []
    public var microsoftClients: [MicrosoftClient] = []
    public var facebookApps: [FacebookApp] = []
    public var dropboxApps: [DropboxApp] = []
    /// The other stand-ins' clients (GitHub, Discord, X, GitLab, Slack, LINE, …), by provider; each profile says how it
    /// registers them.
    var providerClients: [CodeRecord.Provider: [OAuthClient]] = [:]
    public var oidcClients: [OIDCClient] = []

    /// `iss` of Apple identity tokens.
    public var appleIssuer = "https://appleid.apple.com"
    /// `iss` of Google identity tokens (`https://accounts.google.com` or `accounts.google.com`).
    public var googleIssuer = "https://accounts.google.com"
    /// `iss` of Facebook Limited Login tokens (`https://www.facebook.com`; `https://limited.facebook.com` is also reported).
    public var facebookIssuer = "https://www.facebook.com"
    /// Lifetime of identity tokens. Apple documents none: 600 s historically, 86,400 s observed lately.
    public var identityTokenLifetime: TimeInterval = 600
    /// Authorization codes are single-use and live five minutes.
    public var authorizationCodeLifetime: TimeInterval = 300
    /// Access tokens from `/auth/token`.
    public var accessTokenLifetime: TimeInterval = 3600
    /// How long an expired authorization code or access token is kept before the emulator forgets it, by its own clock.
    /// Until then it answers as an expired one; after, as an unknown one. For a code that is the same error at every
    /// provider (only the detail in Apple's request log differs); a forgotten access token loses Facebook's
    /// `debug_token` subcode 463 ("Session has expired"), and revoking it no longer revokes the grant it came from.
    /// Grants are kept. Keeping every code and token ever issued made a long-running emulator grow with each sign-in.
    public var expiredRecordRetention: TimeInterval = 600
    public var booleanStyle: BooleanStyle = .strings
    /// The account-deletion event type: `account-delete` (older docs) or `account-deleted` (current docs).
    public var accountDeletionEventType = "account-delete"
    public var eventTimeUnit: EventTimeUnit = .milliseconds
    /// The generic OpenID Connect provider rotates refresh tokens (as Auth0, Okta or Keycloak can): each refresh
    /// answers a new one, and the one it used stops working.
    public var oidcRotatesRefreshTokens = false
    /// How long an app transfer's `transfer_sub` stays usable.
    public var transferWindow: TimeInterval = 60 * 86_400
    /// How many notification delivery attempts are made before giving up.
    public var notificationMaximumAttempts = 8
    public var notificationInitialBackoff: Duration = .milliseconds(500)
    /// Lets redirect URIs use plain HTTP on a domain name (never an IP address or localhost).
    public var allowHTTPRedirectURIs = false
    /// Lets Apple's authorization page redirect to `http://127.0.0.1`, `localhost` or `[::1]`, which Apple
    /// refuses: for a development server on loopback (`latchkey serve --dev`), never a faithful default.
    public var allowLoopbackRedirectURIs = false
    /// How many requests `GET /emulator/requests` keeps: the newest ones, the oldest dropped first (0 keeps none).
    public var requestLogCapacity = 10_000

    public init() {}

    /// Registers a team with the public key (PEM) of one of its Sign in with Apple keys.
    public mutating func addTeam(teamID: String, keyID: String, publicKeyPEM: String) {
        if let index = teams.firstIndex(where: { $0.teamID == teamID }) {
            teams[index].keys[keyID] = publicKeyPEM
        } else {
            teams.append(Team(teamID: teamID, keys: [keyID: publicKeyPEM]))
        }
    }

    /// Registers a client id of a team.
    public mutating func addApp(clientID: String, teamID: String, redirectURIs: [String] = [], notificationURL: String? = nil) {
        apps.removeAll { $0.clientID == clientID }
        apps.append(App(clientID: clientID, teamID: teamID, redirectURIs: redirectURIs, notificationURL: notificationURL))
    }

    /// Registers `clientID` at every provider but Apple, each with `redirectURIs`, as its profile says: a public Google,
    /// Microsoft, GitLab and OpenID Connect client, a Facebook app (secret `"\(clientID)-secret"`), a Dropbox app (key
    /// `clientID`), confidential clients with the secret `"\(clientID)-secret"` at the others, and a LINE channel whose
    /// secret is longer. A registration with the same id is replaced. Test and development set-ups use it so one id, such
    /// as `com.example.app`, signs in at any stand-in.
    public mutating func addClientEverywhere(_ clientID: String, redirectURIs: [String] = []) {
        for profile in ProviderProfiles.all { profile.register(&self, profile.provider, clientID, redirectURIs) }
    }

    /// Registers `client` at `provider`, replacing a registration with the same id.
    mutating func setClient(_ client: OAuthClient, for provider: CodeRecord.Provider) {
        providerClients[provider, default: []].removeAll { $0.clientID == client.clientID }
        providerClients[provider, default: []].append(client)
    }

    func app(_ clientID: String) -> App? { apps.first { $0.clientID == clientID } }
    func team(_ teamID: String) -> Team? { teams.first { $0.teamID == teamID } }
    func googleClient(_ clientID: String) -> GoogleClient? { googleClients.first { $0.clientID == clientID } }
    func facebookApp(_ appID: String) -> FacebookApp? { facebookApps.first { $0.appID == appID } }

    /// The OAuth client `clientID` of `provider` (a Dropbox app key, a Facebook app id); nil when unregistered or Apple.
    func oauthClient(_ provider: CodeRecord.Provider, _ clientID: String) -> OAuthClient? {
        provider.profile.client(self, provider, clientID)
    }
}
