public import Foundation
public import LatchkeyJOSE

/// What happened to a user at the provider, from a verified server-to-server notification.
public struct ProviderAccountEvent: Sendable, Equatable {
    public enum Kind: String, Sendable { case consentRevoked, accountDeleted, emailDisabled, emailEnabled, other }
    public var id: String
    public var provider: String
    public var kind: Kind
    public var subject: String
    /// When it happened at the provider, when the provider says (a notification may arrive long after).
    public var occurredAt: Date?

    public init(id: String, provider: String, kind: Kind, subject: String, occurredAt: Date? = nil) {
        self.id = id
        self.provider = provider
        self.kind = kind
        self.subject = subject
        self.occurredAt = occurredAt
    }
}

/// Applies what providers report about their accounts (consent revoked, account deleted, e-mail relay
/// changes) to the identity at that provider, once per event.
public struct ProviderEvents: Sendable {
    public let store: any UserStore & ReplayStore & AuditStore & TransactionalStore
    public let policy: SessionPolicy
    public let timeSource: TimeSource

    public init(store: any UserStore & ReplayStore & AuditStore & TransactionalStore, policy: SessionPolicy, timeSource: TimeSource) {
        self.store = store
        self.policy = policy
        self.timeSource = timeSource
    }

    public enum NotificationOutcome: Sendable, Equatable { case processed, duplicate, unknownSubject }

    /// Applies a provider's account event once per event id. The effect comes first and the id is recorded
    /// after it, so a failure midway leaves the event unrecorded and the provider's retry applies it.
    public func handle(_ event: ProviderAccountEvent) async throws -> NotificationOutcome {
        let now = timeSource.now
        guard try await !store.hasProcessedNotification(id: event.id) else { return .duplicate }
        var outcome = NotificationOutcome.processed
        if var identity = try await store.identity(provider: event.provider, subject: event.subject) {
            let userID = identity.userID
            let kind = "\(event.provider)_"
            // Each effect commits with its audit event and its deliveries, or not at all.
            switch event.kind {
            case .consentRevoked where event.occurredAt.map { identity.lastSignInAt > $0 } ?? false:
                // The user authorised the app again after revoking it, and the notification came late: only the sessions
                // begun before the revocation end; the identity, its new grant and the newer sessions stay.
                let revokedAt = event.occurredAt ?? now
                try await store.write { [identity] tx in
                    let count = try await tx.revokeSessions(identityID: identity.id, createdBefore: revokedAt, reason: kind + "consent_revoked", at: now)
                    try await tx.audit(
                        at: now, userID, kind + "consent_revoked",
                        "\(count) session(s) begun before it revoked; the user signed in again since, so the identity stays")
                }
            case .consentRevoked, .accountDeleted:
                // The provider account is gone for this app: so is the identity, and the standing of the sessions it began.
                // The identity, its sessions and (with no identity left) the user go in one transaction: a link that lands
                // meanwhile keeps the user, or fails because the user is gone; it is never deleted with the user.
                let what = event.kind == .consentRevoked ? "consent_revoked" : "account_deleted"
                let reason: LifecycleEvent.DeletionReason = event.kind == .consentRevoked ? .providerConsentRevoked : .providerAccountDeleted
                let revoked = policy.webhooks.deliveries(.identity(.identityRevoked, identity, at: now, reason: what))
                let deleted = policy.webhooks.deliveries(.userDeleted(userID, reason: reason, at: now))
                let deleteUser = policy.deleteUserWithLastIdentity
                try await store.write { [identity] tx in
                    let removal = try await tx.removeIdentity(
                        id: identity.id, userID: userID, reason: kind + what, at: now, deletingUserIfLast: deleteUser)
                    guard removal.removed else { return }
                    try await tx.enqueue(revoked)
                    if removal.userDeleted {
                        try await tx.enqueue(deleted)
                        try await tx.audit(
                            at: now, userID, kind + what, "\(removal.sessionsRevoked) session(s) revoked; the user had no other identity and was deleted")
                    } else {
                        try await tx.audit(at: now, userID, kind + what, "\(removal.sessionsRevoked) session(s) revoked; identity removed")
                    }
                }
            case .emailDisabled, .emailEnabled:
                identity.emailForwardingEnabled = event.kind == .emailEnabled
                let changed = policy.webhooks.deliveries(
                    LifecycleEvent.emailChanged(
                        userID, provider: event.provider, email: identity.email, verified: identity.emailVerified,
                        forwarding: identity.emailForwardingEnabled, at: now))
                let audited = kind + (event.kind == .emailEnabled ? "email_enabled" : "email_disabled")
                try await store.write { [identity] tx in
                    // Notified only when the identity was still there (not one a concurrent unlink removed).
                    guard try await tx.updateIdentity(identity) else { return }
                    try await tx.enqueue(changed)
                    try await tx.audit(at: now, userID, audited)
                }
            case .other:
                try await store.audit(AuditEvent(at: now, userID: userID, kind: kind + "notification_ignored"))
            }
        } else {
            outcome = .unknownSubject
        }
        // A concurrent replay may have recorded it first; its effect is idempotent, so both answers are fine.
        return try await store.recordNotification(id: event.id, type: event.kind.rawValue, at: now) ? outcome : .duplicate
    }

}
