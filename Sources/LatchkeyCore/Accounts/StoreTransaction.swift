public import Foundation
import LatchkeyJOSE
public import LatchkeyModels

/// One unit of work: the operations of ``TransactionalStore/write(_:)``'s transaction, which commits when its body
/// returns and rolls back whole when the body throws. A change, its audit events and the webhook deliveries it owes
/// go in one `write`, so they commit together or not at all.
///
/// An operation that fails (a key taken, a row missing) fails the whole unit: catch it outside `write`, never inside
/// (on PostgreSQL the transaction can take no further statement).
public protocol StoreTransaction: Sendable {
    /// Records what happened to a user's account (its detail escaped, see ``AuditEvent/init(id:at:userID:kind:detail:)``).
    func audit(_ event: AuditEvent) async throws
    /// Owes `deliveries` to the app's webhook endpoints from this transaction's commit on.
    func enqueue(_ deliveries: [WebhookDelivery]) async throws

    func session(id: String) async throws -> SessionFamily?
    /// Revokes a live session; false when it is revoked already (its first reason and time stay) or gone.
    func revokeSession(id: String, reason: String, at: Date) async throws -> Bool
    /// Revokes every live session of the user; how many.
    func revokeSessions(userID: String, reason: String, at: Date) async throws -> Int
    /// Revokes the live sessions the identity began before `createdBefore`; how many.
    func revokeSessions(identityID: String, createdBefore: Date, reason: String, at: Date) async throws -> Int

    /// Links `identity` to its user: `.notFound` when the user is gone, `.duplicate` when the provider account is linked.
    func addIdentity(_ identity: LinkedIdentity) async throws
    /// Updates a linked identity; false when it is gone.
    func updateIdentity(_ identity: LinkedIdentity) async throws -> Bool
    /// Unlinks the user's identity unless it is their last, deciding in the same transaction as the delete (on
    /// PostgreSQL with the user's row locked), so that two unlinks racing cannot leave the user with no way in. With it
    /// go its provider grant (returned, for the caller to revoke at the provider) and the sessions it began.
    func unlinkIdentity(id: String, userID: String, reason: String, at: Date) async throws -> IdentityUnlink
    /// Removes the identity with its grant and the sessions it began, and the user with their last identity when
    /// `deletingUserIfLast`: a link that lands meanwhile either counts (the user stays) or fails (the user is gone).
    func removeIdentity(id: String, userID: String, reason: String, at: Date, deletingUserIfLast: Bool) async throws -> IdentityRemoval
    /// Deletes the identity with its provider grant (its sessions stay); false when it is gone.
    func deleteIdentity(id: String) async throws -> Bool
    func saveProviderGrant(_ grant: ProviderGrant) async throws
    /// Deletes the identity's grant while it still holds `sealedRefreshToken`; false when a sign-in replaced it meanwhile.
    func deleteProviderGrant(identityID: String, sealedRefreshToken: String) async throws -> Bool
    /// Deletes the user and everything of theirs; false when they were gone already.
    func deleteUser(id: String) async throws -> Bool
    /// Replaces the user's claims (nil or empty: none); false when the user is gone.
    func setUserClaims(userID: String, claims: [String: JSONValue]?) async throws -> Bool
    /// Saves a new invite; `.duplicate` when its id or its code's hash is taken.
    func createInvite(_ invite: Invite) async throws
    /// Revokes an invite; false when there is none with this id.
    func revokeInvite(id: String, at: Date) async throws -> Bool
    /// Makes a failed delivery due at `at` again, with its attempts counted afresh; false when there is no failed
    /// delivery `id` (a pending one is sent on its schedule, a delivered one not again).
    func retryWebhookDelivery(id: String, at: Date) async throws -> Bool

    /// Disables the user from `at` (nil: enables them); false when the user is gone.
    func setUserDisabled(userID: String, at: Date?) async throws -> Bool
    /// Of `ids`, those a user has.
    func existingUserIDs(_ ids: [String]) async throws -> Set<String>
    /// The Latchkey id of each user imported from `source` under one of `sourceIDs`, by source id.
    func importedUserIDs(source: String, sourceIDs: [String]) async throws -> [String: String]
    /// The user holding each of `keys` that is linked.
    func identityOwners(_ keys: [ProviderAccountKey]) async throws -> [ProviderAccountKey: String]
    /// Inserts users and their identities, whose ids and provider accounts the caller found free in this transaction.
    func insertAccounts(_ accounts: [NewAccount]) async throws
    /// Starts a session: its family and first refresh token.
    func createSession(_ start: SessionStart) async throws
    /// Spends one use of the invite whose code hashes to `codeHash`; false when it is unknown, used up, expired or revoked.
    func redeemInvite(codeHash: String, at: Date) async throws -> Bool
    /// Makes a guest an ordinary user (their id stays); false when the user is gone or was no guest.
    func clearAnonymous(userID: String) async throws -> Bool
    /// Moves an identity to its subject under the team an app was transferred to (`identity` as it becomes), marks
    /// its transfer record moved and deletes its old team's provider grant; false when the record was moved already.
    func moveTransferredIdentity(_ identity: LinkedIdentity, at: Date) async throws -> Bool
}

extension StoreTransaction {
    /// A guest's first identity, written in this transaction, upgrades them: they stop being anonymous, with their
    /// `user.upgraded` `deliveries` and an audit event, spending the invite `inviteHash` names when sign-up needs one
    /// (`signup_closed` when it cannot be spent). Nothing for a user who is no guest.
    public func upgradeGuest(userID: String, provider: String, at: Date, deliveries: [WebhookDelivery], inviteHash: String? = nil) async throws {
        guard try await clearAnonymous(userID: userID) else { return }
        if let inviteHash, try await !redeemInvite(codeHash: inviteHash, at: at) {
            throw LatchkeyError(.signupClosed, "the invite code is unknown, used up, expired or revoked")
        }
        try await enqueue(deliveries)
        try await audit(at: at, userID, "user_upgraded", "provider=\(provider)")
    }

    /// Records what happened to a user's account.
    public func audit(at: Date, _ userID: String?, _ kind: String, _ detail: String = "") async throws {
        try await audit(AuditEvent(at: at, userID: userID, kind: kind, detail: detail))
    }
}

/// What a change writes beside itself, in its own transaction: the audit events it leaves and the webhook deliveries
/// it owes (see ``SessionStore/rotate(presentedHash:successor:now:graceWindow:accepting:reuse:)``).
public struct ChangeRecords: Sendable, Equatable {
    public var audits: [AuditEvent]
    public var deliveries: [WebhookDelivery]

    public init(audits: [AuditEvent] = [], deliveries: [WebhookDelivery] = []) {
        self.audits = audits
        self.deliveries = deliveries
    }
}

/// What a rotation writes when the presented token turns out reused, with the revocation of its session: the audit
/// event and the `session.reuse_detected` deliveries, made for that session (see ``records(for:)``).
public struct ReuseNotice: Sendable {
    /// When the token was presented.
    public var at: Date
    /// Where it came from.
    public var origin: RequestOrigin
    /// The endpoints that hear of it.
    public var webhooks: WebhookEndpoints

    public init(at: Date, origin: RequestOrigin, webhooks: WebhookEndpoints) {
        self.at = at
        self.origin = origin
        self.webhooks = webhooks
    }

    /// The audit event and deliveries of revoking `family` for reuse.
    public func records(for family: SessionFamily) -> ChangeRecords {
        ChangeRecords(
            audits: [AuditEvent(at: at, userID: family.userID, kind: "refresh_token_reuse", detail: "session=\(family.id); the session was revoked")],
            deliveries: webhooks.deliveries(.reuseDetected(family, ip: origin.ip, userAgent: origin.userAgent, at: at)))
    }
}

/// A store whose changes can be grouped into one transaction.
public protocol TransactionalStore: Sendable {
    /// Runs `body` in one transaction: everything it did commits when it returns, and nothing when it throws.
    func write<T: Sendable>(_ body: @escaping @Sendable (any StoreTransaction) async throws -> T) async throws -> T
}
