import Foundation

/// An emulated Apple Account (also used for Google sign-ins).
struct UserRecord: Sendable {
    let id: UUID
    var email: String
    var hideMyEmail: Bool
    var realUserStatus: Int
    var givenName: String?
    var familyName: String?
    var emailForwardingEnabled = true
}

/// What a user agreed to share with one team's apps.
struct ConsentRecord: Sendable {
    var scopes: Set<String>
    var firstAuthorizedAt: Date
}

struct CodeRecord: Sendable {
    enum Provider: Sendable { case apple, google }
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
}

struct TransferRecord: Sendable {
    let transferSubject: String
    let userID: UUID
    let fromTeam: String
    let toTeam: String
    let createdAt: Date
}

/// An OAuth error as Apple answers it: HTTP 400, `{"error": code}`.
struct AppleOAuthError: Error, Sendable {
    let code: String
    /// Why, for the emulator's request log; Apple never says.
    let detail: String
}

/// An OAuth error as Google answers it (RFC 6749 statuses, with a description).
struct GoogleOAuthError: Error, Sendable {
    let status: Int
    let code: String
    let description: String
}
