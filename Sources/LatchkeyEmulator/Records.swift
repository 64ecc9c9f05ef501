import Foundation

/// An emulated person: an Apple Account that also has an identity at every other emulated provider.
struct UserRecord: Sendable {
    let id: UUID
    var email: String
    var hideMyEmail: Bool
    /// Where the user's relay addresses are: Apple issues them from either of ``Identifiers/relayDomains``.
    var relayDomain = Identifiers.relayDomains[0]
    var realUserStatus: Int
    var givenName: String?
    var familyName: String?
    var emailForwardingEnabled = true
    /// The Microsoft tenant (`tid`) of the user's Microsoft account: a GUID, the personal-account tenant by default.
    var microsoftTenant = Identifiers.microsoftConsumersTenant
    /// Subjects given when the user was created (`POST /emulator/users` `subjects`), for a user who already exists at
    /// the provider: by Apple team id (the default team's) or provider name (`google`). Every other subject is derived
    /// from ``id``.
    var givenSubjects: [String: String] = [:]
}

/// What a user agreed to share with one team's apps.
struct ConsentRecord: Sendable {
    var scopes: Set<String>
    var firstAuthorizedAt: Date
    /// The team's apps the user signed in to: an app transfer carries the consent to the recipient team for its users.
    var clientIDs: Set<String> = []
}

struct CodeRecord: Sendable {
    /// A stand-in, by its name: the path it is served under (`/gitlab`), the `provider` of the control API, and the name
    /// of the provider module it stands in for on the server's side. Each stand-in's file names its own
    /// (`static let gitlab = Self("gitlab")`) beside its ``ProviderProfile``.
    struct Provider: Hashable, Sendable, CustomStringConvertible {
        let name: String

        init(_ name: String) { self.name = name }

        /// The name the sign-in pages show.
        var displayName: String { profile.displayName }
        var description: String { name }
    }
    let code: String
    let provider: Provider
    let userID: UUID
    let clientID: String
    let redirectURI: String?
    let nonce: String?
    let scopes: Set<String>
    let createdAt: Date
    let native: Bool
    let codeChallenge: String?
    let codeChallengeMethod: String?
    var used = false
}

/// A refresh token and the authorization behind it. Apple never rotates these.
struct GrantRecord: Sendable {
    let refreshToken: String
    let provider: CodeRecord.Provider
    let userID: UUID
    let clientID: String
    let teamID: String
    let createdAt: Date
    var revoked = false
    var validations = 0
    /// The scopes granted (other providers than Apple answer them on refresh).
    var scopes: [String] = []
}

struct AccessTokenRecord: Sendable {
    let token: String
    let clientID: String
    let teamID: String
    /// nil for team tokens (`client_credentials`).
    let userID: UUID?
    let refreshToken: String?
    let expiresAt: Date
    var revoked = false
    /// What the token allows (Facebook's `debug_token` and Dropbox's answers show it).
    var scopes: [String] = []
}

struct TransferRecord: Sendable {
    let transferSubject: String
    let userID: UUID
    let fromTeam: String
    let toTeam: String
    let createdAt: Date
}

/// An app (client id) moved to another team, as App Store Connect's app transfer does (`POST /emulator/apple/transfers`).
struct AppTransferRecord: Sendable {
    let clientID: String
    let fromTeam: String
    let toTeam: String
    /// When the recipient accepted it: the 60-day transfer window starts here.
    let acceptedAt: Date
}

/// An OAuth error as Apple answers it: HTTP 400, `{"error": code}`.
struct AppleOAuthError: Error, Sendable {
    let code: String
    /// Why, for the emulator's request log; Apple never says.
    let detail: String
}

/// An OAuth error as Google, Microsoft, Dropbox and OpenID Connect issuers answer it: an RFC 6749 status and
/// `{"error", "error_description"}`, or a provider's own error `body` (Facebook's and Dropbox's API errors).
struct ProviderOAuthError: Error, Sendable {
    let status: Int
    let code: String
    let description: String
    var body: [String: Claim]? = nil

    var response: [String: Claim] { body ?? ["error": .string(code), "error_description": .string(description)] }
}
