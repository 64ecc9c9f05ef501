public import Foundation
import LatchkeyJOSE
public import LatchkeyModels

/// Where Latchkey keeps users, sessions and keys: one store made of the aggregates below, `SQLAuthStore` (module
/// `LatchkeyStore`) in SQLite or PostgreSQL; tests use SQLite in temporary files. Every method is atomic on its own:
/// one that throws has written nothing.
///
/// The store gives the outcomes written here, and the conformance suite (`StoreConformanceTests`) holds it to them on
/// both databases: a key that is taken is ``AuthStoreError/duplicate``, a parent row that is missing (a user, an identity) is
/// ``AuthStoreError/notFound``, and a change to a row that is not there changes nothing, unless a method says otherwise.
///
/// A flow writes its change, its audit events and the ``WebhookDelivery`` rows it owes in one unit of work,
/// ``TransactionalStore/write(_:)``: they commit together, or none of them does.
public protocol AuthStore: SignInStore, UserStore, SessionStore, ProviderGrantStore, SigningKeyStore, ReplayStore, InviteStore, OutboxStore, AuditStore,
    MigrationStore, GuestStore, EmailCodeStore, AppAttestKeyStore,
    OneTimeRecordStore, WebhookStore, AdminKeyStore, TransactionalStore
{
    /// Creates or upgrades the schema.
    func migrate() async throws
    /// Throws when the store cannot answer (readiness).
    func ping() async throws
    /// Deletes expired refresh tokens and sign-in records, one-time records expired for a day, sessions revoked or
    /// expired for 30 days or more with all their tokens, sealed payloads of finished outbox items, and webhook
    /// deliveries finished longer ago than ``WebhookDelivery/deliveredRetention`` or ``WebhookDelivery/failedRetention``; returns how many
    /// rows went (tokens, sessions, sign-in and one-time records).
    ///
    /// With an `interval` above zero, it sweeps only when no sweep with an interval (by any instance sharing the store)
    /// was recorded within `interval` of `now`, and returns nil when it skipped; the record and the sweep commit
    /// together. A record further ahead of `now` than `interval` (from a clock that ran ahead) does not hold sweeps back.
    @discardableResult func sweep(now: Date, unlessSweptWithin interval: TimeInterval) async throws -> Int?
}

/// Sign-ins, one of the two batched writes (with the grouped rotation of ``SessionStore``).
public protocol SignInStore: Sendable {
    /// A sign-in in one transaction: claims the plan's identity token (when it has one), looks up the account of its
    /// provider and subject, and writes the plan's record for it (see ``SignInPlan``).
    func signIn(_ plan: SignInPlan) async throws -> SignInStepResult
}

/// The parts of ``SignInStore/signIn(_:)``, one at a time, for the conformance suite to hold each store to them; the
/// server only ever writes a sign-in whole.
package protocol SignInStepParts: AuthStore {
    /// The identity with this provider and subject, its user and all the user's identities, in one read; nil when
    /// no such identity is linked.
    func account(provider: String, subject: String) async throws -> StoredAccount?
    /// Everything one sign-in writes, atomically: the new or changed account, the provider grant, the first session
    /// and the audit events. `.duplicate` (and nothing written) when a created identity is linked already.
    func recordSignIn(_ record: SignInRecord) async throws
    /// Spends one use of the invite with this code hash if it is usable at `now`; false otherwise.
    func redeemInvite(codeHash: String, at now: Date) async throws -> Bool
}

/// One change at a time, each in a transaction of its own. A flow with an audit event, a webhook delivery or several
/// changes uses ``TransactionalStore/write(_:)`` itself, so that they commit together.
extension TransactionalStore {
    /// Writes what a sign-in learns about an identity (profile, claims, last sign-in); false when it is gone.
    @discardableResult public func updateIdentity(_ identity: LinkedIdentity) async throws -> Bool {
        try await write { try await $0.updateIdentity(identity) }
    }

    /// Links another identity to an existing user; `.duplicate` when that provider account is linked already (to anyone)
    /// or the identity's id is taken, `.notFound` when the user does not exist.
    public func addIdentity(_ identity: LinkedIdentity) async throws {
        try await write { try await $0.addIdentity(identity) }
    }

    /// Deletes an identity with its provider grant; the sessions it began are the caller's to revoke. False when it is gone.
    @discardableResult public func deleteIdentity(id: String) async throws -> Bool {
        try await write { try await $0.deleteIdentity(id: id) }
    }

    /// Unlinks the user's identity `id` unless it is the user's last one (see ``StoreTransaction/unlinkIdentity(id:userID:reason:at:)``).
    public func unlinkIdentity(id: String, userID: String, reason: String, at: Date) async throws -> IdentityUnlink {
        try await write { try await $0.unlinkIdentity(id: id, userID: userID, reason: reason, at: at) }
    }

    /// Deletes the user with their identities, provider grants and sessions; false when they are gone.
    @discardableResult public func deleteUser(id: String) async throws -> Bool {
        try await write { try await $0.deleteUser(id: id) }
    }

    /// Replaces the user's claims (nil or empty: none); false when there is no such user.
    public func setUserClaims(userID: String, claims: [String: JSONValue]?) async throws -> Bool {
        try await write { try await $0.setUserClaims(userID: userID, claims: claims) }
    }

    /// Revokes a live session; false when it is revoked already (its first reason and time stay) or gone.
    @discardableResult public func revokeSession(id: String, reason: String, at: Date) async throws -> Bool {
        try await write { try await $0.revokeSession(id: id, reason: reason, at: at) }
    }

    @discardableResult public func revokeSessions(userID: String, reason: String, at: Date) async throws -> Int {
        try await write { try await $0.revokeSessions(userID: userID, reason: reason, at: at) }
    }

    /// Saves the identity's grant, replacing the one it had (whose validation claim ends); `.notFound` when the
    /// identity is not linked.
    public func saveProviderGrant(_ grant: ProviderGrant) async throws {
        try await write { try await $0.saveProviderGrant(grant) }
    }

    /// Deletes the grant only if it still holds `sealedRefreshToken` (a newer sign-in's grant survives); false otherwise.
    public func deleteProviderGrant(identityID: String, sealedRefreshToken: String) async throws -> Bool {
        try await write { try await $0.deleteProviderGrant(identityID: identityID, sealedRefreshToken: sealedRefreshToken) }
    }

    /// Saves a new invite; `.duplicate` (and nothing written) when its id or its code's hash is taken.
    public func createInvite(_ invite: Invite) async throws {
        try await write { try await $0.createInvite(invite) }
    }

    /// Makes a failed delivery due at `at` again (see ``StoreTransaction/retryWebhookDelivery(id:at:)``).
    public func retryWebhookDelivery(id: String, at: Date) async throws -> Bool {
        try await write { try await $0.retryWebhookDelivery(id: id, at: at) }
    }

    /// Marks the invite revoked; false when there is no such invite. Revoking it again is true and keeps the first
    /// revocation's time.
    public func revokeInvite(id: String, at: Date) async throws -> Bool {
        try await write { try await $0.revokeInvite(id: id, at: at) }
    }
}

extension AuthStore {
    /// Sweeps now, whenever any instance last swept (see ``sweep(now:unlessSweptWithin:)``).
    @discardableResult public func sweep(now: Date) async throws -> Int {
        try await sweep(now: now, unlessSweptWithin: 0) ?? 0
    }
}

/// Users and the provider accounts linked to them.
public protocol UserStore: Sendable {
    func identity(provider: String, subject: String) async throws -> LinkedIdentity?
    /// Inserts a user with their first identity, atomically; `.duplicate` (and nothing written) when the user id, the
    /// identity id or the provider account is taken.
    func createUser(_ user: UserAccount, identity: LinkedIdentity) async throws
    func user(id: String) async throws -> UserAccount?
    func identities(userID: String) async throws -> [LinkedIdentity]
    /// The user and identities behind a live session, in one read; nil when the session is revoked or gone.
    func profile(userID: String, sessionID: String) async throws -> (UserAccount, [LinkedIdentity])?
    func users(limit: Int) async throws -> [UserAccount]
    /// The users `search` matches, oldest first (by id, which orders by creation), at most `search.limit`.
    func searchUsers(_ search: UserSearch) async throws -> [UserAccount]
}

/// Session families and their rotating refresh tokens.
public protocol SessionStore: Sendable {
    /// Starts a session with its first refresh token; `.duplicate` when the session id or the token's hash is taken,
    /// `.notFound` when the user does not exist. The identity is not checked: sessions outlive an unlinked identity.
    func createSession(_ family: SessionFamily, firstToken: RefreshTokenRecord) async throws
    /// The token with this hash and its family, without changing anything.
    func refreshToken(hash: String) async throws -> (RefreshTokenRecord, SessionFamily)?
    /// Rotates the presented token to `successor` atomically (see ``RotationResult``). With `accepting`, the token's
    /// session is read in the same step, and one it refuses is left as it is (``RotationResult/declined(_:)``).
    /// `.duplicate` (and nothing changed) when a rotation's successor names a token that is stored already. A session
    /// revoked for reuse writes the records of `reuse` (``ReuseNotice/records(for:)``) with its revocation.
    func rotate(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval, accepting: (@Sendable (SessionFamily) -> Bool)?,
        reuse: ReuseNotice?
    ) async throws -> RotationResult
    func session(id: String) async throws -> SessionFamily?
    func sessions(userID: String) async throws -> [SessionFamily]
    /// Revokes the live sessions an identity began, while it is linked: an unlinked identity's are not found (0), so
    /// revoke them before deleting the identity (``AuthStore/unlinkIdentity(id:userID:reason:at:)`` does both).
    @discardableResult func revokeSessions(identityID: String, reason: String, at: Date) async throws -> Int
    /// Revokes only sessions created before `createdBefore` (sessions started meanwhile belong to a newer authorization);
    /// like ``revokeSessions(identityID:reason:at:)``, only while the identity is linked.
    @discardableResult func revokeSessions(identityID: String, createdBefore: Date, reason: String, at: Date) async throws -> Int
}

/// Tokens held at providers (refresh tokens, long-lived access tokens), sealed.
public protocol ProviderGrantStore: Sendable {
    func providerGrant(identityID: String) async throws -> ProviderGrant?
    /// Records a successful validation, unless the grant was replaced meanwhile (then false); with
    /// `replacingWith`, the provider's new refresh token (sealed) takes the validated one's place.
    func markProviderGrantValidated(identityID: String, sealedRefreshToken: String, at: Date, replacingWith newSealedRefreshToken: String?) async throws
        -> Bool
    /// Takes the right to ask the provider about this grant until `until`, if it was last validated at or before
    /// `dueBefore` and nobody holds the right at `now`: true for exactly one caller across every instance on the store.
    /// ``markProviderGrantValidated(identityID:sealedRefreshToken:at:replacingWith:)`` gives the right back.
    func claimProviderValidation(identityID: String, sealedRefreshToken: String, dueBefore: Date, now: Date, until: Date) async throws -> Bool
    /// Keeps every instance from asking about this grant again before `until` (after the provider could not be reached).
    func postponeProviderValidation(identityID: String, until: Date) async throws
}

/// The keys that sign Latchkey's access tokens.
public protocol SigningKeyStore: Sendable {
    func signingKeys() async throws -> [SigningKeyRecord]
    /// Saves a new key, or a known key's state and retirement time: a key's material, algorithm and creation time
    /// never change once saved.
    func saveSigningKey(_ key: SigningKeyRecord) async throws
    /// Saves `key` only while no key is active, as one step across every instance sharing the store; false when
    /// one is (then that key signs). Instances starting together on an empty database so agree on one first key.
    /// `.duplicate` when no key is active but `key`'s id is taken.
    func saveFirstSigningKey(_ key: SigningKeyRecord) async throws -> Bool
}

/// What must happen once only: provider notifications and sign-ins with one identity token.
public protocol ReplayStore: Sendable {
    /// True the first time the notification `id` is recorded, false for a replay.
    func recordNotification(id: String, type: String, at: Date) async throws -> Bool
    func hasProcessedNotification(id: String) async throws -> Bool
    /// Records that the identity token with `tokenHash` signed `subject` in; false when it already did.
    /// Kept until `expiresAt` (when the token itself can no longer be accepted), then swept. A record is found by its
    /// provider, `tokenHash` and `expiresAt`, so `expiresAt` must follow from the token alone (its `exp` and a fixed margin).
    func recordSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) async throws -> Bool
    /// Forgets a record, so a sign-in that failed before starting its session can be retried with the same token.
    /// Only the record of `subject` goes; anything else is left as it is.
    func deleteSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) async throws
}

/// The browser flow's single-use records: provider flow state and authorization codes.
public protocol OneTimeRecordStore: Sendable {
    /// `.duplicate` when a record with this kind and key hash exists.
    func saveOneTimeRecord(_ record: OneTimeRecord) async throws
    /// Marks the record used, atomically across instances, and returns it as it was before: `usedAt` nil means
    /// this call used it first. Nil when there is no such record. Expiry is the caller's to check.
    func useOneTimeRecord(kind: String, keyHash: String, at: Date) async throws -> OneTimeRecord?
}

/// Invite codes for invite-only sign-up.
public protocol InviteStore: Sendable {
    func invites() async throws -> [Invite]
}

/// Calls to providers still owed (revocations that failed and are retried).
public protocol OutboxStore: Sendable {
    /// `.duplicate` (and nothing written) when the id is taken.
    func enqueue(_ item: OutboxItem) async throws
    /// Takes up to `limit` items due at `now` for the caller: each is hidden from every other caller until `leaseUntil`
    /// (by then the caller has updated it, or died and another instance retries it). Concurrent callers never get the same item.
    func claimDueOutboxItems(now: Date, limit: Int, leaseUntil: Date) async throws -> [OutboxItem]
    /// Records the outcome of a claimed item: its attempts, next attempt, last error and completion (nothing else
    /// changes). An item already completed, or missing, is left as it is.
    func updateOutboxItem(_ item: OutboxItem) async throws
    func outboxItems() async throws -> [OutboxItem]
}

/// Events owed to the app's webhook endpoints (a change writes its own with ``AuthStore``'s `notifying`).
public protocol WebhookStore: Sendable {
    /// `.duplicate` (and nothing written) when an id is taken.
    func enqueueWebhookDeliveries(_ deliveries: [WebhookDelivery]) async throws
    /// Takes up to `limit` pending deliveries to `endpoints` due at `now`, oldest first, hidden from every other caller
    /// until `leaseUntil`; concurrent callers never get the same one. (An instance claims only the endpoints it knows:
    /// during a rolling change of settings, another instance sends the rest.)
    func claimDueWebhookDeliveries(now: Date, limit: Int, leaseUntil: Date, endpoints: [String]) async throws -> [WebhookDelivery]
    /// Records attempts' outcomes (status, attempts, next attempt, last error, finish) in one step; a delivery no
    /// longer pending is left as it is.
    func updateWebhookDeliveries(_ deliveries: [WebhookDelivery]) async throws
    /// The latest `limit` deliveries (of one status, or all), newest first.
    func webhookDeliveries(status: WebhookDelivery.Status?, limit: Int) async throws -> [WebhookDelivery]
    /// The deliveries of events about one user, newest first.
    func webhookDeliveries(userID: String, limit: Int) async throws -> [WebhookDelivery]
    /// How many deliveries each endpoint has in each status.
    func webhookDeliveryCounts() async throws -> [WebhookDeliveryCount]
    /// One delivery, with its payload; nil when there is none with this id (or the sweep removed it).
    func webhookDelivery(id: String) async throws -> WebhookDelivery?
}

extension WebhookStore {
    /// Records one attempt's outcome (see ``updateWebhookDeliveries(_:)``).
    public func updateWebhookDelivery(_ delivery: WebhookDelivery) async throws { try await updateWebhookDeliveries([delivery]) }
}

/// A count of ``WebhookStore/webhookDeliveryCounts()``.
public struct WebhookDeliveryCount: Sendable, Equatable {
    public var endpoint: String
    public var status: WebhookDelivery.Status
    public var count: Int

    public init(endpoint: String, status: WebhookDelivery.Status, count: Int) {
        self.endpoint = endpoint
        self.status = status
        self.count = count
    }
}

/// What happened to accounts, for operators.
public protocol AuditStore: Sendable {
    /// `.duplicate` (and nothing written) when the event's id is taken.
    func audit(_ event: AuditEvent) async throws
    /// The latest `limit` events by time (of one user, or of all), oldest first.
    func auditEvents(userID: String?, limit: Int) async throws -> [AuditEvent]
    /// The events `search` matches, newest first (by id, which orders by time; oldest first with `oldestFirst`), at most
    /// `search.limit`.
    func auditEvents(_ search: AuditSearch) async throws -> [AuditEvent]
}

/// The admin API's keys, by name; only their hashes are kept.
public protocol AdminKeyStore: Sendable {
    /// `.duplicate` (and nothing written) when the name or the hash is taken.
    func createAdminKey(_ key: AdminKey) async throws
    /// Every key, revoked ones too, oldest first.
    func adminKeys() async throws -> [AdminKey]
    func adminKey(hash: String) async throws -> AdminKey?
    /// False when there is no such key; revoking it again is true and keeps the first revocation's time.
    func revokeAdminKey(name: String, at: Date) async throws -> Bool
}

extension AuthStore {
    public func profile(userID: String, sessionID: String) async throws -> (UserAccount, [LinkedIdentity])? {
        guard let session = try await session(id: sessionID), session.userID == userID, !session.isRevoked, let user = try await user(id: userID) else {
            return nil
        }
        return (user, try await identities(userID: userID))
    }
}

/// What ``StoreTransaction/removeIdentity(id:userID:reason:at:deletingUserIfLast:)`` did.
public struct IdentityRemoval: Sendable, Equatable {
    /// Whether the identity was there (nothing changed when it was not).
    public var removed: Bool
    /// The sessions it began that were still open.
    public var sessionsRevoked: Int
    /// Whether the user went with their last identity.
    public var userDeleted: Bool

    public init(removed: Bool, sessionsRevoked: Int, userDeleted: Bool) {
        self.removed = removed
        self.sessionsRevoked = sessionsRevoked
        self.userDeleted = userDeleted
    }
}

/// What ``StoreTransaction/unlinkIdentity(id:userID:reason:at:)`` did.
public enum IdentityUnlink: Sendable, Equatable {
    /// Unlinked, with the provider grant it held (nil: none).
    case unlinked(ProviderGrant?)
    /// Nothing changed: it is the user's only identity.
    case lastIdentity
    /// Nothing changed: the user has no such identity.
    case notFound
}

/// Store errors that callers act on.
public enum AuthStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case duplicate
    case notFound
    /// The database cannot answer now (unreachable, closed, locked, out of space or resources); retrying later
    /// may work. The reason says what failed, for the operator's log; it holds no data values.
    case unavailable(String)

    public var description: String {
        switch self {
        case .duplicate: "the record already exists"
        case .notFound: "the record no longer exists"
        case .unavailable(let reason): "the database is unavailable: \(reason)"
        }
    }
}

extension SessionStore {
    /// Rotates the presented token to `successor` atomically, whatever its session (see ``RotationResult``).
    public func rotate(presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval) async throws -> RotationResult {
        try await rotate(presentedHash: presentedHash, successor: successor, now: now, graceWindow: graceWindow, accepting: nil, reuse: nil)
    }

    /// Rotates without notifying anyone of a reuse.
    public func rotate(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval, accepting: (@Sendable (SessionFamily) -> Bool)?
    ) async throws -> RotationResult {
        try await rotate(presentedHash: presentedHash, successor: successor, now: now, graceWindow: graceWindow, accepting: accepting, reuse: nil)
    }
}
