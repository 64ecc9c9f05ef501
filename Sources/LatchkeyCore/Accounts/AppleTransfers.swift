import Foundation
public import LatchkeyJOSE
import Synchronization

/// The recipient team's side of an app transfer (Apple's TN3159) that needs no call to Apple: moving an identity to
/// its subject under the new team once that subject is known, from a sign-in's `transfer_sub` or from
/// `latchkey apple transfer complete`; and refusing, after the 60-day window, an Apple subject that may be a user
/// left unmoved.
public struct AppleTransfers: Sendable {
    public let store: any UserStore & MigrationStore & TransactionalStore
    public let webhooks: WebhookEndpoints
    public let timeSource: TimeSource
    private let summary = SummaryCache()

    public init(store: any UserStore & MigrationStore & TransactionalStore, webhooks: WebhookEndpoints, timeSource: TimeSource) {
        self.store = store
        self.webhooks = webhooks
        self.timeSource = timeSource
    }

    /// Moves the identity of `record` to `newSubject` (and a new relay address, which replaces the old one) with an
    /// audit event and an `identity.transferred` webhook, in one unit of work. Nil when it was moved already or is gone;
    /// `identity_in_use` when the new subject is another user's identity.
    public func move(_ record: AppleTransferRecord, newSubject: String, email: String?, isPrivateEmail: Bool?, via: String) async throws
        -> LinkedIdentity?
    {
        guard var identity = try await store.identity(provider: "apple", subject: record.oldSubject), identity.id == record.identityID else {
            return nil
        }
        if let holder = try await store.identity(provider: "apple", subject: newSubject), holder.id != identity.id {
            throw LatchkeyError(
                .identityInUse,
                "the recipient team's subject of identity \(identity.id) already belongs to user \(holder.userID), who signed in as a new user; "
                    + "delete that user or move their data, then run `latchkey apple transfer complete` again")
        }
        let now = timeSource.now
        let oldSubject = identity.subject
        identity.subject = newSubject
        if let email { identity.email = email }
        if let isPrivateEmail { identity.isPrivateEmail = isPrivateEmail }
        identity.transferSubject = record.transferSubject
        let moved = identity
        let audited = AuditEvent(at: now, userID: identity.userID, kind: "apple_identity_transferred", detail: "identity=\(identity.id) via=\(via)")
        let deliveries = webhooks.deliveries(.identityTransferred(moved, oldSubject: oldSubject, at: now))
        let done = try await store.write { tx in
            guard try await tx.moveTransferredIdentity(moved, at: now) else { return false }
            try await tx.audit(audited)
            try await tx.enqueue(deliveries)
            return true
        }
        summary.forget()
        return done ? moved : nil
    }

    /// Before an Apple sign-in is written: a `transfer_sub` this store prepared moves its identity to the token's
    /// subject first, so the sign-in lands on the user who had it. Without one, after a window that ended with
    /// identities unmoved, a subject Latchkey does not know is refused: it may be one of them, and a new user made for
    /// it would split that person in two.
    public func beforeSignIn(_ verified: VerifiedIdentity) async throws {
        if let transferSubject = verified.transferSubject {
            guard try await store.identity(provider: "apple", subject: verified.subject) == nil,
                let record = try await store.appleTransfer(transferSubject: transferSubject), record.movedAt == nil
            else { return }
            _ = try await move(record, newSubject: verified.subject, email: verified.email, isPrivateEmail: verified.isPrivateEmail, via: "sign_in")
            return
        }
        let now = timeSource.now
        guard try await summary.value(at: now, { try await store.appleTransferSummary(countingIdentities: false) }).endedIncomplete(at: now),
            try await store.identity(provider: "apple", subject: verified.subject) == nil
        else { return }
        throw LatchkeyError(
            .appleTransferIncomplete,
            "this Apple account is not known to the app, and the app's transfer window ended with users not moved to the new team: "
                + "it may be one of them. The operator runs `latchkey apple transfer status`; `latchkey apple transfer close` lets new Apple users sign up again"
        )
    }
}

/// The transfer summary, read at most once a minute on the sign-in path.
private final class SummaryCache: Sendable {
    private let cached = Mutex<(at: Date, value: AppleTransferSummary)?>(nil)

    func value(at now: Date, _ read: () async throws -> AppleTransferSummary) async throws -> AppleTransferSummary {
        if let hit = cached.withLock({ $0 }), now.timeIntervalSince(hit.at) < 60, now >= hit.at { return hit.value }
        let value = try await read()
        cached.withLock { $0 = (now, value) }
        return value
    }

    func forget() { cached.withLock { $0 = nil } }
}
