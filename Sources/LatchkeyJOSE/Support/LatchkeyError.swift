/// Every failure Latchkey reports: a stable snake_case ``code`` for programs and metrics,
/// and a ``reason`` that tells a person what to fix.
///
/// Errors compare by code, so tests and callers can write `error == .unexpectedAudience`.
/// Reasons never contain a token, an authorization code or a key.
public struct LatchkeyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, bounded, snake_case error code. Codes are never renamed. An enum, so that every `switch` mapping codes
    /// to answers (HTTP statuses, exit codes) is exhaustive and a new code is flagged by the compiler where it matters.
    public enum Code: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
        public var description: String { rawValue }

        // Token shape
        case malformedToken = "malformed_token"
        case tokenTooLarge = "token_too_large"
        case unsupportedAlgorithm = "unsupported_algorithm"
        case unsupportedCriticalHeader = "unsupported_critical_header"
        case unknownKeyID = "unknown_key_id"
        case invalidSignature = "invalid_signature"
        case missingClaim = "missing_claim"
        case duplicateClaim = "duplicate_claim"
        case invalidClaim = "invalid_claim"
        // Claims
        case unexpectedIssuer = "unexpected_issuer"
        case unexpectedAudience = "unexpected_audience"
        case tokenExpired = "token_expired"
        case tokenNotYetValid = "token_not_yet_valid"
        case issuedInFuture = "issued_in_future"
        case nonceMissing = "nonce_missing"
        case nonceMismatch = "nonce_mismatch"
        /// A sign-in that cannot prove it holds the nonce: the token carries one and no raw nonce was sent,
        /// or the token carries none while the provider's `requireNonce` setting is on.
        case nonceRequired = "nonce_required"
        /// An identity token that already started a session (sign-ins are single use).
        case tokenAlreadyUsed = "token_already_used"
        case codeHashMismatch = "code_hash_mismatch"
        case accessTokenHashMismatch = "access_token_hash_mismatch"
        // Keys and configuration
        case keysUnavailable = "keys_unavailable"
        case invalidKey = "invalid_key"
        case invalidConfiguration = "invalid_configuration"
        // Talking to a provider (RFC 6749 §5.2 codes keep their names)
        case invalidRequest = "invalid_request"
        case invalidClient = "invalid_client"
        case invalidGrant = "invalid_grant"
        case unauthorizedClient = "unauthorized_client"
        case unsupportedGrantType = "unsupported_grant_type"
        case invalidScope = "invalid_scope"
        case providerUnavailable = "provider_unavailable"
        case providerRateLimited = "provider_rate_limited"
        case invalidProviderResponse = "invalid_provider_response"
        // Notifications
        case invalidNotification = "invalid_notification"
        // Latchkey's own API (RFC 6750 and RFC 6749 names)
        /// The caller's request lacks or garbles a field (answered as RFC 6749 `invalid_request`, 400).
        case malformedRequest = "malformed_request"
        case invalidToken = "invalid_token"
        case temporarilyUnavailable = "temporarily_unavailable"
        case notFound = "not_found"
        case rateLimited = "rate_limited"
        // Accounts
        /// The provider account is already linked to another user.
        case identityInUse = "identity_in_use"
        /// Unlinking would leave the user with no way to sign in.
        case lastIdentity = "last_identity"
        /// Sign-up needs an invitation (`signup.mode` is `invite`) and none valid was sent.
        case signupClosed = "signup_closed"
        /// The account is disabled (`POST /admin/v1/users/{id}/disable`, or imported disabled).
        case accountDisabled = "account_disabled"
        /// An Apple account that may be a user left unmoved when the app's transfer window (60 days) ended.
        case appleTransferIncomplete = "apple_transfer_incomplete"
        /// Only a guest (an anonymous user) is merged into another account.
        case mergeNotAllowed = "merge_not_allowed"

        // Passkeys
        /// A passkey registration or assertion failed a WebAuthn check: the reason says which.
        case invalidCredential = "invalid_credential"
        /// The challenge is unknown, used already, expired (five minutes) or was made for something else.
        case challengeExpired = "challenge_expired"
        /// The signature counter went backwards: two copies of one authenticator exist; the credential is marked.
        case credentialCloneSuspected = "credential_clone_suspected"
        /// A DPoP proof (RFC 9449) is missing, malformed, stale, replayed, or by another key than the session's.
        case invalidDPoPProof = "invalid_dpop_proof"
        /// The server wants a DPoP proof carrying the nonce of its `DPoP-Nonce` header (RFC 9449 §8).
        case useDPoPNonce = "use_dpop_nonce"
        /// An App Attest attestation or assertion failed a check, or is missing where the server requires one.
        case invalidAttestation = "invalid_attestation"
    }

    /// What went wrong, as a stable code.
    public let code: Code
    /// What happened and what to do about it. Safe to log and to show: it never echoes secrets.
    public let reason: String
    /// Likely causes worth checking, most likely first (for example the causes of `invalid_client`).
    public let likelyCauses: [String]

    public init(_ code: Code, _ reason: String, likelyCauses: [String] = []) {
        self.code = code
        self.reason = reason
        self.likelyCauses = likelyCauses
    }

    /// The snake_case code, as it appears in API error bodies and metrics labels.
    public var errorCode: String { code.rawValue }

    public var description: String {
        guard !likelyCauses.isEmpty else { return "\(code): \(reason)" }
        return "\(code): \(reason)\n" + likelyCauses.map { "  - \($0)" }.joined(separator: "\n")
    }

    public static func == (lhs: LatchkeyError, rhs: LatchkeyError) -> Bool { lhs.code == rhs.code }

    /// Pattern-matches an error against a code: `case .tokenExpired = error.code`.
    public static func ~= (code: Code, error: LatchkeyError) -> Bool { error.code == code }
}
