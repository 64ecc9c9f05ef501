public import Foundation
public import LatchkeyJOSE
public import LatchkeyModels

/// Who made an administrative change: an admin API key, or the operator at the command line.
public enum AdminActor: Sendable, Equatable {
    /// An admin API key, by name.
    case key(String)
    /// The `latchkey` CLI, run by whoever can read the store's configuration.
    case cli

    /// How audit events name the actor: `key=NAME` or `by=cli`.
    var auditTag: String {
        switch self {
        case .key(let name): "key=\(name)"
        case .cli: "by=cli"
        }
    }
}

/// The administrative changes, for `/admin/v1` and the `latchkey` CLI alike: each commits with an audit event that
/// names who made it, in one unit of work. Parsing and answering stay with the caller.
public struct Administration: Sendable {
    public let store: any UserStore & TransactionalStore
    public let deletion: AccountDeletion
    public let timeSource: TimeSource

    public init(store: any UserStore & TransactionalStore, deletion: AccountDeletion, timeSource: TimeSource) {
        self.store = store
        self.deletion = deletion
        self.timeSource = timeSource
    }

    private static func event(_ actor: AdminActor, _ userID: String?, _ kind: String, _ detail: String, at now: Date) -> AuditEvent {
        AuditEvent(at: now, userID: userID, kind: kind, detail: actor.auditTag + (detail.isEmpty ? "" : " " + detail))
    }

    /// Deletes the user as `DELETE /v1/me` does (every provider grant revoked first); nil when there is no such user.
    public func deleteUser(id: String, by actor: AdminActor) async throws -> AccountDeletion.DeletionReport? {
        guard try await store.user(id: id) != nil else { return nil }
        let now = timeSource.now
        return try await deletion.deleteAccount(userID: id, reason: .admin) { report in
            [Self.event(actor, id, "admin_user_deleted", "revoked=\(report.revoked) queued=\(report.queued)", at: now)]
        }
    }

    /// Replaces the user's claims (empty: none); false when there is no such user. The caller checks them first
    /// (``UserClaims/problem(_:encodedSize:)``).
    public func setClaims(userID: String, claims: [String: JSONValue], by actor: AdminActor) async throws -> Bool {
        let audited = Self.event(actor, userID, "admin_claims_set", "names=\(claims.keys.sorted().joined(separator: ",").prefix(200))", at: timeSource.now)
        return try await store.write { tx in
            guard try await tx.setUserClaims(userID: userID, claims: claims) else { return false }
            try await tx.audit(audited)
            return true
        }
    }

    /// What disabling or enabling a user did.
    public struct DisableReport: Sendable, Equatable {
        /// False when the user was in that state already (nothing was written).
        public var changed: Bool
        public var sessionsRevoked: Int
        public var user: UserAccount
    }

    /// Disables the user (every session ends, sign-in answers `account_disabled`, the identities stay theirs) or enables
    /// them again, with an audit event and a `user.disabled` or `user.enabled` webhook; nil when there is no such user.
    public func setDisabled(userID: String, _ disabled: Bool, by actor: AdminActor) async throws -> DisableReport? {
        guard var user = try await store.user(id: userID) else { return nil }
        guard (user.disabledAt != nil) != disabled else { return DisableReport(changed: false, sessionsRevoked: 0, user: user) }
        let now = timeSource.now
        let deliveries = deletion.grants.policy.webhooks.deliveries(.userDisabled(userID, disabled: disabled, at: now))
        let revoked: Int? = try await store.write { tx in
            guard try await tx.setUserDisabled(userID: userID, at: disabled ? now : nil) else { return nil }
            let revoked = disabled ? try await tx.revokeSessions(userID: userID, reason: "user_disabled", at: now) : 0
            try await tx.audit(
                Self.event(actor, userID, disabled ? "admin_user_disabled" : "admin_user_enabled", disabled ? "sessions=\(revoked)" : "", at: now))
            try await tx.enqueue(deliveries)
            return revoked
        }
        guard let revoked else { return nil }
        user.disabledAt = disabled ? now : nil
        return DisableReport(changed: true, sessionsRevoked: revoked, user: user)
    }

    /// Revokes every open session of the user; nil when there is no such user, else how many were open.
    public func revokeSessions(userID: String, by actor: AdminActor) async throws -> Int? {
        guard try await store.user(id: userID) != nil else { return nil }
        let now = timeSource.now
        return try await store.write { tx in
            let count = try await tx.revokeSessions(userID: userID, reason: "revoked_by_admin", at: now)
            try await tx.audit(Self.event(actor, userID, "admin_sessions_revoked", "sessions=\(count)", at: now))
            return count
        }
    }

    /// Revokes one session; nil when there is none with this id, false when it was revoked already.
    public func revokeSession(id: String, by actor: AdminActor) async throws -> Bool? {
        let now = timeSource.now
        return try await store.write { tx in
            guard let session = try await tx.session(id: id) else { return nil }
            guard try await tx.revokeSession(id: id, reason: "revoked_by_admin", at: now) else { return false }
            try await tx.audit(Self.event(actor, session.userID, "admin_session_revoked", "session=\(id)", at: now))
            return true
        }
    }

    /// Makes an invite code that lets `maxUses` new users sign up until `expiresAt`. The code is returned once; only
    /// its hash is stored.
    public func createInvite(maxUses: Int = 1, expiresAt: Date? = nil, note: String? = nil, by actor: AdminActor) async throws -> (
        invite: Invite, code: String
    ) {
        let now = timeSource.now
        let code = "inv_" + lowercaseHex(systemRandomBytes(16))
        let invite = Invite(id: newIdentifier(), codeHash: sha256Hex(code), createdAt: now, expiresAt: expiresAt, maxUses: max(1, maxUses), note: note)
        let audited = Self.event(actor, nil, "admin_invite_created", "invite=\(invite.id)", at: now)
        try await store.write { tx in
            try await tx.createInvite(invite)
            try await tx.audit(audited)
        }
        return (invite, code)
    }

    /// Revokes an invite; false when there is none with this id.
    public func revokeInvite(id: String, by actor: AdminActor) async throws -> Bool {
        let audited = Self.event(actor, nil, "admin_invite_revoked", "invite=\(id)", at: timeSource.now)
        let now = timeSource.now
        return try await store.write { tx in
            guard try await tx.revokeInvite(id: id, at: now) else { return false }
            try await tx.audit(audited)
            return true
        }
    }

    /// Records an administrative action done outside the user store's transactions (a signing-key rotation, a console
    /// sign-in), as an audit event naming who did it.
    public func record(_ kind: String, _ detail: String = "", userID: String? = nil, by actor: AdminActor) async throws {
        let audited = Self.event(actor, userID, kind, detail, at: timeSource.now)
        try await store.write { tx in try await tx.audit(audited) }
    }

    /// Makes a failed webhook delivery due now; false when there is no failed delivery with this id.
    public func retryDelivery(id: String, by actor: AdminActor) async throws -> Bool {
        let now = timeSource.now
        let audited = Self.event(actor, nil, "admin_delivery_retried", "delivery=\(id)", at: now)
        return try await store.write { tx in
            guard try await tx.retryWebhookDelivery(id: id, at: now) else { return false }
            try await tx.audit(audited)
            return true
        }
    }
}
