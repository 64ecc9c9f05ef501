import Crypto
public import Foundation
public import Logging
import Synchronization

/// How a provider is asked about a user's authorization (the refresh token it issued). Each identity
/// provider the server is configured with adapts its REST client to this.
public protocol ProviderAuthorizationLink: Sendable {
    /// The provider's name for people, such as `Apple`, used in error descriptions.
    var displayName: String { get }
    /// Asks the provider whether `refreshToken` is still good.
    func validate(refreshToken: String, clientID: String) async -> ProviderValidation
    /// Revokes `refreshToken` at the provider.
    func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError)
}

public enum ProviderValidation: Sendable, Equatable {
    case valid
    /// The provider refused the token: the user revoked the authorization.
    case revoked
    /// No answer; the reason is safe to log.
    case unreachable(String)
}

/// What happened to a user at the provider, from a verified server-to-server notification.
public struct ProviderAccountEvent: Sendable, Equatable {
    public enum Kind: String, Sendable { case consentRevoked, accountDeleted, emailDisabled, emailEnabled, other }
    public var id: String
    public var provider: String
    public var kind: Kind
    public var subject: String

    public init(id: String, provider: String, kind: Kind, subject: String) {
        self.id = id
        self.provider = provider
        self.kind = kind
        self.subject = subject
    }
}

/// Lifetimes and windows of Latchkey sessions.
public struct SessionPolicy: Sendable {
    /// A refresh token unused this long dies.
    public var refreshIdleLifetime: TimeInterval = 30 * 86_400
    /// No session outlives this, however active.
    public var refreshAbsoluteLifetime: TimeInterval = 180 * 86_400
    /// A retry of the same refresh within this window gets the same successor instead of killing the family.
    public var reuseGraceWindow: TimeInterval = 10
    /// How often a provider grant is validated (Apple allows about once a day).
    public var providerValidationInterval: TimeInterval = 86_400
    /// While the provider cannot be reached, sessions keep refreshing this long after the last good validation.
    public var providerUnreachableGrace: TimeInterval = 72 * 3600
    /// When a provider deletes or disconnects the last identity a user has, delete the user too.
    public var deleteUserWithLastIdentity = true
    /// New users need a valid invite code (`signup.mode` = `invite`); existing users always sign in.
    public var requireInvite = false

    public init() {}
}

/// Issued tokens.
public struct IssuedTokens: Sendable, Equatable {
    public var accessToken: String
    public var expiresIn: Int
    public var refreshToken: String
    public var sessionID: String
}

/// Latchkey sessions: sign-in bookkeeping, refresh rotation with reuse detection, the provider link,
/// logout, account deletion and provider notifications. Knows nothing of HTTP.
public struct SessionService: Sendable {
    public let store: any AuthStore
    public let accessTokens: AccessTokenService
    public let refreshTokens: RefreshTokens
    public let box: SecretBox
    /// Each provider's link, by provider name (`apple`, `google`, …).
    public let providerLinks: [String: any ProviderAuthorizationLink]
    public let policy: SessionPolicy
    public let timeSource: TimeSource
    private let validations = ValidationFlights()
    private let logger: Logger?

    public init(
        store: any AuthStore, accessTokens: AccessTokenService, box: SecretBox, providerLinks: [String: any ProviderAuthorizationLink] = [:],
        policy: SessionPolicy = .init(), timeSource: TimeSource = .system, logger: Logger? = nil
    ) {
        self.store = store
        self.accessTokens = accessTokens
        self.refreshTokens = RefreshTokens(rotationKey: box.derivedKey(purpose: "latchkey refresh rotation v1"))
        self.box = box
        self.providerLinks = providerLinks
        self.policy = policy
        self.timeSource = timeSource
        self.logger = logger
    }

    // MARK: - Sign-in

    public struct SignInOutcome: Sendable {
        public var tokens: IssuedTokens
        public var user: UserAccount
        public var identities: [LinkedIdentity]
        public var isNewUser: Bool
    }

    /// Records a verified sign-in and starts a session. Users are found by provider and subject only.
    /// E-mail and name from the first sign-in are kept; later sign-ins fill gaps but never blank them.
    public func signIn(
        identity verified: VerifiedIdentity, provider: String, givenName: String? = nil, familyName: String? = nil,
        providerRefreshToken: String? = nil, userAgent: String? = nil, inviteCode: String? = nil
    ) async throws -> SignInOutcome {
        let now = timeSource.now
        let givenName = givenName.flatMap { $0.isEmpty ? nil : $0 } ?? verified.givenName
        let familyName = familyName.flatMap { $0.isEmpty ? nil : $0 } ?? verified.familyName
        let email = verified.email.flatMap { $0.isEmpty ? nil : $0 }
        var isNewUser = false
        var identity: LinkedIdentity
        var user: UserAccount
        if let existing = try await store.identity(provider: provider, subject: verified.subject) {
            identity = existing
            guard let found = try await store.user(id: existing.userID) else { throw AuthStoreError.notFound }
            user = found
        } else {
            if policy.requireInvite {
                guard let inviteCode, !inviteCode.isEmpty, try await store.redeemInvite(codeHash: sha256Hex(inviteCode), at: now) else {
                    throw LatchkeyError(
                        .signupClosed,
                        inviteCode == nil
                            ? "sign-up needs an invitation on this server: send the inviteCode you were given"
                            : "the invite code is unknown, used up, expired or revoked")
                }
            }
            user = UserAccount(
                id: newIdentifier(), createdAt: now, email: email, emailVerified: verified.emailVerified, givenName: givenName, familyName: familyName)
            identity = LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: provider, subject: verified.subject, email: email, emailVerified: verified.emailVerified,
                isPrivateEmail: verified.isPrivateEmail, realUserStatus: verified.realUserStatus?.rawValue, transferSubject: verified.transferSubject,
                givenName: givenName, familyName: familyName, claims: Self.claims(of: verified), firstSeenAt: now, lastSignInAt: now
            )
            do {
                try await store.createUser(user, identity: identity)
                isNewUser = true
                try await audit(user.id, "user_created", "provider=\(provider)")
            } catch AuthStoreError.duplicate {
                // A concurrent first sign-in of the same person won; use its user.
                guard let winner = try await store.identity(provider: provider, subject: verified.subject), let found = try await store.user(id: winner.userID)
                else { throw AuthStoreError.notFound }
                identity = winner
                user = found
            }
        }
        if !isNewUser {
            var changedUser = user
            changedUser.email = user.email ?? email
            changedUser.emailVerified = user.email == nil ? verified.emailVerified : user.emailVerified
            changedUser.givenName = user.givenName ?? givenName
            changedUser.familyName = user.familyName ?? familyName
            if changedUser != user {
                try await store.updateUser(changedUser)
                user = changedUser
            }
            identity.email = identity.email ?? email
            identity.emailVerified = verified.emailVerified ?? identity.emailVerified
            identity.isPrivateEmail = verified.isPrivateEmail ?? identity.isPrivateEmail
            identity.realUserStatus = verified.realUserStatus?.rawValue ?? identity.realUserStatus
            identity.transferSubject = verified.transferSubject ?? identity.transferSubject
            identity.givenName = identity.givenName ?? givenName
            identity.familyName = identity.familyName ?? familyName
            identity.claims.merge(Self.claims(of: verified)) { $1 }
            identity.lastSignInAt = now
            try await store.updateIdentity(identity)
        }
        try await saveGrant(providerRefreshToken, identity: identity, clientID: verified.audience)
        let identities = try await store.identities(userID: user.id)
        // Nothing after the session starts may fail the sign-in: the caller would release the identity token
        // for a retry while a session made from it exists.
        let tokens = try await startSession(userID: user.id, identityID: identity.id, clientID: verified.audience, userAgent: userAgent)
        do {
            try await audit(user.id, "signed_in", "provider=\(provider) session=\(tokens.sessionID)")
        } catch {
            logger?.warning("could not record the sign-in in the audit log", metadata: ["session": "\(tokens.sessionID)", "error": "\(error)"])
        }
        return SignInOutcome(tokens: tokens, user: user, identities: identities, isNewUser: isNewUser)
    }

    private func saveGrant(_ providerRefreshToken: String?, identity: LinkedIdentity, clientID: String) async throws {
        guard let providerRefreshToken else { return }
        let now = timeSource.now
        try await store.saveProviderGrant(
            ProviderGrant(
                identityID: identity.id, provider: identity.provider, clientID: clientID, sealedRefreshToken: try box.seal(providerRefreshToken),
                lastValidatedAt: now, createdAt: now))
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
        let code = "inv_" + lowercaseHex(SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) })
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
            try await saveGrant(providerRefreshToken, identity: existing, clientID: verified.audience)
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
            try await saveGrant(providerRefreshToken, identity: identity, clientID: verified.audience)
            try await audit(userID, "identity_linked", "provider=\(provider)")
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
        _ = try await revokeGrant(of: identity)
        let now = timeSource.now
        try await store.revokeSessions(identityID: identity.id, reason: "identity_unlinked", at: now)
        try await store.deleteIdentity(id: identity.id)
        try await audit(userID, "identity_unlinked", "provider=\(provider)")
        return identities.filter { $0.id != identity.id }
    }

    /// Revokes the identity's provider grant at its provider, or queues the revocation; true when revoked now.
    private func revokeGrant(of identity: LinkedIdentity) async throws -> Bool? {
        guard let grant = try await store.providerGrant(identityID: identity.id) else { return nil }
        do {
            guard let link = providerLinks[grant.provider] else {
                throw LatchkeyError(.providerUnavailable, "the \(grant.provider) provider is not configured")
            }
            try await link.revoke(refreshToken: try box.open(grant.sealedRefreshToken), clientID: grant.clientID)
            return true
        } catch {
            let now = timeSource.now
            let item = OutboxItem(
                id: newIdentifier(), kind: OutboxItem.revocation, provider: grant.provider, clientID: grant.clientID,
                sealedPayload: grant.sealedRefreshToken, nextAttemptAt: now.addingTimeInterval(30),
                lastError: (error as? LatchkeyError)?.errorCode ?? "error", createdAt: now
            )
            try await store.enqueue(item)
            return false
        }
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

    /// Starts a new session family for a user.
    public func startSession(userID: String, identityID: String?, clientID: String, userAgent: String?) async throws -> IssuedTokens {
        let now = timeSource.now
        let refreshToken = refreshTokens.generate()
        let family = SessionFamily(
            id: newIdentifier(), userID: userID, identityID: identityID, clientID: clientID, createdAt: now, lastUsedAt: now,
            absoluteExpiresAt: now.addingTimeInterval(policy.refreshAbsoluteLifetime), userAgent: userAgent.map { String($0.prefix(256)) }
        )
        let record = RefreshTokenRecord(
            hash: RefreshTokens.hash(refreshToken), familyID: family.id, parentHash: nil, createdAt: now,
            idleExpiresAt: now.addingTimeInterval(policy.refreshIdleLifetime))
        try await store.createSession(family, firstToken: record)
        let access = try accessTokens.issue(userID: userID, sessionID: family.id, clientID: clientID)
        return IssuedTokens(accessToken: access.token, expiresIn: access.expiresIn, refreshToken: refreshToken, sessionID: family.id)
    }

    // MARK: - Refresh

    /// Rotates a refresh token. Reuse outside the grace window revokes the whole family; when the provider grant's
    /// authorization is due for its daily check it is validated first.
    public func refresh(_ refreshToken: String) async throws -> IssuedTokens {
        guard RefreshTokens.isWellFormed(refreshToken) else {
            throw LatchkeyError(.invalidGrant, "the refresh token is malformed")
        }
        let hash = RefreshTokens.hash(refreshToken)
        guard let (_, family) = try await store.refreshToken(hash: hash) else {
            throw LatchkeyError(.invalidGrant, "the refresh token is unknown or expired; sign in again")
        }
        if family.isRevoked { throw revokedError(family) }
        if let identityID = family.identityID { try await checkProviderAuthorization(identityID: identityID, userID: family.userID) }

        let now = timeSource.now
        let successor = refreshTokens.successor(of: refreshToken)
        let successorRecord = RefreshTokenRecord(
            hash: RefreshTokens.hash(successor), familyID: family.id, parentHash: hash, createdAt: now,
            idleExpiresAt: now.addingTimeInterval(policy.refreshIdleLifetime)
        )
        switch try await store.rotate(presentedHash: hash, successor: successorRecord, now: now, graceWindow: policy.reuseGraceWindow) {
        case .rotated(let family), .retried(let family):
            let access = try accessTokens.issue(userID: family.userID, sessionID: family.id, clientID: family.clientID)
            return IssuedTokens(accessToken: access.token, expiresIn: access.expiresIn, refreshToken: successor, sessionID: family.id)
        case .reuseDetected(let family):
            try await audit(family.userID, "refresh_token_reuse", "session=\(family.id); the session was revoked")
            logger?.debug("refresh token reuse detected; session revoked", metadata: ["session": "\(family.id)"])
            throw LatchkeyError(.invalidGrant, "this refresh token was already used; the session has been revoked as a precaution — sign in again")
        case .revoked(let family):
            throw revokedError(family)
        case .expired:
            throw LatchkeyError(.invalidGrant, "the session expired; sign in again")
        case .unknown:
            throw LatchkeyError(.invalidGrant, "the refresh token is unknown or expired; sign in again")
        }
    }

    private func revokedError(_ family: SessionFamily) -> LatchkeyError {
        let reason = family.revocationReason ?? "signed_out"
        if reason.hasSuffix("_authorization_revoked") || reason.hasSuffix("_consent_revoked") {
            let provider = String(reason.prefix { $0 != "_" })
            let name = providerLinks[provider]?.displayName ?? provider
            return LatchkeyError(.invalidGrant, "the \(name) authorization was revoked (the user disconnected this app at \(name)); sign in again")
        }
        switch reason {
        case "refresh_token_reuse":
            return LatchkeyError(.invalidGrant, "the session was revoked after its refresh token was used twice; sign in again")
        default:
            return LatchkeyError(.invalidGrant, "the session was revoked (\(reason)); sign in again")
        }
    }

    /// Validates the stored provider refresh token when the last validation is older than the interval.
    /// After the provider could not be reached, it is asked again at most once per ``ValidationFlights/failureBackoff``.
    func checkProviderAuthorization(identityID: String, userID: String) async throws {
        guard let grant = try await store.providerGrant(identityID: identityID), let providerLink = providerLinks[grant.provider] else { return }
        let name = providerLink.displayName
        let now = timeSource.now
        guard now.timeIntervalSince(grant.lastValidatedAt) >= policy.providerValidationInterval else { return }
        let started = now
        let result: ProviderValidation
        if let failure = validations.recentFailure(identityID, now: now) {
            result = .unreachable(failure)
        } else {
            result = await validations.run(identityID) {
                // Another refresh may have validated while this one waited.
                if let fresh = try? await store.providerGrant(identityID: identityID),
                    now.timeIntervalSince(fresh.lastValidatedAt) < policy.providerValidationInterval
                {
                    return .valid
                }
                guard let token = try? box.open(grant.sealedRefreshToken) else { return .unreachable("the stored token cannot be opened") }
                let result = await providerLink.validate(refreshToken: token, clientID: grant.clientID)
                switch result {
                case .valid:
                    // Only the token that was validated is marked; a grant replaced meanwhile keeps its own state.
                    _ = try? await store.markProviderGrantValidated(identityID: identityID, sealedRefreshToken: grant.sealedRefreshToken, at: timeSource.now)
                case .unreachable(let reason):
                    // Once per identity per backoff: the operator may have to fix credentials or reach the provider.
                    logger?.warning(
                        "\(name) could not validate an authorization; sessions keep working within the grace period",
                        metadata: ["provider": "\(grant.provider)", "reason": "\(reason)"])
                    validations.recordFailure(identityID, reason: reason, at: timeSource.now)
                case .revoked:
                    break
                }
                return result
            }
        }
        switch result {
        case .valid:
            return
        case .revoked:
            // A sign-in that brought a new authorization while the provider was asked keeps its grant and session.
            guard try await store.deleteProviderGrant(identityID: identityID, sealedRefreshToken: grant.sealedRefreshToken) else { return }
            let revoked = try await store.revokeSessions(
                identityID: identityID, createdBefore: started, reason: "\(grant.provider)_authorization_revoked", at: timeSource.now)
            try await audit(userID, "\(grant.provider)_authorization_revoked", "found at daily validation; \(revoked) session(s) revoked")
            throw LatchkeyError(
                .invalidGrant,
                "the \(name) authorization was revoked (\(name) refused the stored refresh token); all sessions of this \(name) account were ended — sign in again"
            )
        case .unreachable(let reason):
            logger?.debug("the provider could not validate the authorization", metadata: ["provider": "\(grant.provider)", "reason": "\(reason)"])
            if now.timeIntervalSince(grant.lastValidatedAt) > policy.providerUnreachableGrace {
                throw LatchkeyError(
                    .temporarilyUnavailable,
                    "\(name) has not confirmed this authorization for more than \(Int(policy.providerUnreachableGrace / 3600)) h and cannot be reached now; try again later"
                )
            }
        }
    }

    // MARK: - Logout, deletion, notifications

    /// Ends one session, or every session of its user.
    public func logout(sessionID: String, userID: String, all: Bool) async throws -> Int {
        let now = timeSource.now
        let count =
            all
            ? try await store.revokeSessions(userID: userID, reason: "signed_out", at: now)
            : (try await store.revokeSession(id: sessionID, reason: "signed_out", at: now) ? 1 : 0)
        try await audit(userID, all ? "signed_out_everywhere" : "signed_out", "sessions=\(count)")
        return count
    }

    /// Ends one session of the user; false when the user has no such session.
    public func revokeSession(id: String, userID: String) async throws -> Bool {
        guard let family = try await store.session(id: id), family.userID == userID else { return false }
        let revoked = try await store.revokeSession(id: id, reason: "revoked_by_user", at: timeSource.now)
        if revoked { try await audit(userID, "session_revoked", "session=\(id)") }
        return true
    }

    public struct DeletionReport: Sendable, Equatable {
        /// Provider tokens revoked at once.
        public var revoked: Int
        /// Provider revocations that failed and wait in the outbox.
        public var queued: Int
    }

    /// Deletes an account as the App Store requires: revoke every provider grant first, then delete everything.
    /// A revocation that fails is kept in the outbox and retried; the deletion happens regardless.
    public func deleteAccount(userID: String) async throws -> DeletionReport {
        var report = DeletionReport(revoked: 0, queued: 0)
        for identity in try await store.identities(userID: userID) {
            switch try await revokeGrant(of: identity) {
            case true?: report.revoked += 1
            case false?: report.queued += 1
            case nil: break
            }
        }
        try await store.deleteUser(id: userID)
        try await audit(userID, "account_deleted", "revoked=\(report.revoked) queued=\(report.queued)")
        return report
    }

    /// After this many failed attempts (about a week with the backoff) an owed revocation is given up.
    static let maximumOutboxAttempts = 40

    /// Retries owed provider calls; returns how many succeeded.
    public func processOutbox(limit: Int = 50) async throws -> Int {
        let now = timeSource.now
        var done = 0
        for var item in try await store.dueOutboxItems(now: now, limit: limit) {
            do {
                guard let link = providerLinks[item.provider] else {
                    throw LatchkeyError(.providerUnavailable, "the \(item.provider) provider is not configured")
                }
                try await link.revoke(refreshToken: try box.open(item.sealedPayload), clientID: item.clientID)
                item.completedAt = timeSource.now
                item.lastError = nil
                item.sealedPayload = ""
                done += 1
            } catch {
                item.attempts += 1
                item.lastError = (error as? LatchkeyError)?.errorCode ?? "error"
                if (error as? LatchkeyError)?.code == .invalidGrant || item.attempts >= Self.maximumOutboxAttempts {
                    // The provider no longer knows the token (nothing left to revoke), or it is hopeless: stop, keep the record.
                    item.completedAt = timeSource.now
                    item.sealedPayload = ""
                } else {
                    item.nextAttemptAt = timeSource.now.addingTimeInterval(min(30 * pow(2, Double(item.attempts)), 6 * 3600))
                }
            }
            try await store.updateOutboxItem(item)
        }
        return done
    }

    public enum NotificationOutcome: Sendable, Equatable { case processed, duplicate, unknownSubject }

    /// Applies a provider's account event once per event id. The effect comes first and the id is recorded
    /// after it, so a failure midway leaves the event unrecorded and the provider's retry applies it.
    public func handle(_ event: ProviderAccountEvent) async throws -> NotificationOutcome {
        let now = timeSource.now
        guard try await !store.hasProcessedNotification(id: event.id) else { return .duplicate }
        var outcome = NotificationOutcome.processed
        if var identity = try await store.identity(provider: event.provider, subject: event.subject) {
            switch event.kind {
            case .consentRevoked, .accountDeleted:
                // The provider account is gone for this app: so is the identity, and the standing of the sessions it began.
                let what = event.kind == .consentRevoked ? "consent_revoked" : "account_deleted"
                let count = try await store.revokeSessions(identityID: identity.id, reason: "\(event.provider)_\(what)", at: now)
                try await store.deleteIdentity(id: identity.id)
                let remaining = try await store.identities(userID: identity.userID)
                if remaining.isEmpty && policy.deleteUserWithLastIdentity {
                    try await store.deleteUser(id: identity.userID)
                    try await audit(identity.userID, "\(event.provider)_\(what)", "\(count) session(s) revoked; the user had no other identity and was deleted")
                } else {
                    try await audit(identity.userID, "\(event.provider)_\(what)", "\(count) session(s) revoked; identity removed")
                }
            case .emailDisabled, .emailEnabled:
                identity.emailForwardingEnabled = event.kind == .emailEnabled
                try await store.updateIdentity(identity)
                try await audit(identity.userID, "\(event.provider)_" + (event.kind == .emailEnabled ? "email_enabled" : "email_disabled"))
            case .other:
                try await audit(identity.userID, "\(event.provider)_notification_ignored")
            }
        } else {
            outcome = .unknownSubject
        }
        // A concurrent replay may have recorded it first; its effect is idempotent, so both answers are fine.
        return try await store.recordNotification(id: event.id, type: event.kind.rawValue, at: now) ? outcome : .duplicate
    }

    private func audit(_ userID: String?, _ kind: String, _ detail: String = "") async throws {
        try await store.audit(AuditEvent(at: timeSource.now, userID: userID, kind: kind, detail: detail))
    }
}

/// One provider validation per identity at a time; concurrent refreshes share its result.
/// After a failure, the provider is not asked again about that identity for ``failureBackoff`` (per process).
final class ValidationFlights: Sendable {
    static let failureBackoff: TimeInterval = 3600
    private let flights = Mutex<[String: Task<ProviderValidation, Never>]>([:])
    private let failures = Mutex<[String: (at: Date, reason: String)]>([:])

    func run(_ key: String, _ work: @escaping @Sendable () async -> ProviderValidation) async -> ProviderValidation {
        let task = flights.withLock { flights in
            if let existing = flights[key] { return existing }
            let task = Task { await work() }
            flights[key] = task
            return task
        }
        let result = await task.value
        flights.withLock { if $0[key] == task { $0[key] = nil } }
        return result
    }

    func recentFailure(_ key: String, now: Date) -> String? {
        failures.withLock { failures in
            guard let failure = failures[key] else { return nil }
            if now.timeIntervalSince(failure.at) < Self.failureBackoff { return failure.reason }
            failures[key] = nil
            return nil
        }
    }

    func recordFailure(_ key: String, reason: String, at: Date) {
        failures.withLock { failures in
            if failures.count > 10_000 { failures = failures.filter { at.timeIntervalSince($0.value.at) < Self.failureBackoff } }
            failures[key] = (at, reason)
        }
    }
}
