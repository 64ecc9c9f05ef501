public import Foundation

/// A new token pair: `POST /v1/token` answers this, `POST /v1/auth/apple` adds the user.
public struct TokenPairResponse: Codable, Sendable, Equatable {
    public var accessToken: String
    public var tokenType: String
    public var expiresIn: Int
    public var refreshToken: String

    public init(accessToken: String, tokenType: String = "Bearer", expiresIn: Int, refreshToken: String) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
    }
}

/// `POST /v1/auth/apple`'s answer.
public struct SignInResponse: Codable, Sendable, Equatable {
    public var accessToken: String
    public var tokenType: String
    public var expiresIn: Int
    public var refreshToken: String
    public var user: UserResponse
    public var isNewUser: Bool

    public init(tokens: TokenPairResponse, user: UserResponse, isNewUser: Bool) {
        self.accessToken = tokens.accessToken
        self.tokenType = tokens.tokenType
        self.expiresIn = tokens.expiresIn
        self.refreshToken = tokens.refreshToken
        self.user = user
        self.isNewUser = isNewUser
    }
}

/// `POST /v1/auth/{provider}`'s body for every provider but Apple, and `POST /v1/me/identities/{provider}`'s.
/// Which fields a provider needs: `{idToken, rawNonce?}` (Google, Microsoft, generic OpenID Connect, Facebook
/// Limited Login), `{authorizationCode, codeVerifier, redirectUri}` (Google, Microsoft, Dropbox, generic
/// OpenID Connect), `{accessToken}` (Facebook classic login).
public struct ProviderSignInRequest: Codable, Sendable, Equatable {
    public var idToken: String?
    public var rawNonce: String?
    public var authorizationCode: String?
    public var codeVerifier: String?
    public var redirectUri: String?
    public var accessToken: String?
    /// Which of the provider's configured client ids the code was issued to, when there are several.
    public var clientId: String?
    /// Needed for a new user when the server's `signup.mode` is `invite`.
    public var inviteCode: String?
    /// App Attest's evidence for this sign-in, where the server asks for it.
    public var appAttest: AppAttestEvidence? = nil

    public init(
        idToken: String? = nil, rawNonce: String? = nil, authorizationCode: String? = nil, codeVerifier: String? = nil, redirectUri: String? = nil,
        accessToken: String? = nil, clientId: String? = nil, inviteCode: String? = nil
    ) {
        self.idToken = idToken
        self.rawNonce = rawNonce
        self.authorizationCode = authorizationCode
        self.codeVerifier = codeVerifier
        self.redirectUri = redirectUri
        self.accessToken = accessToken
        self.clientId = clientId
        self.inviteCode = inviteCode
    }
}

/// `POST /v1/auth/apple`'s body: what the app got from `ASAuthorizationAppleIDCredential`.
public struct AppleSignInRequest: Codable, Sendable, Equatable {
    public var identityToken: String
    public var authorizationCode: String?
    /// The nonce the app generated, unhashed.
    public var rawNonce: String?
    /// The name iOS shares on the first sign-in only.
    public var fullName: FullName?
    /// Web sign-ins only: the `redirect_uri` the code was obtained with (native codes have none).
    public var redirectUri: String?
    /// Needed for a new user when the server's `signup.mode` is `invite`.
    public var inviteCode: String?
    /// App Attest's evidence for this sign-in, where the server asks for it.
    public var appAttest: AppAttestEvidence? = nil

    public struct FullName: Codable, Sendable, Equatable {
        public var givenName: String?
        public var familyName: String?
        public init(givenName: String? = nil, familyName: String? = nil) {
            self.givenName = givenName
            self.familyName = familyName
        }
    }

    public init(
        identityToken: String, authorizationCode: String? = nil, rawNonce: String? = nil, fullName: FullName? = nil, redirectUri: String? = nil,
        inviteCode: String? = nil
    ) {
        self.inviteCode = inviteCode
        self.identityToken = identityToken
        self.authorizationCode = authorizationCode
        self.rawNonce = rawNonce
        self.fullName = fullName
        self.redirectUri = redirectUri
    }
}

/// A user as `GET /v1/me` shows them.
public struct UserResponse: Codable, Sendable, Equatable {
    public var id: String
    public var email: String?
    public var emailVerified: Bool?
    public var givenName: String?
    public var familyName: String?
    public var createdAt: Date
    public var identities: [IdentityResponse]
    /// The claims the app's backend set on the user (`PUT /admin/v1/users/{id}/claims`), which every access token
    /// carries; absent when there are none.
    public var claims: [String: JSONValue]?
    /// `true` for a guest (`POST /v1/auth/anonymous`) until they link an identity; absent otherwise.
    public var isAnonymous: Bool?

    public init(
        id: String, email: String?, emailVerified: Bool?, givenName: String?, familyName: String?, createdAt: Date, identities: [IdentityResponse],
        claims: [String: JSONValue]? = nil, isAnonymous: Bool? = nil
    ) {
        self.isAnonymous = isAnonymous
        self.id = id
        self.email = email
        self.emailVerified = emailVerified
        self.givenName = givenName
        self.familyName = familyName
        self.createdAt = createdAt
        self.identities = identities
        self.claims = claims
    }
}

public struct IdentityResponse: Codable, Sendable, Equatable {
    public var provider: String
    public var subject: String
    public var email: String?
    public var isPrivateEmail: Bool?
    public var realUserStatus: Int?
    public var emailForwardingEnabled: Bool?
    public var firstSeenAt: Date
    /// Admin API only: `missing` for an Apple identity without an Apple refresh token (imported, or moved by an app
    /// transfer): deleting the user cannot revoke it at Apple until the user signs in again with an authorization code.
    public var appleGrant: String?

    public init(
        provider: String, subject: String, email: String?, isPrivateEmail: Bool?, realUserStatus: Int?, emailForwardingEnabled: Bool?, firstSeenAt: Date,
        appleGrant: String? = nil
    ) {
        self.appleGrant = appleGrant
        self.provider = provider
        self.subject = subject
        self.email = email
        self.isPrivateEmail = isPrivateEmail
        self.realUserStatus = realUserStatus
        self.emailForwardingEnabled = emailForwardingEnabled
        self.firstSeenAt = firstSeenAt
    }
}

/// One session in `GET /v1/me/sessions`.
public struct SessionResponse: Codable, Sendable, Equatable {
    public var id: String
    public var clientId: String
    public var createdAt: Date
    public var lastUsedAt: Date
    public var expiresAt: Date
    public var userAgent: String?
    public var current: Bool

    public init(id: String, clientId: String, createdAt: Date, lastUsedAt: Date, expiresAt: Date, userAgent: String?, current: Bool) {
        self.id = id
        self.clientId = clientId
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.userAgent = userAgent
        self.current = current
    }
}

/// `GET /healthz` (`ok`: the process answers) and `GET /readyz` (`ready`: its database answers too).
public struct StatusResponse: Codable, Sendable, Equatable {
    public var status: String

    public init(status: String) { self.status = status }
}

/// `GET /v1/me/sessions`: the user's active sessions.
public struct SessionList: Codable, Sendable, Equatable {
    public var sessions: [SessionResponse]

    public init(sessions: [SessionResponse]) { self.sessions = sessions }
}

/// How many sessions a request ended: `POST /v1/logout`, and the admin API's session revocations.
public struct RevokedSessionsResponse: Codable, Sendable, Equatable {
    public var revokedSessions: Int

    public init(revokedSessions: Int) { self.revokedSessions = revokedSessions }
}

/// `DELETE /v1/me`: the account is deleted, its provider grants revoked or queued for revocation.
public struct AccountDeletionResponse: Codable, Sendable, Equatable {
    /// Always 1.
    public var deleted: Int
    /// Provider grants revoked now.
    public var tokensRevoked: Int
    /// Revocations a provider did not take now, retried in the background.
    public var revocationsPending: Int
    /// The same as ``tokensRevoked`` (its name predates other providers).
    public var appleTokensRevoked: Int
    /// The same as ``revocationsPending`` (its name predates other providers).
    public var appleRevocationsPending: Int

    public init(tokensRevoked: Int, revocationsPending: Int) {
        deleted = 1
        self.tokensRevoked = tokensRevoked
        self.revocationsPending = revocationsPending
        appleTokensRevoked = tokensRevoked
        appleRevocationsPending = revocationsPending
    }
}

/// `POST /v1/apple/notifications`: what the notification did (`processed`, `duplicate` or `unknownSubject`).
public struct AppleNotificationResponse: Codable, Sendable, Equatable {
    public var status: String

    public init(status: String) { self.status = status }
}

/// Where the browser goes next, for a page that posts JSON instead of following a redirect (`POST /oauth2/passkey`).
public struct RedirectResponse: Codable, Sendable, Equatable {
    public var redirectTo: String

    public init(redirectTo: String) { self.redirectTo = redirectTo }
}

/// `POST /v1/auth/email/start` and `/v1/me/identities/email/start`: where to send a sign-in code.
public struct EmailStartRequest: Codable, Sendable, Equatable {
    public var email: String
    /// The invitation of a new user, when the server's `signup.mode` is `invite` (checked at verify).
    public var inviteCode: String?

    public init(email: String, inviteCode: String? = nil) {
        self.email = email
        self.inviteCode = inviteCode
    }
}

/// `POST /v1/auth/email/verify` and `/v1/me/identities/email/verify`: the code the message carried.
public struct EmailVerifyRequest: Codable, Sendable, Equatable {
    public var email: String
    public var code: String
    /// The invitation of a new user, when the server's `signup.mode` is `invite`.
    public var inviteCode: String?
    /// App Attest's evidence for this sign-in, where the server asks for it.
    public var appAttest: AppAttestEvidence? = nil

    public init(email: String, code: String, inviteCode: String? = nil) {
        self.email = email
        self.code = code
        self.inviteCode = inviteCode
    }
}

/// The `appAttest` member of a native sign-in: what DCAppAttestService made (standard base64), an attestation on an
/// install's first sign-in and an assertion on later ones, over the client data hash SHA-256(`challenge` + "." + the
/// DPoP key's RFC 7638 thumbprint), or SHA-256(`challenge`) without a DPoP key.
public struct AppAttestEvidence: Codable, Sendable, Equatable {
    /// The App Attest key's id, as `generateKey()` returned it.
    public var keyId: String
    public var attestation: String?
    public var assertion: String?
    /// From `POST /v1/attest/challenge`.
    public var challenge: String

    public init(keyId: String, attestation: String? = nil, assertion: String? = nil, challenge: String) {
        (self.keyId, self.attestation, self.assertion, self.challenge) = (keyId, attestation, assertion, challenge)
    }
}
