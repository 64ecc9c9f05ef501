import Crypto
public import Foundation
public import LatchkeyJOSE
import LatchkeyModels

/// Latchkey as the OAuth 2.1 authorization server of its registered apps. Keeps each provider sign-in in
/// progress (found by Latchkey's own `state`: single use, 10 minutes) and the authorization codes it gives apps
/// (single use, 60 seconds, bound to client, redirect URI and PKCE challenge). A replayed code ends the session
/// it started (RFC 6749 §4.1.2). Knows nothing of HTTP.
public struct AuthorizationCodeFlow: Sendable {
    /// How long a sign-in at the provider may take.
    public static let flowLifetime: TimeInterval = 600
    /// How long an app has to redeem its code.
    public static let codeLifetime: TimeInterval = 60

    /// A sign-in at a provider on behalf of an app, from `/oauth2/authorize` to the provider's callback.
    public struct PendingSignIn: Codable, Sendable, Equatable {
        public var provider: String
        public var clientID: String
        public var redirectURI: String
        /// The app's `state`, returned to it unchanged.
        public var appState: String
        /// The app's S256 PKCE challenge, bound to the code it gets.
        public var codeChallenge: String
        /// The nonce Latchkey sent the provider (hashed, by default) and checks in its ID token.
        public var rawNonce: String
        /// Latchkey's own PKCE verifier at the provider.
        public var providerCodeVerifier: String
        public var inviteCode: String?
        /// `dpop_jkt` (RFC 9449 §10): the code is redeemed only with a DPoP proof by this key.
        public var dpopThumbprint: String?

        public init(
            provider: String, clientID: String, redirectURI: String, appState: String, codeChallenge: String, rawNonce: String,
            providerCodeVerifier: String, inviteCode: String? = nil
        ) {
            self.provider = provider
            self.clientID = clientID
            self.redirectURI = redirectURI
            self.appState = appState
            self.codeChallenge = codeChallenge
            self.rawNonce = rawNonce
            self.providerCodeVerifier = providerCodeVerifier
            self.inviteCode = inviteCode
        }
    }

    /// What a provider's callback `state` leads to.
    public enum FlowLookup: Sendable, Equatable {
        case pending(PendingSignIn)
        /// Older than ``AuthorizationCodeFlow/flowLifetime``: the app is told, the sign-in is not finished.
        case expired(PendingSignIn)
        case alreadyUsed
        case unknown
    }

    /// What a code stands for.
    struct CodeGrant: Codable {
        var clientID: String
        var redirectURI: String
        var codeChallenge: String
        var userID: String
        var identityID: String?
        /// Chosen when the code is issued, so a replay can end the session the first redemption started.
        var sessionID: String
        var userAgent: String?
        /// The provider the user signed in with (nil in codes issued before it was kept).
        var idp: String?
        /// The authorization request's `dpop_jkt`.
        var dpopThumbprint: String?
    }

    public let store: any OneTimeRecordStore & UserStore & AuditStore & TransactionalStore
    public let issuer: SessionIssuer
    private let box: SecretBox
    private let timeSource: TimeSource

    public init(store: any OneTimeRecordStore & UserStore & AuditStore & TransactionalStore, issuer: SessionIssuer, box: SecretBox, timeSource: TimeSource) {
        self.store = store
        self.issuer = issuer
        self.box = box
        self.timeSource = timeSource
    }

    /// Records a sign-in about to start at the provider; returns the `state` to send there.
    public func begin(_ pending: PendingSignIn) async throws -> String {
        let state = Self.randomToken()
        try await store.saveOneTimeRecord(
            OneTimeRecord(
                kind: "flow", keyHash: sha256Hex(state), sealedPayload: try seal(pending), expiresAt: timeSource.now.addingTimeInterval(Self.flowLifetime)))
        return state
    }

    /// Takes the sign-in a callback's `state` names; a second callback with the same state gets `.alreadyUsed`.
    public func take(state: String) async throws -> FlowLookup {
        let now = timeSource.now
        guard !state.isEmpty, let record = try await store.useOneTimeRecord(kind: "flow", keyHash: sha256Hex(state), at: now) else { return .unknown }
        guard record.usedAt == nil else { return .alreadyUsed }
        let pending = try open(PendingSignIn.self, record.sealedPayload)
        return record.expiresAt > now ? .pending(pending) : .expired(pending)
    }

    /// The code the app gets for a finished sign-in.
    public func issueCode(for pending: PendingSignIn, userID: String, identityID: String?, userAgent: String?) async throws -> String {
        let code = Self.randomToken()
        let grant = CodeGrant(
            clientID: pending.clientID, redirectURI: pending.redirectURI, codeChallenge: pending.codeChallenge, userID: userID, identityID: identityID,
            sessionID: newIdentifier(), userAgent: userAgent, idp: pending.provider, dpopThumbprint: pending.dpopThumbprint)
        try await store.saveOneTimeRecord(
            OneTimeRecord(
                kind: "code", keyHash: sha256Hex(code), sealedPayload: try seal(grant), expiresAt: timeSource.now.addingTimeInterval(Self.codeLifetime)))
        return code
    }

    /// Redeems a code (RFC 6749 §4.1.3 with RFC 7636 §4.6) and starts its session. Every refusal is `invalid_grant`.
    public func redeem(code: String, clientID: String, redirectURI: String, codeVerifier: String) async throws -> IssuedTokens {
        let now = timeSource.now
        guard let record = try await store.useOneTimeRecord(kind: "code", keyHash: sha256Hex(code), at: now) else {
            throw LatchkeyError(.invalidGrant, "the authorization code is unknown")
        }
        let grant = try open(CodeGrant.self, record.sealedPayload)
        if record.usedAt != nil {
            try await store.write { tx in
                guard try await tx.revokeSession(id: grant.sessionID, reason: "authorization_code_replayed", at: now) else { return }
                try await tx.audit(at: now, grant.userID, "session_revoked", "session=\(grant.sessionID) reason=authorization_code_replayed")
            }
            throw LatchkeyError(.invalidGrant, "the authorization code was already used; the session it started has been ended")
        }
        guard record.expiresAt > now else {
            throw LatchkeyError(.invalidGrant, "the authorization code has expired (codes must be redeemed within \(Int(Self.codeLifetime)) s)")
        }
        guard grant.clientID == clientID else { throw LatchkeyError(.invalidGrant, "the authorization code was issued to another client") }
        guard grant.redirectURI == redirectURI else {
            throw LatchkeyError(.invalidGrant, "redirect_uri is not the one the authorization code was issued to")
        }
        guard PKCE.verify(verifier: codeVerifier, challenge: grant.codeChallenge, method: .s256) else {
            throw LatchkeyError(.invalidGrant, "code_verifier does not match the code_challenge of the authorization request")
        }
        // The session takes the key of the request's proof (``SessionBinding``); dpop_jkt named it in advance.
        if let expected = grant.dpopThumbprint, SessionBinding.current.dpopThumbprint != expected {
            throw LatchkeyError(.invalidDPoPProof, "the authorization request named a DPoP key (dpop_jkt): redeem the code with a proof by that key")
        }
        let tokens = try await issuer.startSession(
            userID: grant.userID, identityID: grant.identityID, clientID: grant.clientID, userAgent: grant.userAgent, sessionID: grant.sessionID,
            idp: grant.idp, userClaims: try await store.user(id: grant.userID)?.claims)
        // Like a native sign-in, the audit line is best effort: the session exists, the app must get its tokens.
        try? await store.audit(
            AuditEvent(at: timeSource.now, userID: grant.userID, kind: "signed_in", detail: "client=\(grant.clientID) session=\(tokens.sessionID) browser"))
        return tokens
    }

    /// 32 random bytes, base64url: states and codes.
    static func randomToken() -> String { base64URL(systemRandomBytes(32)) }

    private func seal(_ value: some Encodable) throws -> String {
        try box.seal(String(decoding: try JSONEncoder().encode(value), as: UTF8.self))
    }

    private func open<T: Decodable>(_ type: T.Type, _ sealed: String) throws -> T {
        try JSONDecoder().decode(T.self, from: Data(try box.open(sealed).utf8))
    }
}
