import Crypto
import Foundation
public import LatchkeyJOSE
import Tracing

/// Sign-ins: finds or creates the user for a verified provider identity and starts a session; links and
/// unlinks identities; single-use identity tokens; invite-only sign-up.
public struct SignInService: Sendable {
    public let store: any SignInStore & UserStore & ReplayStore & TransactionalStore
    public let grants: ProviderGrants
    public let issuer: SessionIssuer
    public let policy: SessionPolicy
    public let timeSource: TimeSource
    /// Apple sign-ins during and after an app transfer (nil: none is followed).
    public let transfers: AppleTransfers?

    public init(
        store: any SignInStore & UserStore & ReplayStore & TransactionalStore, grants: ProviderGrants, issuer: SessionIssuer,
        policy: SessionPolicy, timeSource: TimeSource, transfers: AppleTransfers? = nil
    ) {
        self.transfers = transfers
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
    /// With `claiming`, the identity token is claimed in the same store step (see ``claimSignIn(_:provider:identity:)``):
    /// a token that started a session before throws `token_already_used`, and a failure releases the claim. `spending`
    /// is such a claim made by the caller (a passkey challenge's), recorded the same way.
    /// `identityClaims` are written on the identity with the sign-in; `accounts` limits where it may land (an account it
    /// rules out is `invalid_credential`).
    public func signIn(
        identity verified: VerifiedIdentity, provider: String, givenName: String? = nil, familyName: String? = nil,
        providerRefreshToken: String? = nil, userAgent: String? = nil, inviteCode: String? = nil, claiming token: String? = nil,
        spending claim: SignInTokenClaim? = nil, identityClaims: [String: String] = [:], accounts: SignInPlan.Accounts = .existingOrNew
    ) async throws -> SignInOutcome {
        let plan = try makePlan(
            identity: verified, provider: provider, givenName: givenName, familyName: familyName, providerRefreshToken: providerRefreshToken,
            startsSession: true, userAgent: userAgent, inviteCode: inviteCode, claiming: token, spending: claim, identityClaims: identityClaims,
            accounts: accounts)
        let resolved = try await withSpan("sign-in store transaction") { span in
            span.attributes["latchkey.provider"] = provider
            return try await resolve(plan)
        }
        // A plan that starts a session resolves to one.
        guard let session = resolved.session else { throw AuthStoreError.notFound }
        return SignInOutcome(
            tokens: try issuer.issue(session), user: resolved.account.user, identities: resolved.account.identities, isNewUser: resolved.account.isNewUser)
    }

    /// Finds or creates the user of a verified sign-in exactly as ``signIn(identity:provider:givenName:familyName:providerRefreshToken:userAgent:inviteCode:claiming:spending:identityClaims:accounts:)``
    /// does (sign-up policy and claim included), without starting a session: the browser flow starts it when the app redeems its code.
    public func resolveAccount(
        identity verified: VerifiedIdentity, provider: String, givenName: String? = nil, familyName: String? = nil,
        providerRefreshToken: String? = nil, inviteCode: String? = nil, claiming token: String? = nil, spending claim: SignInTokenClaim? = nil,
        identityClaims: [String: String] = [:], accounts: SignInPlan.Accounts = .existingOrNew
    ) async throws -> ResolvedAccount {
        let plan = try makePlan(
            identity: verified, provider: provider, givenName: givenName, familyName: familyName, providerRefreshToken: providerRefreshToken,
            startsSession: false, userAgent: nil, inviteCode: inviteCode, claiming: token, spending: claim, identityClaims: identityClaims,
            accounts: accounts)
        return try await resolve(plan).account
    }

    /// Draws everything random a sign-in needs, so the store can write it in the step that finds the account.
    func makePlan(
        identity verified: VerifiedIdentity, provider: String, givenName: String?, familyName: String?, providerRefreshToken: String?,
        startsSession: Bool, userAgent: String?, inviteCode: String?, claiming token: String?, spending claim: SignInTokenClaim? = nil,
        identityClaims: [String: String] = [:],
        accounts: SignInPlan.Accounts = .existingOrNew
    ) throws -> SignInPlan {
        let now = timeSource.now
        return SignInPlan(
            provider: provider, subject: verified.subject, claim: claim ?? token.map { signInClaim($0, provider: provider, identity: verified) },
            requiresInvite: policy.requireInvite, inviteCodeHash: inviteCode.flatMap { $0.isEmpty ? nil : sha256Hex($0) }, verified: verified, now: now,
            email: verified.email.flatMap { $0.isEmpty ? nil : $0 },
            givenName: givenName.flatMap { $0.isEmpty ? nil : $0 } ?? verified.givenName,
            familyName: familyName.flatMap { $0.isEmpty ? nil : $0 } ?? verified.familyName, newUserID: newIdentifier(), newIdentityID: newIdentifier(),
            identityClaims: identityClaims, accounts: accounts,
            // Its user and identity are filled in by the plan once the account is known.
            session: startsSession
                ? issuer.prepareSession(userID: "", identityID: nil, clientID: verified.audience, userAgent: userAgent, idp: provider, at: now) : nil,
            sealedGrant: try providerRefreshToken.map { try grants.box.seal($0) }, auditIDs: (newIdentifier(), newIdentifier()),
            webhooks: policy.webhooks, eventIDs: (LifecycleEvent.newID(), LifecycleEvent.newID()))
    }

    /// Runs a plan: in one store step when it can (the common case); otherwise follows a concurrent first sign-in that
    /// linked the identity first. A failure after the claim releases it.
    private func resolve(_ plan: SignInPlan) async throws -> SignInPlan.Resolution {
        var result = try await step(plan)
        if result == .tokenUsed { throw Self.tokenAlreadyUsed }
        var plan = plan
        let claim = plan.claim
        plan.claim = nil
        do {
            // Each further step finds the identity that a concurrent first sign-in linked.
            for _ in 0..<3 {
                switch result {
                case .recorded(let found): if let resolved = plan.resolution(for: found) { return resolved }
                case .declined where plan.accounts == .existingOnly:
                    throw LatchkeyError(.invalidCredential, "no account holds this \(plan.provider) credential any more")
                case .declined where plan.accounts == .newOnly && !plan.requiresInvite:
                    throw LatchkeyError(.invalidCredential, "this \(plan.provider) credential is registered already")
                case .declined:
                    throw LatchkeyError(
                        .signupClosed,
                        plan.inviteCodeHash == nil
                            ? "sign-up needs an invitation on this server: send the inviteCode you were given"
                            : "the invite code is unknown, used up, expired or revoked")
                case .accountDisabled:
                    throw LatchkeyError(.accountDisabled, "this account is disabled; ask the app's support")
                case .duplicate, .tokenUsed: break
                }
                result = try await step(plan)
            }
            if case .recorded(let found) = result, let resolved = plan.resolution(for: found) { return resolved }
            throw AuthStoreError.unavailable("the sign-in kept meeting concurrent changes to its account; try again")
        } catch {
            if let claim { await release(claim) }
            throw error
        }
    }

    /// One store step. On PostgreSQL a first sign-in of the same identity in another transaction can link it between this
    /// one's look-up and its insert: the transaction then rolls back whole (its claim and invite too) with `.duplicate`,
    /// and the same plan, tried again, finds the account.
    private func step(_ plan: SignInPlan) async throws -> SignInStepResult {
        for _ in 0..<2 {
            do { return try await store.signIn(plan) } catch AuthStoreError.duplicate { continue }
        }
        return try await store.signIn(plan)
    }

    /// The claims worth keeping on an identity beyond the columns every provider fills.
    static func claims(of verified: VerifiedIdentity) -> [String: String] {
        verified.claims.merging(["iss": verified.issuer]) { $1 }
    }

    // MARK: - Invites

    // MARK: - Linking

    /// Links the verified provider account to a signed-in user. Linking the same account again refreshes it;
    /// an account linked to another user is refused (`identity_in_use`). Never matches by e-mail.
    /// A guest's first identity is their sign-up: while `signup.mode` is `invite`, it needs `inviteCode`, whose use
    /// it spends in the link's transaction.
    public func link(
        identity verified: VerifiedIdentity, provider: String, userID: String, providerRefreshToken: String? = nil, inviteCode: String? = nil
    ) async throws -> [LinkedIdentity] {
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
                emailVerified: verified.emailVerified, givenName: verified.givenName, familyName: verified.familyName,
                claims: Self.claims(of: verified), firstSeenAt: now, lastSignInAt: now
            )
            // The identity, its grant, its audit event and its deliveries in one transaction; a guest's first identity
            // upgrades them in place (same id, no longer anonymous).
            let grant = try grants.grant(providerRefreshToken, identity: identity, clientID: verified.audience)
            let linked = policy.webhooks.deliveries(.identity(.identityLinked, identity, at: now))
            let guest = try await store.user(id: userID)?.isAnonymous == true
            let upgraded = guest ? policy.webhooks.deliveries(.userUpgraded(userID, provider: provider, at: now)) : []
            let invite = try Self.upgradeInvite(guest: guest, requireInvite: policy.requireInvite, code: inviteCode)
            do {
                try await store.write { tx in
                    try await tx.addIdentity(identity)
                    if let grant { try await tx.saveProviderGrant(grant) }
                    try await tx.enqueue(linked)
                    try await tx.audit(at: now, userID, "identity_linked", "provider=\(provider)")
                    if guest { try await tx.upgradeGuest(userID: userID, provider: provider, at: now, deliveries: upgraded, inviteHash: invite) }
                }
            } catch AuthStoreError.duplicate {
                throw LatchkeyError(.identityInUse, "this \(provider) account was just linked to another user")
            }
        }
        return try await store.identities(userID: userID)
    }

    /// The hash of the invite a guest's upgrade spends: nil when none is needed; `signup_closed` when one is needed and
    /// none was sent.
    static func upgradeInvite(guest: Bool, requireInvite: Bool, code: String?) throws -> String? {
        guard guest, requireInvite else { return nil }
        guard let code, !code.isEmpty else {
            throw LatchkeyError(.signupClosed, "sign-up needs an invitation on this server: a guest's first identity carries the inviteCode you were given")
        }
        return sha256Hex(code)
    }

    /// Unlinks one of the user's identities, never the last: its sessions end and its provider grant is revoked
    /// (through the outbox when the provider cannot be reached).
    /// The decision and the delete are one store step; the provider hears of it after.
    public func unlink(userID: String, provider: String, subject: String) async throws -> [LinkedIdentity] {
        let notLinked = LatchkeyError(.notFound, "no \(provider) identity with this subject is linked to this account")
        guard let identity = try await store.identities(userID: userID).first(where: { $0.provider == provider && $0.subject == subject }) else {
            throw notLinked
        }
        let now = timeSource.now
        let notices = policy.webhooks.deliveries(.identity(.identityUnlinked, identity, at: now, reason: "user_request"))
        // The unlink, its audit event and its deliveries in one transaction; the provider hears of it after.
        let unlink = try await store.write { tx in
            let unlink = try await tx.unlinkIdentity(id: identity.id, userID: userID, reason: "identity_unlinked", at: now)
            if case .unlinked = unlink {
                try await tx.enqueue(notices)
                try await tx.audit(at: now, userID, "identity_unlinked", "provider=\(provider)")
            }
            return unlink
        }
        switch unlink {
        case .notFound:
            throw notLinked
        case .lastIdentity:
            throw LatchkeyError(.lastIdentity, "this is the account's only identity; link another one first, or delete the account")
        case .unlinked(let grant):
            if let grant { _ = try await grants.revoke(grant) }
        }
        return try await store.identities(userID: userID)
    }

    /// Claims a verified identity token for one sign-in: the first claim succeeds, any later one (from this
    /// or any other instance sharing the store) throws `token_already_used` until the token has expired.
    /// Call ``releaseSignIn(_:provider:identity:)`` when the sign-in then fails before its session starts.
    public func claimSignIn(_ token: String, provider: String, identity: VerifiedIdentity) async throws {
        let claim = signInClaim(token, provider: provider, identity: identity)
        guard try await store.recordSignInToken(provider: claim.provider, subject: claim.subject, tokenHash: claim.tokenHash, expiresAt: claim.expiresAt)
        else { throw Self.tokenAlreadyUsed }
    }

    static let tokenAlreadyUsed = LatchkeyError(
        .tokenAlreadyUsed, "this identity token already started a session; sign-ins are single use — sign in again to get a fresh token")

    /// The record of `token`'s use, kept past its `exp` by more than any verifier's leeway, so the token cannot be
    /// accepted again after its record is swept.
    private func signInClaim(_ token: String, provider: String, identity: VerifiedIdentity) -> SignInTokenClaim {
        SignInTokenClaim(
            provider: provider, subject: identity.subject, tokenHash: Self.signInKey(token),
            expiresAt: identity.expiresAt.addingTimeInterval(Self.signInRecordMargin))
    }

    /// Undoes ``claimSignIn(_:provider:identity:)`` after a failure, so the app may retry with the same token.
    public func releaseSignIn(_ token: String, provider: String, identity: VerifiedIdentity) async {
        await release(signInClaim(token, provider: provider, identity: identity))
    }

    private func release(_ claim: SignInTokenClaim) async {
        try? await store.deleteSignInToken(provider: claim.provider, subject: claim.subject, tokenHash: claim.tokenHash, expiresAt: claim.expiresAt)
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
