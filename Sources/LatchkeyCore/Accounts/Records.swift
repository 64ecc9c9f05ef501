public import Foundation
import LatchkeyJOSE
public import LatchkeyModels

/// A person using the app. Identified by ``id`` only; e-mail is informational and never links accounts.
public struct UserAccount: Sendable, Codable, Equatable {
    public var id: String
    public var createdAt: Date
    /// The e-mail from the first sign-in that shared one; later sign-ins never blank it.
    public var email: String?
    public var emailVerified: Bool?
    public var givenName: String?
    public var familyName: String?
    /// What the app's backend set with `PUT /admin/v1/users/{id}/claims`: top-level claims of every access token
    /// minted for the user. Only ``UserStore/setUserClaims(userID:claims:)`` changes them.
    public var claims: [String: JSONValue]?
    /// When the user was disabled: they cannot sign in, and their identities stay reserved (nil: enabled).
    public var disabledAt: Date?
    /// Where `latchkey users import` brought the user from.
    public var importedFrom: ImportOrigin?
    /// A guest (`POST /v1/auth/anonymous`) until an identity is linked: then the same user, no longer anonymous.
    public var isAnonymous: Bool

    public init(
        id: String, createdAt: Date, email: String? = nil, emailVerified: Bool? = nil, givenName: String? = nil, familyName: String? = nil,
        claims: [String: JSONValue]? = nil, disabledAt: Date? = nil, importedFrom: ImportOrigin? = nil, isAnonymous: Bool = false
    ) {
        self.isAnonymous = isAnonymous
        self.id = id
        self.createdAt = createdAt
        self.email = email
        self.emailVerified = emailVerified
        self.givenName = givenName
        self.familyName = familyName
        self.claims = claims
        self.disabledAt = disabledAt
        self.importedFrom = importedFrom
    }
}

/// The system a user was imported from, their id there, and when.
public struct ImportOrigin: Sendable, Codable, Equatable {
    /// `firebase`, `supabase`, `auth0` or `cognito`.
    public var source: String
    public var id: String
    public var at: Date

    public init(source: String, id: String, at: Date) {
        self.source = source
        self.id = id
        self.at = at
    }
}

/// A provider account linked to a user, keyed by provider and subject (never by e-mail).
public struct LinkedIdentity: Sendable, Codable, Equatable, AppleIdentityFacts {
    public var id: String
    public var userID: String
    /// `apple`, `google`, …
    public var provider: String
    public var subject: String
    public var email: String?
    public var emailVerified: Bool?
    /// The name the provider shared on the first sign-in (Apple shares it only then).
    public var givenName: String?
    public var familyName: String?
    /// What else the provider said about this account that is worth keeping (such as Microsoft's `tid`, Google's
    /// `hd`, Apple's `is_private_email`), by claim name; typed accessors read the ones Latchkey uses. Never used to
    /// find or link accounts.
    public var claims: [String: String]
    public var firstSeenAt: Date
    public var lastSignInAt: Date

    public init(
        id: String, userID: String, provider: String, subject: String, email: String? = nil, emailVerified: Bool? = nil,
        isPrivateEmail: Bool? = nil, realUserStatus: Int? = nil, transferSubject: String? = nil, givenName: String? = nil,
        familyName: String? = nil, emailForwardingEnabled: Bool? = nil, claims: [String: String] = [:], firstSeenAt: Date, lastSignInAt: Date
    ) {
        self.claims = claims
        self.id = id
        self.userID = userID
        self.provider = provider
        self.subject = subject
        self.email = email
        self.emailVerified = emailVerified
        self.givenName = givenName
        self.familyName = familyName
        self.firstSeenAt = firstSeenAt
        self.lastSignInAt = lastSignInAt
        self.isPrivateEmail = isPrivateEmail ?? self.isPrivateEmail
        self.realUserStatus = realUserStatus ?? self.realUserStatus
        self.transferSubject = transferSubject ?? self.transferSubject
        self.emailForwardingEnabled = emailForwardingEnabled ?? self.emailForwardingEnabled
    }
}

/// What only Apple tells about an account, kept in ``claims`` by claim name: a verified sign-in and the identity it
/// is kept as read it alike.
public protocol AppleIdentityFacts {
    var claims: [String: String] { get set }
}

extension AppleIdentityFacts {
    /// Apple: the e-mail is a Hide My Email relay address (`@privaterelay.appleid.com`).
    public var isPrivateEmail: Bool? {
        get { claims[LinkedIdentity.AppleClaim.isPrivateEmail].flatMap(Bool.init) }
        set { claims[LinkedIdentity.AppleClaim.isPrivateEmail] = newValue.map(String.init) }
    }

    /// Apple: the subject under the previous team, for 60 days after an app transfer.
    public var transferSubject: String? {
        get { claims[LinkedIdentity.AppleClaim.transferSubject] }
        set { claims[LinkedIdentity.AppleClaim.transferSubject] = newValue }
    }
}

extension LinkedIdentity {
    /// The names in ``claims`` of the facts only Apple tells.
    public enum AppleClaim {
        public static let isPrivateEmail = "is_private_email"
        public static let realUserStatus = "real_user_status"
        public static let transferSubject = "transfer_sub"
        public static let emailForwardingEnabled = "email_forwarding_enabled"
    }

    /// Apple's `real_user_status` (0 unsupported, 1 unknown, 2 likely real), when the sign-in carried one.
    public var realUserStatus: Int? {
        get { claims[AppleClaim.realUserStatus].flatMap { Int($0) } }
        set { claims[AppleClaim.realUserStatus] = newValue.map(String.init) }
    }

    /// Apple: whether mail to the relay address is forwarded (its `email-enabled`/`email-disabled` notifications).
    public var emailForwardingEnabled: Bool? {
        get { claims[AppleClaim.emailForwardingEnabled].flatMap(Bool.init) }
        set { claims[AppleClaim.emailForwardingEnabled] = newValue.map(String.init) }
    }
}

/// A provider's refresh (or long-lived access) token for an identity, kept encrypted, with its last validation.
public struct ProviderGrant: Sendable, Equatable {
    public var identityID: String
    /// The provider that issued the token (the identity's provider), which validates and revokes it.
    public var provider: String
    public var clientID: String
    /// ``SecretBox`` output; never the token in the clear.
    public var sealedRefreshToken: String
    /// The last time the provider confirmed the token (or when it was issued).
    public var lastValidatedAt: Date
    public var createdAt: Date

    public init(identityID: String, provider: String, clientID: String, sealedRefreshToken: String, lastValidatedAt: Date, createdAt: Date) {
        self.identityID = identityID
        self.provider = provider
        self.clientID = clientID
        self.sealedRefreshToken = sealedRefreshToken
        self.lastValidatedAt = lastValidatedAt
        self.createdAt = createdAt
    }
}

/// A session: one family of rotating refresh tokens.
public struct SessionFamily: Sendable, Codable, Equatable {
    public var id: String
    public var userID: String
    public var identityID: String?
    public var clientID: String
    public var createdAt: Date
    public var lastUsedAt: Date
    /// No refresh succeeds after this, however active the session.
    public var absoluteExpiresAt: Date
    public var revokedAt: Date?
    public var revocationReason: String?
    public var userAgent: String?
    /// The provider of the sign-in that began it (`idp` in its access tokens); nil for sessions from before it was kept.
    public var idp: String?
    /// The user's claims (``UserAccount/claims``) as read with the session to mint its access tokens: not stored with
    /// the session, and nil wherever the session was not read for that.
    public var userClaims: [String: JSONValue]?
    /// Whether the user is a guest (``UserAccount/isAnonymous``), read like ``userClaims``: `is_anonymous` in its
    /// access tokens.
    public var userIsAnonymous: Bool
    /// The RFC 7638 thumbprint of the DPoP key the session is bound to (RFC 9449): every refresh needs a proof by that
    /// key, and its access tokens carry it as `cnf.jkt`. Nil for a bearer session.
    public var dpopThumbprint: String?
    /// Whether the sign-in that began the session was vouched for by App Attest (`attested` in its access tokens).
    public var attested: Bool

    public init(
        id: String, userID: String, identityID: String?, clientID: String, createdAt: Date, lastUsedAt: Date, absoluteExpiresAt: Date,
        revokedAt: Date? = nil, revocationReason: String? = nil, userAgent: String? = nil, idp: String? = nil, userClaims: [String: JSONValue]? = nil,
        userIsAnonymous: Bool = false, dpopThumbprint: String? = nil, attested: Bool = false
    ) {
        self.userIsAnonymous = userIsAnonymous
        self.dpopThumbprint = dpopThumbprint
        self.attested = attested
        self.id = id
        self.userID = userID
        self.identityID = identityID
        self.clientID = clientID
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.absoluteExpiresAt = absoluteExpiresAt
        self.revokedAt = revokedAt
        self.revocationReason = revocationReason
        self.userAgent = userAgent
        self.idp = idp
        self.userClaims = userClaims
    }

    public var isRevoked: Bool { revokedAt != nil }
}

/// One refresh token of a family, stored only as its SHA-256 hash.
public struct RefreshTokenRecord: Sendable, Equatable {
    public var hash: String
    public var familyID: String
    public var parentHash: String?
    public var createdAt: Date
    /// The token dies if unused until then.
    public var idleExpiresAt: Date
    public var rotatedAt: Date?
    public var successorHash: String?

    public init(hash: String, familyID: String, parentHash: String?, createdAt: Date, idleExpiresAt: Date, rotatedAt: Date? = nil, successorHash: String? = nil)
    {
        self.hash = hash
        self.familyID = familyID
        self.parentHash = parentHash
        self.createdAt = createdAt
        self.idleExpiresAt = idleExpiresAt
        self.rotatedAt = rotatedAt
        self.successorHash = successorHash
    }
}

/// What happened when a refresh token was presented.
public enum RotationResult: Sendable, Equatable {
    /// The token was current: it is now rotated and the successor stored.
    case rotated(SessionFamily)
    /// The token was rotated moments ago to the same successor: a network retry.
    case retried(SessionFamily)
    /// The token was rotated before, outside the grace window: the family is now revoked.
    case reuseDetected(SessionFamily)
    case revoked(SessionFamily)
    case expired
    case unknown
    /// The caller's condition refused the token's session (see ``SessionStore/rotate(presentedHash:successor:now:graceWindow:accepting:)``):
    /// nothing changed.
    case declined(SessionFamily)
}

/// A signing key for Latchkey's access tokens. The private half is stored sealed.
public struct SigningKeyRecord: Sendable, Equatable {
    public enum State: String, Sendable, Codable, CaseIterable {
        /// Signs new tokens and is published.
        case active
        /// No longer signs, still published until tokens it signed have expired.
        case retiring
        /// Neither signs nor is published.
        case retired
    }

    public var keyID: String
    public var algorithm: String
    public var sealedPrivateKey: String
    public var publicKeyPEM: String
    public var state: State
    public var createdAt: Date
    /// For retiring keys: when they may be retired.
    public var retireAfter: Date?

    public init(keyID: String, algorithm: String, sealedPrivateKey: String, publicKeyPEM: String, state: State, createdAt: Date, retireAfter: Date? = nil) {
        self.keyID = keyID
        self.algorithm = algorithm
        self.sealedPrivateKey = sealedPrivateKey
        self.publicKeyPEM = publicKeyPEM
        self.state = state
        self.createdAt = createdAt
        self.retireAfter = retireAfter
    }
}

/// A call to a provider still owed, such as a revocation that failed during account deletion.
public struct OutboxItem: Sendable, Equatable {
    public var id: String
    public var kind: String
    /// The provider the call goes to.
    public var provider: String
    public var clientID: String
    /// The token to act on, sealed.
    public var sealedPayload: String
    public var attempts: Int
    public var nextAttemptAt: Date
    public var lastError: String?
    public var createdAt: Date
    public var completedAt: Date?

    /// Revoke the sealed token at ``provider``. (Items written before providers were named say `apple_revocation`.)
    public static let revocation = "revocation"

    public init(
        id: String, kind: String, provider: String, clientID: String, sealedPayload: String, attempts: Int = 0, nextAttemptAt: Date, lastError: String? = nil,
        createdAt: Date,
        completedAt: Date? = nil
    ) {
        self.id = id
        self.kind = kind
        self.provider = provider
        self.clientID = clientID
        self.sealedPayload = sealedPayload
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.createdAt = createdAt
        self.completedAt = completedAt
    }
}

/// A security-relevant event, kept for the audit trail. Never holds a token or key.
public struct AuditEvent: Sendable, Codable, Equatable {
    public var id: String
    public var at: Date
    public var userID: String?
    public var kind: String
    public var detail: String

    /// `detail` is kept with its control characters escaped (``escaped(_:)``): it may quote what a caller sent.
    public init(id: String = newIdentifier(), at: Date, userID: String?, kind: String, detail: String = "") {
        self.id = id
        self.at = at
        self.userID = userID
        self.kind = kind
        self.detail = Self.escaped(detail)
    }

    /// `text` with each control character (a newline, an escape sequence's ESC, a NUL) written as `\u{1b}`, so that a
    /// name a caller chose cannot forge a line or drive the terminal of whoever reads the audit log.
    public static func escaped(_ text: String) -> String {
        guard containsControlCharacter(text) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.isControlCharacter {
                result += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}

/// A new record identifier: a UUID whose first 48 bits are the time in milliseconds (the layout of RFC 9562's
/// version 7) and whose other 74 are random. Records made one after another get neighbouring keys, so inserting
/// them touches the end of each index instead of a random page of it (a sign-in writes about ten index entries).
/// The identifiers are not secrets and carry no more than the creation time their rows keep anyway.
public func newIdentifier() -> String {
    var bytes = systemRandomBytes(16)
    let millis = UInt64(max(0, Date().timeIntervalSince1970 * 1000))
    for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * index)) }
    bytes[6] = bytes[6] & 0x0F | 0x70
    bytes[8] = bytes[8] & 0x3F | 0x80
    // 8-4-4-4-12, as `UUID.uuidString` lays it out, written in place from the bytes: this runs five times per sign-in.
    return String(unsafeUninitializedCapacity: 36) { text in
        hexDigits.withUTF8Buffer { digits in
            var written = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    text[written] = UInt8(ascii: "-")
                    written += 1
                }
                text[written] = digits[Int(bytes[index] >> 4)]
                text[written + 1] = digits[Int(bytes[index] & 0x0F)]
                written += 2
            }
            return written
        }
    }
}

private let hexDigits: StaticString = "0123456789abcdef"

/// An invitation to sign up while `signup.mode` is `invite`. The code itself is never stored, only its hash.
public struct Invite: Sendable, Equatable {
    public var id: String
    /// SHA-256 (hex) of the code.
    public var codeHash: String
    public var createdAt: Date
    public var expiresAt: Date?
    /// How many new users the code may create.
    public var maxUses: Int
    public var uses: Int
    public var revokedAt: Date?
    public var note: String?

    public init(
        id: String, codeHash: String, createdAt: Date, expiresAt: Date? = nil, maxUses: Int = 1, uses: Int = 0, revokedAt: Date? = nil, note: String? = nil
    ) {
        self.id = id
        self.codeHash = codeHash
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.maxUses = maxUses
        self.uses = uses
        self.revokedAt = revokedAt
        self.note = note
    }

    /// Whether the code can still create a user at `now`.
    public func isUsable(at now: Date) -> Bool { revokedAt == nil && uses < maxUses && (expiresAt.map { now < $0 } ?? true) }
}

/// A record of the browser flow that may be used once: a provider sign-in in progress (found by its `state`)
/// or an authorization code. Only the hash of the key is stored; what it carries is sealed.
public struct OneTimeRecord: Sendable, Equatable {
    /// `flow` or `code`.
    public var kind: String
    /// SHA-256 (hex) of the state or code.
    public var keyHash: String
    public var sealedPayload: String
    public var expiresAt: Date
    /// When it was first used; nil while unused.
    public var usedAt: Date?

    public init(kind: String, keyHash: String, sealedPayload: String, expiresAt: Date, usedAt: Date? = nil) {
        self.kind = kind
        self.keyHash = keyHash
        self.sealedPayload = sealedPayload
        self.expiresAt = expiresAt
        self.usedAt = usedAt
    }
}

/// A linked identity as a sign-in finds it, with its user and all of the user's identities (oldest first).
public struct StoredAccount: Sendable, Equatable {
    public var identity: LinkedIdentity
    public var user: UserAccount
    public var identities: [LinkedIdentity]

    public init(identity: LinkedIdentity, user: UserAccount, identities: [LinkedIdentity]) {
        self.identity = identity
        self.user = user
        self.identities = identities
    }
}

/// A session family with its first refresh token, as a sign-in stores it.
public struct SessionStart: Sendable, Equatable {
    public var family: SessionFamily
    public var firstToken: RefreshTokenRecord

    public init(family: SessionFamily, firstToken: RefreshTokenRecord) {
        self.family = family
        self.firstToken = firstToken
    }
}

/// What one sign-in writes (see ``AuthStore/recordSignIn(_:)``).
public struct SignInRecord: Sendable, Equatable {
    public enum Account: Sendable, Equatable {
        /// A new user with their first identity.
        case create(UserAccount, LinkedIdentity)
        /// A known identity, changed; its user too when `user` is not nil.
        case update(user: UserAccount?, identity: LinkedIdentity)
    }

    public var account: Account
    /// The provider's token for this identity, sealed; replaces an older one.
    public var grant: ProviderGrant?
    public var session: SessionStart?
    public var audits: [AuditEvent]
    /// What the app's webhook endpoints hear of it.
    public var notices: [WebhookDelivery]

    public init(account: Account, grant: ProviderGrant? = nil, session: SessionStart? = nil, audits: [AuditEvent] = [], notices: [WebhookDelivery] = []) {
        self.account = account
        self.grant = grant
        self.session = session
        self.audits = audits
        self.notices = notices
    }
}
