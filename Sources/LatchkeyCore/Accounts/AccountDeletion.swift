import Foundation
public import LatchkeyJOSE

/// Deletes accounts as the App Store requires: every provider grant is revoked first (or queued in the
/// outbox when a provider cannot be reached), then everything of the user goes.
public struct AccountDeletion: Sendable {
    public let store: any UserStore & TransactionalStore
    public let grants: ProviderGrants
    public let timeSource: TimeSource

    public init(store: any UserStore & TransactionalStore, grants: ProviderGrants, timeSource: TimeSource) {
        self.store = store
        self.grants = grants
        self.timeSource = timeSource
    }

    public struct DeletionReport: Sendable, Equatable {
        /// Provider tokens revoked at once.
        public var revoked: Int
        /// Provider revocations that failed and wait in the outbox.
        public var queued: Int
    }

    /// Deletes an account as the App Store requires: revoke every provider grant first, then delete everything.
    /// A revocation that fails is kept in the outbox and retried; the deletion happens regardless. The app's webhook
    /// endpoints hear `user.deleted` with `reason`.
    /// `auditing` adds events to the deletion's own (an administrator's, say), in its transaction.
    public func deleteAccount(
        userID: String, reason: LifecycleEvent.DeletionReason = .userRequest, auditing: @escaping @Sendable (DeletionReport) -> [AuditEvent] = { _ in [] }
    ) async throws -> DeletionReport {
        var report = DeletionReport(revoked: 0, queued: 0)
        for identity in try await store.identities(userID: userID) {
            switch try await grants.revoke(of: identity) {
            case true?: report.revoked += 1
            case false?: report.queued += 1
            case nil: break
            }
        }
        let now = timeSource.now
        let deleted = grants.policy.webhooks.deliveries(.userDeleted(userID, reason: reason, at: now))
        let finished = report
        // The deletion, its audit events and user.deleted in one transaction.
        try await store.write { tx in
            if try await tx.deleteUser(id: userID) { try await tx.enqueue(deleted) }
            try await tx.audit(at: now, userID, "account_deleted", "revoked=\(finished.revoked) queued=\(finished.queued)")
            for event in auditing(finished) { try await tx.audit(event) }
        }
        return report
    }

}
