public import Foundation
import LatchkeyJOSE

/// An identity token claimed for one sign-in, remembered until `expiresAt` (see ``ReplayStore``).
public struct SignInTokenClaim: Sendable, Hashable {
    public var provider: String
    public var subject: String
    /// SHA-256 (hex) of the token's signed part.
    public var tokenHash: String
    public var expiresAt: Date

    public init(provider: String, subject: String, tokenHash: String, expiresAt: Date) {
        self.provider = provider
        self.subject = subject
        self.tokenHash = tokenHash
        self.expiresAt = expiresAt
    }
}

/// A sign-in decided up to its account, which the store finds in the same transaction (``SignInStore/signIn(_:)``):
/// the store makes ``claim``, looks up the identity of ``provider`` and ``subject``, and writes ``record(for:)`` of
/// what it found. Everything random (identifiers, the refresh token) is drawn when the plan is made, so one account
/// always gives the same record, and the caller learns what was written from the account alone.
public struct SignInPlan: Sendable {
    /// Which accounts a sign-in may land in: a provider sign-in finds its account or creates one; a passkey signs in
    /// only to the account that registered it, and a passkey sign-up only creates.
    public enum Accounts: Sendable {
        case existingOrNew
        case existingOnly
        case newOnly
    }

    public let provider: String
    public let subject: String
    /// The identity token to claim in the same transaction; nil when it was claimed before, or there is none.
    public internal(set) var claim: SignInTokenClaim?
    /// Sign-up needs an invite: a new user is created only with ``inviteCodeHash``, whose use the store spends in the
    /// step that creates them (see ``inviteRedemption(for:)``).
    let requiresInvite: Bool
    /// The SHA-256 (hex) of the invite code the sign-in sent, if any.
    let inviteCodeHash: String?

    let verified: VerifiedIdentity
    let now: Date
    let email: String?
    let givenName: String?
    let familyName: String?
    let newUserID: String
    let newIdentityID: String
    /// Merged into the identity's claims (after those of ``verified``): what the credential itself records.
    let identityClaims: [String: String]
    let accounts: Accounts
    /// The session to start, its user and identity filled in once known.
    let session: PreparedSession?
    let sealedGrant: String?
    let auditIDs: (created: String, signedIn: String)
    let webhooks: WebhookEndpoints
    /// The webhook-ids of the events this sign-in may cause, drawn with the plan like its other identifiers.
    let eventIDs: (created: String, emailChanged: String)

    /// What the plan writes for an account, and what the caller answers with.
    struct Resolution {
        let record: SignInRecord
        let account: SignInService.ResolvedAccount
        let session: PreparedSession?
    }

    /// What this sign-in writes when `found` is its account (nil: the identity is not linked yet); nil when it writes
    /// nothing there: a new user while sign-up needs an invite, or an account that ``accounts`` rules out.
    public func record(for found: StoredAccount?) -> SignInRecord? { resolution(for: found)?.record }

    /// ``record(for:)``, with the account of each of the user's identities as the record leaves them: what a later
    /// sign-in of the same user, handled in the same step, finds.
    public func step(for found: StoredAccount?) -> (record: SignInRecord, leaves: [StoredAccount])? {
        guard let resolved = resolution(for: found) else { return nil }
        let account = resolved.account
        return (resolved.record, account.identities.map { StoredAccount(identity: $0, user: account.user, identities: account.identities) })
    }

    /// The invite whose use `record` spends, to be redeemed in the same transaction as the record is written: a new
    /// user's, while sign-up needs an invite. A store that cannot redeem it writes neither (``SignInStepResult/declined``),
    /// and a sign-up sent twice at once spends one use, by the one that creates the user.
    public func inviteRedemption(for record: SignInRecord) -> (codeHash: String, at: Date)? {
        guard requiresInvite, case .create = record.account, let inviteCodeHash else { return nil }
        return (inviteCodeHash, now)
    }

    func resolution(for found: StoredAccount?) -> Resolution? {
        if let found { return accounts == .newOnly ? nil : existing(found) }
        guard accounts != .existingOnly, !requiresInvite || inviteCodeHash != nil else { return nil }
        let user = UserAccount(
            id: newUserID, createdAt: now, email: email, emailVerified: verified.emailVerified, givenName: givenName, familyName: familyName)
        let identity = LinkedIdentity(
            id: newIdentityID, userID: user.id, provider: provider, subject: subject, email: email, emailVerified: verified.emailVerified,
            givenName: givenName, familyName: familyName, claims: SignInService.claims(of: verified).merging(identityClaims) { $1 }, firstSeenAt: now,
            lastSignInAt: now
        )
        let created = AuditEvent(id: auditIDs.created, at: now, userID: user.id, kind: "user_created", detail: "provider=\(provider)")
        return resolution(
            .create(user, identity), user: user, identity: identity, identities: [identity], isNewUser: true, audits: [created],
            events: [.userCreated(user.id, provider: provider, at: now, id: eventIDs.created)])
    }

    /// A known identity: fills gaps in the user's profile, refreshes the identity's and records the sign-in.
    /// Names from the first sign-in are kept and gaps filled, never blanked. An e-mail fills a gap too, and a new
    /// e-mail the provider says is verified replaces the identity's (and the user's, when it was that identity's).
    private func existing(_ found: StoredAccount) -> Resolution {
        let known = found.user
        var user = known
        user.email = known.email ?? email
        user.emailVerified = known.email == nil ? verified.emailVerified : known.emailVerified
        user.givenName = known.givenName ?? givenName
        user.familyName = known.familyName ?? familyName
        var identity = found.identity
        if let email, verified.emailVerified == true, let previous = identity.email, previous != email {
            identity.email = email
            if known.email == previous { (user.email, user.emailVerified) = (email, true) }
        }
        identity.email = identity.email ?? email
        identity.emailVerified = verified.emailVerified ?? identity.emailVerified
        identity.givenName = identity.givenName ?? givenName
        identity.familyName = identity.familyName ?? familyName
        identity.claims.merge(SignInService.claims(of: verified)) { $1 }
        identity.claims.merge(identityClaims) { $1 }
        identity.lastSignInAt = now
        let identities = found.identities.map { $0.id == identity.id ? identity : $0 }
        let emailChanged =
            user.email != known.email
            ? [LifecycleEvent.emailChanged(user.id, provider: provider, email: user.email, verified: user.emailVerified, at: now, id: eventIDs.emailChanged)]
            : []
        return resolution(
            .update(user: user != known ? user : nil, identity: identity), user: user, identity: identity, identities: identities, isNewUser: false,
            audits: [], events: emailChanged)
    }

    private func resolution(
        _ account: SignInRecord.Account, user: UserAccount, identity: LinkedIdentity, identities: [LinkedIdentity], isNewUser: Bool,
        audits: [AuditEvent], events: [LifecycleEvent]
    ) -> Resolution {
        var audits = audits
        var session = session
        if var started = session {
            started.start.family.userID = user.id
            started.start.family.identityID = identity.id
            // For its first access token; the store keeps the user's claims with the user, not the session.
            started.start.family.userClaims = user.claims
            session = started
            audits.append(
                AuditEvent(
                    id: auditIDs.signedIn, at: now, userID: user.id, kind: "signed_in", detail: "provider=\(provider) session=\(started.start.family.id)"))
        }
        let grant = sealedGrant.map {
            ProviderGrant(
                identityID: identity.id, provider: provider, clientID: verified.audience, sealedRefreshToken: $0, lastValidatedAt: now, createdAt: now)
        }
        return Resolution(
            record: SignInRecord(account: account, grant: grant, session: session?.start, audits: audits, notices: webhooks.deliveries(events)),
            account: SignInService.ResolvedAccount(user: user, identity: identity, identities: identities, isNewUser: isNewUser), session: session)
    }
}

/// What ``SignInStore/signIn(_:)`` did with a plan.
public enum SignInStepResult: Sendable, Equatable {
    /// The plan's identity token was claimed before: nothing was written.
    case tokenUsed
    /// The plan's record for this account (nil: none was linked) was written, with the claim.
    case recorded(StoredAccount?)
    /// The plan makes no record for this account (a new user who needs an invite and sent none, or one that cannot be
    /// redeemed): only the claim was written.
    case declined
    /// The plan created an identity that another sign-in linked first: only the claim was written.
    case duplicate
    /// The account is disabled: only the claim was written.
    case accountDisabled
}
