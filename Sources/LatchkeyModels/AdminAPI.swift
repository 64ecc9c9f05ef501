public import Foundation

/// A user as the admin API shows them: the profile, identities, and (for one user) sessions and claims.
public struct AdminUserResponse: Codable, Sendable, Equatable {
    public var id: String
    public var email: String?
    public var emailVerified: Bool?
    public var givenName: String?
    public var familyName: String?
    public var createdAt: Date
    public var identities: [IdentityResponse]
    /// Only for `GET /admin/v1/users/{id}`.
    public var sessions: [AdminSessionResponse]?
    /// The claims set with `PUT /admin/v1/users/{id}/claims`; only for `GET /admin/v1/users/{id}`.
    public var claims: [String: JSONValue]?
    /// When the user was disabled (`POST /admin/v1/users/{id}/disable`, or imported disabled); absent while enabled.
    public var disabledAt: Date?
    /// Where `latchkey users import` brought the user from.
    public var importedFrom: ImportedFromResponse?

    public init(
        id: String, email: String?, emailVerified: Bool?, givenName: String?, familyName: String?, createdAt: Date, identities: [IdentityResponse],
        sessions: [AdminSessionResponse]? = nil, claims: [String: JSONValue]? = nil, disabledAt: Date? = nil, importedFrom: ImportedFromResponse? = nil
    ) {
        self.disabledAt = disabledAt
        self.importedFrom = importedFrom
        self.id = id
        self.email = email
        self.emailVerified = emailVerified
        self.givenName = givenName
        self.familyName = familyName
        self.createdAt = createdAt
        self.identities = identities
        self.sessions = sessions
        self.claims = claims
    }
}

/// The system an imported user came from, their id there, and when they were imported.
public struct ImportedFromResponse: Codable, Sendable, Equatable {
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

/// `POST /admin/v1/users/{id}/disable` and `/enable`: the user's state now.
public struct AdminUserDisable: Codable, Sendable, Equatable {
    public var userId: String
    public var disabled: Bool
    /// False when the user was in that state already.
    public var changed: Bool
    /// The sessions disabling ended.
    public var sessionsRevoked: Int

    public init(userId: String, disabled: Bool, changed: Bool, sessionsRevoked: Int) {
        self.userId = userId
        self.disabled = disabled
        self.changed = changed
        self.sessionsRevoked = sessionsRevoked
    }
}

/// `GET /admin/v1/users`: a page, and the cursor of the next one (nil on the last page).
public struct AdminUserList: Codable, Sendable, Equatable {
    public var users: [AdminUserResponse]
    public var nextCursor: String?

    public init(users: [AdminUserResponse], nextCursor: String?) {
        self.users = users
        self.nextCursor = nextCursor
    }
}

/// A session, live or ended, as the admin API shows it.
public struct AdminSessionResponse: Codable, Sendable, Equatable {
    public var id: String
    public var clientId: String
    public var createdAt: Date
    public var lastUsedAt: Date
    public var expiresAt: Date
    public var userAgent: String?
    public var revokedAt: Date?
    public var revocationReason: String?

    public init(
        id: String, clientId: String, createdAt: Date, lastUsedAt: Date, expiresAt: Date, userAgent: String?, revokedAt: Date?, revocationReason: String?
    ) {
        self.id = id
        self.clientId = clientId
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.userAgent = userAgent
        self.revokedAt = revokedAt
        self.revocationReason = revocationReason
    }
}

/// An audit event: what happened to an account, or what an admin key did.
public struct AuditEventResponse: Codable, Sendable, Equatable {
    public var id: String
    public var at: Date
    public var userId: String?
    public var type: String
    public var detail: String

    public init(id: String, at: Date, userId: String?, type: String, detail: String) {
        self.id = id
        self.at = at
        self.userId = userId
        self.type = type
        self.detail = detail
    }
}

/// `GET /admin/v1/audit`: newest first, and the cursor of the next (older) page.
public struct AuditEventList: Codable, Sendable, Equatable {
    public var events: [AuditEventResponse]
    public var nextCursor: String?

    public init(events: [AuditEventResponse], nextCursor: String?) {
        self.events = events
        self.nextCursor = nextCursor
    }
}

/// An invite code; `code` only in the answer that made it.
public struct InviteResponse: Codable, Sendable, Equatable {
    public var id: String
    public var code: String?
    public var maxUses: Int
    public var uses: Int
    public var createdAt: Date
    public var expiresAt: Date?
    public var revokedAt: Date?
    public var note: String?

    public init(id: String, code: String?, maxUses: Int, uses: Int, createdAt: Date, expiresAt: Date?, revokedAt: Date?, note: String?) {
        self.id = id
        self.code = code
        self.maxUses = maxUses
        self.uses = uses
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
        self.note = note
    }
}

/// `POST /admin/v1/invites`.
public struct InviteRequest: Codable, Sendable, Equatable {
    /// How many new users the code may create (default 1).
    public var maxUses: Int?
    /// Seconds until the code expires (none by default).
    public var expiresIn: Int?
    public var note: String?

    public init(maxUses: Int? = nil, expiresIn: Int? = nil, note: String? = nil) {
        self.maxUses = maxUses
        self.expiresIn = expiresIn
        self.note = note
    }
}

/// A webhook delivery as the admin API shows it (never its body's secrets: it has none).
public struct WebhookDeliveryResponse: Codable, Sendable, Equatable {
    public var id: String
    /// The event's `webhook-id`.
    public var webhookId: String
    public var endpoint: String
    public var type: String
    public var userId: String?
    /// `pending`, `delivered` or `failed`.
    public var status: String
    public var attempts: Int
    /// While pending: when it is tried next.
    public var nextAttemptAt: Date?
    public var lastError: String?
    public var createdAt: Date
    public var finishedAt: Date?
    /// The event as it is sent on every attempt; only for `GET /admin/v1/webhooks/deliveries/{id}`. The endpoint's
    /// signing secret is never in it (the signature goes in a header, made at each attempt).
    public var payload: JSONValue?

    public init(
        id: String, webhookId: String, endpoint: String, type: String, userId: String?, status: String, attempts: Int, nextAttemptAt: Date?,
        lastError: String?, createdAt: Date, finishedAt: Date?, payload: JSONValue? = nil
    ) {
        self.payload = payload
        self.id = id
        self.webhookId = webhookId
        self.endpoint = endpoint
        self.type = type
        self.userId = userId
        self.status = status
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.createdAt = createdAt
        self.finishedAt = finishedAt
    }
}

/// `DELETE /admin/v1/users/{id}`: the user is deleted, their provider grants revoked or queued for revocation.
public struct AdminUserDeletion: Codable, Sendable, Equatable {
    /// Always 1.
    public var deleted: Int
    /// Provider grants revoked now.
    public var tokensRevoked: Int
    /// Revocations a provider did not take now, retried in the background.
    public var revocationsPending: Int

    public init(tokensRevoked: Int, revocationsPending: Int) {
        deleted = 1
        self.tokensRevoked = tokensRevoked
        self.revocationsPending = revocationsPending
    }
}

/// `PUT /admin/v1/users/{id}/claims`: the user's claims as set.
public struct ClaimsResponse: Codable, Sendable, Equatable {
    public var claims: [String: JSONValue]

    public init(claims: [String: JSONValue]) { self.claims = claims }
}

/// `GET /admin/v1/invites`: every invite, oldest first, without codes.
public struct InviteList: Codable, Sendable, Equatable {
    public var invites: [InviteResponse]

    public init(invites: [InviteResponse]) { self.invites = invites }
}

/// `GET /admin/v1/webhooks/deliveries`: the latest deliveries, newest first.
public struct WebhookDeliveryList: Codable, Sendable, Equatable {
    public var deliveries: [WebhookDeliveryResponse]

    public init(deliveries: [WebhookDeliveryResponse]) { self.deliveries = deliveries }
}

/// `POST /admin/v1/webhooks/deliveries/{id}/retry`: which delivery is due again.
public struct DeliveryRetry: Codable, Sendable, Equatable {
    public var retrying: String

    public init(retrying: String) { self.retrying = retrying }
}

/// `GET /v1/me/export` and `GET /admin/v1/users/{id}/export`: everything Latchkey holds about one user, as one JSON
/// document (GDPR Articles 15 and 20): the profile with identities, sessions and custom claims, the passkeys' public
/// details, the App Attest keys of the user's installs, the user's audit events and the webhook deliveries about them.
/// No token, secret or key is in it.
public struct UserDataExport: Codable, Sendable, Equatable {
    /// `latchkey.user-export.v1`.
    public var format: String
    public var exportedAt: Date
    public var user: AdminUserResponse
    public var passkeys: [PasskeyResponse]
    public var appAttestKeys: [AppAttestKeyResponse]
    /// Oldest first.
    public var auditEvents: [AuditEventResponse]
    /// Newest first.
    public var webhookDeliveries: [ExportedWebhookDelivery]

    public static let currentFormat = "latchkey.user-export.v1"

    public init(
        exportedAt: Date, user: AdminUserResponse, passkeys: [PasskeyResponse], appAttestKeys: [AppAttestKeyResponse], auditEvents: [AuditEventResponse],
        webhookDeliveries: [ExportedWebhookDelivery]
    ) {
        self.format = Self.currentFormat
        self.exportedAt = exportedAt
        self.user = user
        self.passkeys = passkeys
        self.appAttestKeys = appAttestKeys
        self.auditEvents = auditEvents
        self.webhookDeliveries = webhookDeliveries
    }
}

/// An install's App Attest key in a user's export: its id, app and environment, never its key material.
public struct AppAttestKeyResponse: Codable, Sendable, Equatable {
    public var keyId: String
    public var appId: String
    public var environment: String
    public var createdAt: Date
    public var lastUsedAt: Date

    public init(keyId: String, appId: String, environment: String, createdAt: Date, lastUsedAt: Date) {
        (self.keyId, self.appId, self.environment, self.createdAt, self.lastUsedAt) = (keyId, appId, environment, createdAt, lastUsedAt)
    }
}

/// A webhook delivery about the user, with the event it carried (the endpoint's signing secret is never in it).
public struct ExportedWebhookDelivery: Codable, Sendable, Equatable {
    public var id: String
    public var type: String
    public var endpoint: String
    public var status: String
    public var createdAt: Date
    public var finishedAt: Date?
    /// The event as it was sent.
    public var payload: JSONValue

    public init(id: String, type: String, endpoint: String, status: String, createdAt: Date, finishedAt: Date?, payload: JSONValue) {
        (self.id, self.type, self.endpoint, self.status, self.createdAt, self.finishedAt, self.payload) = (
            id, type, endpoint, status, createdAt, finishedAt, payload
        )
    }
}

/// A key that signs (or signed) access tokens, as `GET /admin/v1/keys` shows it: never its key material.
public struct SigningKeyResponse: Codable, Sendable, Equatable {
    /// The `kid` of the tokens it signs, as `/.well-known/jwks.json` publishes it.
    public var kid: String
    public var algorithm: String
    /// `active` (signs), `retiring` (published until the tokens it signed have expired) or `retired`.
    public var state: String
    public var createdAt: Date
    /// For a retiring key: when it may be retired.
    public var retireAfter: Date?

    public init(kid: String, algorithm: String, state: String, createdAt: Date, retireAfter: Date?) {
        (self.kid, self.algorithm, self.state, self.createdAt, self.retireAfter) = (kid, algorithm, state, createdAt, retireAfter)
    }
}

/// `GET /admin/v1/keys`: every signing key, oldest first.
public struct SigningKeyList: Codable, Sendable, Equatable {
    public var keys: [SigningKeyResponse]

    public init(keys: [SigningKeyResponse]) { self.keys = keys }
}

/// `POST /admin/v1/keys/rotate`: the new active key, when it starts signing, and the keys it retires.
public struct SigningKeyRotation: Codable, Sendable, Equatable {
    public var kid: String
    /// Every instance publishes and accepts the key within one maintenance interval, and signs with it from then.
    public var signsFrom: Date
    /// The previously active keys, retiring now: they verify until the tokens they signed have expired.
    public var retiring: [String]

    public init(kid: String, signsFrom: Date, retiring: [String]) {
        (self.kid, self.signsFrom, self.retiring) = (kid, signsFrom, retiring)
    }
}

/// One of `GET /admin/v1/findings`: what `latchkey doctor` would say about this server's set-up, as far as the
/// running server can tell.
public struct SetupFinding: Codable, Sendable, Equatable {
    /// `ok`, `warning` or `error`.
    public var status: String
    /// What was checked: a setting (`publicUrl`, `webhooks[0]`) or an area (`signingKeys`).
    public var check: String
    public var message: String
    /// What to do about it, when it is not all right.
    public var fix: String?

    public init(status: String, check: String, message: String, fix: String? = nil) {
        (self.status, self.check, self.message, self.fix) = (status, check, message, fix)
    }
}

/// `GET /admin/v1/findings`: every finding, and how many are errors and warnings.
public struct SetupFindingList: Codable, Sendable, Equatable {
    public var findings: [SetupFinding]
    public var errors: Int
    public var warnings: Int

    public init(findings: [SetupFinding]) {
        self.findings = findings
        errors = findings.filter { $0.status == "error" }.count
        warnings = findings.filter { $0.status == "warning" }.count
    }
}

/// `POST /admin/session`: the admin key the console signs in with (JSON, or the form field `key`).
public struct ConsoleSignInRequest: Codable, Sendable, Equatable {
    /// An admin key, `lka_…`.
    public var key: String

    public init(key: String) { self.key = key }
}

/// The admin console's session: which admin key it acts as, and until when.
public struct ConsoleSessionResponse: Codable, Sendable, Equatable {
    /// The admin key's name.
    public var name: String
    /// A read-only key's console shows no write controls, and its writes are refused.
    public var readOnly: Bool
    public var expiresAt: Date

    public init(name: String, readOnly: Bool, expiresAt: Date) {
        (self.name, self.readOnly, self.expiresAt) = (name, readOnly, expiresAt)
    }
}
