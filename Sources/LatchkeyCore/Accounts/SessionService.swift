public import Foundation
public import LatchkeyJOSE
public import LatchkeyModels
public import Logging
import Tracing

/// Lifetimes and windows of Latchkey sessions.
public struct SessionPolicy: Sendable {
    /// A refresh token unused this long dies.
    public var refreshIdleLifetime: TimeInterval = 30 * 86_400
    /// No session outlives this, however active.
    public var refreshAbsoluteLifetime: TimeInterval = 180 * 86_400
    /// A retry of the same refresh within this window gets the same successor instead of killing the family.
    public var reuseGraceWindow: TimeInterval = 10
    /// A client killed after the server rotated but before it saved the successor comes back with the old token:
    /// for this long, while that successor has never been used, it gets the same successor again. A used
    /// successor makes any replay of its parent a reuse (after ``reuseGraceWindow``). 0 turns recovery off.
    public var unusedSuccessorRecovery: TimeInterval = 3600
    /// How often a provider grant is validated (Apple allows about once a day).
    public var providerValidationInterval: TimeInterval = 86_400
    /// While the provider cannot be reached, sessions keep refreshing this long after the last good validation.
    public var providerUnreachableGrace: TimeInterval = 72 * 3600
    /// Within ``providerUnreachableGrace``, a refresh waits this long for a due validation's answer; past it the refresh
    /// goes on, and the answer is applied when it comes (a revoked authorization still ends the sessions).
    public var providerValidationWait: TimeInterval = 3
    /// When a provider deletes or disconnects the last identity a user has, delete the user too.
    public var deleteUserWithLastIdentity = true
    /// New users need a valid invite code (`signup.mode` = `invite`); existing users always sign in.
    public var requireInvite = false
    /// The app's webhook endpoints: each change they hear of is written with the change (see ``WebhookEndpoints``).
    public var webhooks = WebhookEndpoints()
    /// Guests: `POST /v1/auth/anonymous` (off by default).
    public var anonymous = AnonymousPolicy()

    public init() {}
}

/// Issued tokens.
public struct IssuedTokens: Sendable, Equatable {
    public var accessToken: String
    public var expiresIn: Int
    public var refreshToken: String
    public var sessionID: String
    /// The DPoP key the access token is bound to (`cnf.jkt`); nil for a bearer token.
    public var boundKeyThumbprint: String? = nil

    /// `DPoP` for a bound access token, else `Bearer` (RFC 9449 §5): the answers' `token_type`.
    public var tokenType: String { boundKeyThumbprint == nil ? "Bearer" : "DPoP" }
}

/// Starts session families: the first refresh token and its access token.
public struct SessionIssuer: Sendable {
    public let store: any SessionStore
    public let accessTokens: AccessTokenService
    public let refreshTokens: RefreshTokens
    public let policy: SessionPolicy
    public let timeSource: TimeSource

    /// Starts a new session family for a user.
    /// - Parameters:
    ///   - idp: the provider of the sign-in (`idp` in the session's access tokens).
    ///   - userClaims: the user's claims, for its first access token.
    public func startSession(
        userID: String, identityID: String?, clientID: String, userAgent: String?, sessionID: String = newIdentifier(), idp: String? = nil,
        userClaims: [String: JSONValue]? = nil
    ) async throws -> IssuedTokens {
        var prepared = prepareSession(userID: userID, identityID: identityID, clientID: clientID, userAgent: userAgent, sessionID: sessionID, idp: idp)
        try await store.createSession(prepared.start.family, firstToken: prepared.start.firstToken)
        prepared.start.family.userClaims = userClaims
        return try issue(prepared)
    }

    /// A new session family and its first refresh token, not yet stored (a sign-in stores it with its account).
    public func prepareSession(
        userID: String, identityID: String?, clientID: String, userAgent: String?, sessionID: String = newIdentifier(), idp: String? = nil
    ) -> PreparedSession {
        prepareSession(userID: userID, identityID: identityID, clientID: clientID, userAgent: userAgent, sessionID: sessionID, idp: idp, at: timeSource.now)
    }

    func prepareSession(
        userID: String, identityID: String?, clientID: String, userAgent: String?, sessionID: String = newIdentifier(), idp: String? = nil, at now: Date
    ) -> PreparedSession {
        let refreshToken = refreshTokens.generate()
        let binding = SessionBinding.current
        let family = SessionFamily(
            id: sessionID, userID: userID, identityID: identityID, clientID: clientID, createdAt: now, lastUsedAt: now,
            absoluteExpiresAt: now.addingTimeInterval(policy.refreshAbsoluteLifetime), userAgent: userAgent.map { String($0.prefix(256)) }, idp: idp,
            dpopThumbprint: binding.dpopThumbprint, attested: binding.attested
        )
        let record = RefreshTokenRecord(
            hash: RefreshTokens.hash(refreshToken), familyID: family.id, parentHash: nil, createdAt: now,
            idleExpiresAt: now.addingTimeInterval(policy.refreshIdleLifetime))
        return PreparedSession(start: SessionStart(family: family, firstToken: record), refreshToken: refreshToken)
    }

    /// The tokens of a stored session: its refresh token and a new access token.
    public func issue(_ prepared: PreparedSession) throws -> IssuedTokens {
        let family = prepared.start.family
        let access = try accessTokens.issue(for: family)
        return IssuedTokens(
            accessToken: access.token, expiresIn: access.expiresIn, refreshToken: prepared.refreshToken, sessionID: family.id,
            boundKeyThumbprint: family.dpopThumbprint)
    }
}

/// What a new session is bound to, set by the request that starts it around the sign-in (`SessionBinding.$current
/// .withValue(…)`): every way in (a provider, a passkey, an e-mail code, a guest, the browser flow) starts its session
/// through ``SessionIssuer``, which reads it, so no sign-in path can forget the binding.
public struct SessionBinding: Sendable, Equatable {
    /// The RFC 7638 thumbprint of the DPoP key of the sign-in's proof (RFC 9449).
    public var dpopThumbprint: String?
    /// Whether App Attest vouched for the sign-in.
    public var attested: Bool

    public init(dpopThumbprint: String? = nil, attested: Bool = false) {
        self.dpopThumbprint = dpopThumbprint
        self.attested = attested
    }

    /// The binding of the sessions started in this task; none by default (a bearer session).
    @TaskLocal public static var current = SessionBinding()
}

/// A session made by ``SessionIssuer/prepareSession(userID:identityID:clientID:userAgent:sessionID:)``: what to store,
/// and the refresh token only the client gets (the store keeps its hash).
public struct PreparedSession: Sendable {
    public var start: SessionStart
    public var refreshToken: String
}

/// Latchkey sessions, composed of one type per job: ``signIns`` (sign-in, linking, invites), ``grants``
/// (provider tokens, their daily validation, revocation and the outbox), ``deletion`` (account deletion),
/// ``administration`` (what `/admin/v1` and the CLI change) and
/// ``events`` (provider notifications); this type rotates refresh tokens with reuse detection and ends
/// sessions. Knows nothing of HTTP.
public struct SessionService: Sendable {
    public let store: any SessionStore & TransactionalStore
    public let accessTokens: AccessTokenService
    public let refreshTokens: RefreshTokens
    public let policy: SessionPolicy
    public let timeSource: TimeSource
    public let issuer: SessionIssuer
    public let grants: ProviderGrants
    public let signIns: SignInService
    public let deletion: AccountDeletion
    /// The administrative changes of `/admin/v1` and the CLI.
    public let administration: Administration
    public let events: ProviderEvents
    /// App transfers' moves of Apple identities.
    public let transfers: AppleTransfers
    /// Guests: anonymous sign-in, merges, and the sweep of idle guests.
    public let guests: Guests
    private let logger: Logger?

    public init(
        store: any AuthStore, accessTokens: AccessTokenService, box: SecretBox, providerLinks: [String: any ProviderAuthorizationLink] = [:],
        policy: SessionPolicy = .init(), timeSource: TimeSource = .system, logger: Logger? = nil
    ) {
        self.store = store
        self.accessTokens = accessTokens
        self.refreshTokens = RefreshTokens(rotationKey: box.derivedKey(purpose: "latchkey refresh rotation v1"))
        self.policy = policy
        self.timeSource = timeSource
        self.logger = logger
        issuer = SessionIssuer(store: store, accessTokens: accessTokens, refreshTokens: refreshTokens, policy: policy, timeSource: timeSource)
        grants = ProviderGrants(store: store, box: box, links: providerLinks, policy: policy, timeSource: timeSource, logger: logger)
        transfers = AppleTransfers(store: store, webhooks: policy.webhooks, timeSource: timeSource)
        signIns = SignInService(store: store, grants: grants, issuer: issuer, policy: policy, timeSource: timeSource, transfers: transfers)
        deletion = AccountDeletion(store: store, grants: grants, timeSource: timeSource)
        administration = Administration(store: store, deletion: deletion, timeSource: timeSource)
        guests = Guests(store: store, issuer: issuer, policy: policy, timeSource: timeSource)
        events = ProviderEvents(store: store, policy: policy, timeSource: timeSource)
    }

    // MARK: - Refresh

    /// Rotates a refresh token. Reuse outside the grace window revokes the whole family; when the provider grant's
    /// authorization is due for its daily check it is validated first.
    /// - Parameters:
    ///   - clientID: with it, a token of another client's session is refused (the browser flow's token endpoint).
    ///   - confidentialClients: tokens of these clients' sessions are refused: a confidential client refreshes only
    ///     where it authenticates (RFC 6749 §6), so a leaked token is worth nothing without the client's secret.
    /// - Parameter origin: where the request came from, for the webhook event of a detected reuse.
    /// - Parameter proofThumbprint: the key of the request's verified DPoP proof. A session bound to a key refreshes
    ///   only with a proof by that key, and is left untouched otherwise; a bearer session's new access token is bound
    ///   to the proof's key.
    public func refresh(
        _ refreshToken: String, forClient clientID: String? = nil, refusing confidentialClients: Set<String> = [], origin: RequestOrigin = RequestOrigin(),
        proofThumbprint: String? = nil
    ) async throws -> IssuedTokens {
        try await withSpan("refresh token rotation") { span in
            span.attributes["latchkey.dpop_bound"] = proofThumbprint != nil
            return try await rotate(
                refreshToken, forClient: clientID, refusing: confidentialClients, origin: origin, proofThumbprint: proofThumbprint)
        }
    }

    private func rotate(
        _ refreshToken: String, forClient clientID: String?, refusing confidentialClients: Set<String>, origin: RequestOrigin, proofThumbprint: String?
    ) async throws -> IssuedTokens {
        guard RefreshTokens.isWellFormed(refreshToken) else {
            throw LatchkeyError(.invalidGrant, "the refresh token is malformed")
        }
        let hash = RefreshTokens.hash(refreshToken)
        let successor = refreshTokens.successor(of: refreshToken)
        /// The rotation at this moment; the store puts the successor in the presented token's session.
        func rotation(accepting: (@Sendable (SessionFamily) -> Bool)?) async throws -> RotationResult {
            let now = timeSource.now
            let successorRecord = RefreshTokenRecord(
                hash: RefreshTokens.hash(successor), familyID: "", parentHash: hash, createdAt: now,
                idleExpiresAt: now.addingTimeInterval(policy.refreshIdleLifetime))
            // The store hands out the same successor within the window only while that successor is unused.
            let window = max(policy.reuseGraceWindow, policy.unusedSuccessorRecovery)
            // The reuse's audit event and deliveries commit with the session's revocation, or not at all.
            return try await store.rotate(
                presentedHash: hash, successor: successorRecord, now: now, graceWindow: window, accepting: accepting,
                reuse: ReuseNotice(at: now, origin: origin, webhooks: policy.webhooks))
        }
        // Most refreshes in one step: the session is read as it is rotated, when it is this client's and its provider
        // authorization is known to need no validation now. The others read it first, and may ask the provider.
        let grants = grants
        var result = try await rotation { family in
            (clientID == nil || family.clientID == clientID) && !confidentialClients.contains(family.clientID)
                && (family.dpopThumbprint == nil || family.dpopThumbprint == proofThumbprint)
                && (family.identityID.map { grants.isKnownValidated(identityID: $0) } ?? true)
        }
        if case .declined = result {
            guard let (_, family) = try await store.refreshToken(hash: hash) else {
                throw LatchkeyError(.invalidGrant, "the refresh token is unknown or expired; sign in again")
            }
            if let clientID, family.clientID != clientID { throw LatchkeyError(.invalidGrant, "the refresh token was issued to another client") }
            if confidentialClients.contains(family.clientID) {
                throw LatchkeyError(
                    .invalidGrant, "the refresh token was issued to a confidential client; it refreshes at /oauth2/token with its client credentials")
            }
            if let bound = family.dpopThumbprint, bound != proofThumbprint {
                throw LatchkeyError(
                    .invalidDPoPProof,
                    proofThumbprint == nil
                        ? "this session is bound to a DPoP key: refresh with a DPoP proof by that key" : "the DPoP proof is by another key than the session's")
            }
            if family.isRevoked { throw revokedError(family) }
            if let identityID = family.identityID { try await grants.checkAuthorization(identityID: identityID, userID: family.userID) }
            result = try await rotation(accepting: nil)
        }
        switch result {
        case .rotated(var family), .retried(var family):
            family.dpopThumbprint = family.dpopThumbprint ?? proofThumbprint
            let access = try accessTokens.issue(for: family)
            return IssuedTokens(
                accessToken: access.token, expiresIn: access.expiresIn, refreshToken: successor, sessionID: family.id,
                boundKeyThumbprint: family.dpopThumbprint)
        case .reuseDetected(let family):
            logger?.debug("refresh token reuse detected; session revoked", metadata: ["session": "\(family.id)"])
            throw LatchkeyError(.invalidGrant, "this refresh token was already used; the session has been revoked as a precaution — sign in again")
        case .revoked(let family):
            throw revokedError(family)
        case .expired:
            throw LatchkeyError(.invalidGrant, "the session expired; sign in again")
        case .unknown, .declined:
            throw LatchkeyError(.invalidGrant, "the refresh token is unknown or expired; sign in again")
        }
    }

    private func revokedError(_ family: SessionFamily) -> LatchkeyError {
        let reason = family.revocationReason ?? "signed_out"
        if reason.hasSuffix("_authorization_revoked") || reason.hasSuffix("_consent_revoked") {
            let provider = String(reason.prefix { $0 != "_" })
            let name = grants.displayName(of: provider)
            return LatchkeyError(.invalidGrant, "the \(name) authorization was revoked (the user disconnected this app at \(name)); sign in again")
        }
        switch reason {
        case "refresh_token_reuse":
            return LatchkeyError(.invalidGrant, "the session was revoked after its refresh token was used twice; sign in again")
        default:
            return LatchkeyError(.invalidGrant, "the session was revoked (\(reason)); sign in again")
        }
    }

    // MARK: - Ending sessions

    /// Ends one session, or every session of its user; with its audit event, in one transaction.
    public func logout(sessionID: String, userID: String, all: Bool) async throws -> Int {
        let now = timeSource.now
        return try await store.write { tx in
            let count =
                all
                ? try await tx.revokeSessions(userID: userID, reason: "signed_out", at: now)
                : (try await tx.revokeSession(id: sessionID, reason: "signed_out", at: now) ? 1 : 0)
            try await tx.audit(at: now, userID, all ? "signed_out_everywhere" : "signed_out", "sessions=\(count)")
            return count
        }
    }

    /// Ends one session of the user, with its audit event, in one transaction; false when the user has no such session.
    public func revokeSession(id: String, userID: String) async throws -> Bool {
        let now = timeSource.now
        return try await store.write { tx in
            guard let family = try await tx.session(id: id), family.userID == userID else { return false }
            if try await tx.revokeSession(id: id, reason: "revoked_by_user", at: now) {
                try await tx.audit(at: now, userID, "session_revoked", "session=\(id)")
            }
            return true
        }
    }
}
