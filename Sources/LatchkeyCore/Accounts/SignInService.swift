import Crypto
public import Foundation

/// Sign-ins: finds or creates the user for a verified provider identity and starts a session; links and
/// unlinks identities; single-use identity tokens; invite-only sign-up.
public struct SignInService: Sendable {
    public let store: any AuthStore
    public let grants: ProviderGrants
    public let issuer: SessionIssuer
    public let policy: SessionPolicy
    public let timeSource: TimeSource

    public init(store: any AuthStore, grants: ProviderGrants, issuer: SessionIssuer, policy: SessionPolicy, timeSource: TimeSource) {
        self.store = store
        self.grants = grants
        self.issuer = issuer
        self.policy = policy
        self.timeSource = timeSource
    }

    public struct SignInOutcome: Sendable {
        public var tokens: IssuedTokens
        public var user: UserAccount
        public var identities: [LinkedIdentity]
        public var isNewUser: Bool
    }

    /// The account a verified sign-in belongs to, created or updated, with the provider grant saved.
    public struct ResolvedAccount: Sendable {
        public var user: UserAccount
        public var identity: LinkedIdentity
        public var identities: [LinkedIdentity]
        public var isNewUser: Bool
    }

    /// Records a verified sign-in and starts a session. Users are found by provider and subject only.
    /// E-mail and name from the first sign-in are kept; later sign-ins fill gaps but never blank them.
    public func signIn(
        identity verified: VerifiedIdentity, provider: String, givenName: String? = nil, familyName: String? = nil,
        providerRefreshToken: String? = nil, userAgent: String? = nil, inviteCode: String? = nil
    ) async throws -> SignInOutcome {
        let (account, session) = try await resolve(
            identity: verified, provider: provider, givenName: givenName, familyName: familyName, providerRefreshToken: providerRefreshToken,
            inviteCode: inviteCode, startsSession: true, userAgent: userAgent)
        // `resolve` prepares a session whenever it is asked to start one.
        guard let session else { throw AuthStoreError.notFound }
        return SignInOutcome(tokens: try issuer.issue(session), user: account.user, identities: account.identities, isNewUser: account.isNewUser)
    }

    /// Finds or creates the user of a verified sign-in exactly as ``signIn(identity:provider:givenName:familyName:providerRefreshToken:userAgent:inviteCode:)``
    /// does (sign-up policy included), without starting a session: the browser flow starts it when the app redeems its code.
    public func resolveAccount(
        identity verified: VerifiedIdentity, provider: String, givenName: String? = nil, familyName: String? = nil,
        providerRefreshToken: String? = nil, inviteCode: String? = nil
    ) async throws -> ResolvedAccount {
        try await resolve(
            identity: verified, provider: provider, givenName: givenName, familyName: familyName, providerRefreshToken: providerRefreshToken,
            inviteCode: inviteCode, startsSession: false, userAgent: nil
        ).account
    }

    /// Finds or creates the account and writes it in one store call, with the provider grant, the audit events and,
    /// when `startsSession` is set, a new session: a sign-in is one transaction.
    private func resolve(
        identity verified: VerifiedIdentity, provider: String, givenName: String?, familyName: String?, providerRefreshToken: String?,
        inviteCode: String?, startsSession: Bool, userAgent: String?
    ) async throws -> (account: ResolvedAccount, session: PreparedSession?) {
        let now = timeSource.now
        let givenName = givenName.flatMap { $0.isEmpty ? nil : $0 } ?? verified.givenName
        let familyName = familyName.flatMap { $0.isEmpty ? nil : $0 } ?? verified.familyName
        let email = verified.email.flatMap { $0.isEmpty ? nil : $0 }

        /// The record for `identity` of `user`, with a new session when one is wanted.
        func record(_ account: SignInRecord.Account, user: UserAccount, identity: LinkedIdentity, audits: [AuditEvent]) throws
            -> (SignInRecord, PreparedSession?)
        {
            let session =
                startsSession ? issuer.prepareSession(userID: user.id, identityID: identity.id, clientID: verified.audience, userAgent: userAgent) : nil
            var audits = audits
            if let session {
                audits.append(AuditEvent(at: now, userID: user.id, kind: "signed_in", detail: "provider=\(provider) session=\(session.start.family.id)"))
            }
            let grant = try grants.grant(providerRefreshToken, identity: identity, clientID: verified.audience)
            return (SignInRecord(account: account, grant: grant, session: session?.start, audits: audits), session)
        }

        /// A known identity: fills gaps in the user's profile, refreshes the identity's and records the sign-in.
        func signInExisting(_ found: StoredAccount) async throws -> (account: ResolvedAccount, session: PreparedSession?) {
            var user = found.user
            var changedUser = user
            changedUser.email = user.email ?? email
            changedUser.emailVerified = user.email == nil ? verified.emailVerified : user.emailVerified
            changedUser.givenName = user.givenName ?? givenName
            changedUser.familyName = user.familyName ?? familyName
            let userChanged = changedUser != user
            user = changedUser
            var identity = found.identity
            identity.email = identity.email ?? email
            identity.emailVerified = verified.emailVerified ?? identity.emailVerified
            identity.isPrivateEmail = verified.isPrivateEmail ?? identity.isPrivateEmail
            identity.realUserStatus = verified.realUserStatus?.rawValue ?? identity.realUserStatus
            identity.transferSubject = verified.transferSubject ?? identity.transferSubject
            identity.givenName = identity.givenName ?? givenName
            identity.familyName = identity.familyName ?? familyName
            identity.claims.merge(Self.claims(of: verified)) { $1 }
            identity.lastSignInAt = now
            let (written, session) = try record(.update(user: userChanged ? user : nil, identity: identity), user: user, identity: identity, audits: [])
            try await store.recordSignIn(written)
            let identities = found.identities.map { $0.id == identity.id ? identity : $0 }
            return (ResolvedAccount(user: user, identity: identity, identities: identities, isNewUser: false), session)
        }

        if let found = try await store.account(provider: provider, subject: verified.subject) { return try await signInExisting(found) }
        if policy.requireInvite {
            guard let inviteCode, !inviteCode.isEmpty, try await store.redeemInvite(codeHash: sha256Hex(inviteCode), at: now) else {
                throw LatchkeyError(
                    .signupClosed,
                    inviteCode == nil
                        ? "sign-up needs an invitation on this server: send the inviteCode you were given"
                        : "the invite code is unknown, used up, expired or revoked")
            }
        }
        let user = UserAccount(
            id: newIdentifier(), createdAt: now, email: email, emailVerified: verified.emailVerified, givenName: givenName, familyName: familyName)
        let identity = LinkedIdentity(
            id: newIdentifier(), userID: user.id, provider: provider, subject: verified.subject, email: email, emailVerified: verified.emailVerified,
            isPrivateEmail: verified.isPrivateEmail, realUserStatus: verified.realUserStatus?.rawValue, transferSubject: verified.transferSubject,
            givenName: givenName, familyName: familyName, claims: Self.claims(of: verified), firstSeenAt: now, lastSignInAt: now
        )
        let created = AuditEvent(at: now, userID: user.id, kind: "user_created", detail: "provider=\(provider)")
        let (written, session) = try record(.create(user, identity), user: user, identity: identity, audits: [created])
        do {
            try await store.recordSignIn(written)
        } catch AuthStoreError.duplicate {
            // A concurrent first sign-in of the same person won; use its user.
            guard let winner = try await store.account(provider: provider, subject: verified.subject) else { throw AuthStoreError.notFound }
            return try await signInExisting(winner)
        }
        return (ResolvedAccount(user: user, identity: identity, identities: [identity], isNewUser: true), session)
    }

    /// The claims worth keeping on an identity beyond the columns every provider fills.
    static func claims(of verified: VerifiedIdentity) -> [String: String] {
        var claims = ["iss": verified.issuer]
        claims["tid"] = verified.tenantID
        claims["hd"] = verified.hostedDomain
        claims["azp"] = verified.authorizedParty
        return claims
    }

    // MARK: - Invites

    /// Makes an invite code that lets `maxUses` new users sign up until `expiresAt`. The code is shown once;
    /// only its hash is stored.
    public func createInvite(maxUses: Int = 1, expiresAt: Date? = nil, note: String? = nil) async throws -> (invite: Invite, code: String) {
        let code = "inv_" + lowercaseHex(systemRandomBytes(16))
        let invite = Invite(
            id: newIdentifier(), codeHash: sha256Hex(code), createdAt: timeSource.now, expiresAt: expiresAt, maxUses: max(1, maxUses), note: note)
        try await store.createInvite(invite)
        return (invite, code)
    }

    // MARK: - Linking

    /// Links the verified provider account to a signed-in user. Linking the same account again refreshes it;
    /// an account linked to another user is refused (`identity_in_use`). Never matches by e-mail.
    public func link(identity verified: VerifiedIdentity, provider: String, userID: String, providerRefreshToken: String? = nil) async throws
        -> [LinkedIdentity]
    {
        let now = timeSource.now
        if var existing = try await store.identity(provider: provider, subject: verified.subject) {
            guard existing.userID == userID else {
                throw LatchkeyError(
                    .identityInUse, "this \(provider) account is already linked to another user; sign in with it and delete that account first")
            }
            existing.claims.merge(Self.claims(of: verified)) { $1 }
            existing.lastSignInAt = now
            try await store.updateIdentity(existing)
            try await grants.save(providerRefreshToken, identity: existing, clientID: verified.audience)
        } else {
            let identity = LinkedIdentity(
                id: newIdentifier(), userID: userID, provider: provider, subject: verified.subject, email: verified.email.flatMap { $0.isEmpty ? nil : $0 },
                emailVerified: verified.emailVerified, isPrivateEmail: verified.isPrivateEmail, realUserStatus: verified.realUserStatus?.rawValue,
                transferSubject: verified.transferSubject, givenName: verified.givenName, familyName: verified.familyName,
                claims: Self.claims(of: verified), firstSeenAt: now, lastSignInAt: now
            )
            do {
                try await store.addIdentity(identity)
            } catch AuthStoreError.duplicate {
                throw LatchkeyError(.identityInUse, "this \(provider) account was just linked to another user")
            }
            try await grants.save(providerRefreshToken, identity: identity, clientID: verified.audience)
            try await store.audit(at: timeSource.now, userID, "identity_linked", "provider=\(provider)")
        }
        return try await store.identities(userID: userID)
    }

    /// Unlinks one of the user's identities, never the last: its sessions end and its provider grant is revoked
    /// (through the outbox when the provider cannot be reached).
    public func unlink(userID: String, provider: String, subject: String) async throws -> [LinkedIdentity] {
        let identities = try await store.identities(userID: userID)
        guard let identity = identities.first(where: { $0.provider == provider && $0.subject == subject }) else {
            throw LatchkeyError(.notFound, "no \(provider) identity with this subject is linked to this account")
        }
        guard identities.count > 1 else {
            throw LatchkeyError(.lastIdentity, "this is the account's only identity; link another one first, or delete the account")
        }
        _ = try await grants.revoke(of: identity)
        let now = timeSource.now
        try await store.revokeSessions(identityID: identity.id, reason: "identity_unlinked", at: now)
        try await store.deleteIdentity(id: identity.id)
        try await store.audit(at: timeSource.now, userID, "identity_unlinked", "provider=\(provider)")
        return identities.filter { $0.id != identity.id }
    }

    /// Claims a verified identity token for one sign-in: the first claim succeeds, any later one (from this
    /// or any other instance sharing the store) throws `token_already_used` until the token has expired.
    /// Call ``releaseSignIn(_:provider:identity:)`` when the sign-in then fails before its session starts.
    public func claimSignIn(_ token: String, provider: String, identity: VerifiedIdentity) async throws {
        // Kept past `exp` by more than any verifier's leeway, so the token cannot be accepted again after its record is swept.
        let keepUntil = identity.expiresAt.addingTimeInterval(Self.signInRecordMargin)
        guard try await store.recordSignInToken(provider: provider, subject: identity.subject, tokenHash: Self.signInKey(token), expiresAt: keepUntil) else {
            throw LatchkeyError(
                .tokenAlreadyUsed,
                "this identity token already started a session; sign-ins are single use — sign in again to get a fresh token"
            )
        }
    }

    /// Undoes ``claimSignIn(_:provider:identity:)`` after a failure, so the app may retry with the same token.
    public func releaseSignIn(_ token: String, provider: String, identity: VerifiedIdentity) async {
        try? await store.deleteSignInToken(provider: provider, subject: identity.subject, tokenHash: Self.signInKey(token))
    }

    /// A sign-in is keyed by what the signature covers (`header.payload`), not by the whole string: some
    /// signature schemes (ECDSA) admit a second valid signature for the same claims.
    static func signInKey(_ token: String) -> String {
        let bytes = Array(token.utf8)
        let signed = bytes.lastIndex(of: UInt8(ascii: ".")).map { bytes[..<$0] } ?? bytes[...]
        return lowercaseHex(SHA256.hash(data: signed))
    }

    /// How long past its `exp` a used identity token is remembered.
    static let signInRecordMargin: TimeInterval = 600

}
