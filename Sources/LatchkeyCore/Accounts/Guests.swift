public import Foundation
public import LatchkeyJOSE

/// Guests: `anonymous.*` settings.
public struct AnonymousPolicy: Sendable, Equatable {
    /// Whether `POST /v1/auth/anonymous` makes guests.
    public var enabled = false
    /// Guests one address may make per hour, counted in the store (fleet-wide).
    public var perIPPerHour = 30
    /// A guest with no session used for this long is deleted by the sweep (`user.deleted`, reason `anonymous_expired`).
    public var ttl: TimeInterval = 30 * 86_400

    public init(enabled: Bool = false, perIPPerHour: Int = 30, ttl: TimeInterval = 30 * 86_400) {
        self.enabled = enabled
        self.perIPPerHour = perIPPerHour
        self.ttl = ttl
    }

    /// The client id of a guest's sessions (no credential names one).
    public static let clientID = "anonymous"
}

/// Guests (App Store guideline 5.1.1(v): no account before features that need none): made by `POST /v1/auth/anonymous`,
/// upgraded in place when they link an identity (``SignInService/link(identity:provider:userID:providerRefreshToken:)``),
/// merged into the user who holds an identity they prove (``merge(guestID:into:)``), and deleted when idle.
public struct Guests: Sendable {
    public let store: any GuestStore & UserStore & TransactionalStore
    public let issuer: SessionIssuer
    public let policy: SessionPolicy
    public let timeSource: TimeSource

    public init(store: any GuestStore & UserStore & TransactionalStore, issuer: SessionIssuer, policy: SessionPolicy, timeSource: TimeSource) {
        self.store = store
        self.issuer = issuer
        self.policy = policy
        self.timeSource = timeSource
    }

    /// Makes a guest and starts their session; `user.created` (provider `anonymous`) goes with it. Refused while
    /// `anonymous.enabled` is off (`not_found`), and past `anonymous.perIpPerHour` for `ip` (`rate_limited`).
    public func signIn(ip: String?, userAgent: String?) async throws -> SignInService.SignInOutcome {
        guard policy.anonymous.enabled else { throw LatchkeyError(.notFound, "anonymous sign-in is off on this server (anonymous.enabled)") }
        let now = timeSource.now
        if let ip, try await store.countEvent(key: "anonymous|\(ip)", window: 3600, at: now) > policy.anonymous.perIPPerHour {
            throw LatchkeyError(.rateLimited, "too many guests from this address this hour; try again later")
        }
        let user = UserAccount(id: newIdentifier(), createdAt: now, isAnonymous: true)
        var prepared = issuer.prepareSession(
            userID: user.id, identityID: nil, clientID: AnonymousPolicy.clientID, userAgent: userAgent, idp: "anonymous", at: now)
        prepared.start.family.userIsAnonymous = true
        let start = prepared.start
        let created = policy.webhooks.deliveries(.userCreated(user.id, provider: "anonymous", at: now))
        let audited = AuditEvent(at: now, userID: user.id, kind: "user_created", detail: "provider=anonymous session=\(start.family.id)")
        try await store.write { tx in
            try await tx.insertAccounts([NewAccount(user: user, identities: [])])
            try await tx.createSession(start)
            try await tx.audit(audited)
            try await tx.enqueue(created)
        }
        return SignInService.SignInOutcome(tokens: try issuer.issue(prepared), user: user, identities: [], isNewUser: true)
    }

    /// Merges the guest `guestID` into `intoUserID` in one unit of work: the guest's sessions end and the guest is
    /// deleted (without `user.deleted`), with `user.merged` so that the backend moves the guest's rows. Refused
    /// (`merge_not_allowed`) unless `guestID` is a guest; the guest is left as it was when anything fails.
    public func merge(guestID: String, into intoUserID: String) async throws {
        guard let guest = try await store.user(id: guestID), guest.isAnonymous, guestID != intoUserID else {
            throw LatchkeyError(.mergeNotAllowed, "only a guest (an anonymous user) is merged into another account; link the identity instead")
        }
        let now = timeSource.now
        let merged = policy.webhooks.deliveries(.userMerged(from: guestID, into: intoUserID, at: now))
        let audited = AuditEvent(at: now, userID: intoUserID, kind: "user_merged", detail: "from=\(guestID)")
        try await store.write { tx in
            _ = try await tx.revokeSessions(userID: guestID, reason: "merged", at: now)
            guard try await tx.deleteUser(id: guestID) else {
                throw LatchkeyError(.mergeNotAllowed, "the guest is gone (merged or deleted meanwhile)")
            }
            try await tx.audit(audited)
            try await tx.enqueue(merged)
        }
    }

    /// Deletes guests with no session used for `anonymous.ttl`, each with `user.deleted` (reason `anonymous_expired`);
    /// how many. At most `limit` per call.
    @discardableResult public func sweep(limit: Int = 500) async throws -> Int {
        let now = timeSource.now
        var deleted = 0
        for id in try await store.idleAnonymousUsers(before: now.addingTimeInterval(-policy.anonymous.ttl), limit: limit) {
            let gone = policy.webhooks.deliveries(.userDeleted(id, reason: .anonymousExpired, at: now))
            let audited = AuditEvent(at: now, userID: id, kind: "anonymous_user_expired", detail: "")
            let done = try await store.write { tx in
                guard try await tx.deleteUser(id: id) else { return false }
                try await tx.audit(audited)
                try await tx.enqueue(gone)
                return true
            }
            if done { deleted += 1 }
        }
        return deleted
    }
}
