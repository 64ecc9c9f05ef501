/// Every failure Latchkey reports: a stable snake_case ``code`` for programs and metrics,
/// and a ``reason`` that tells a person what to fix.
///
/// Errors compare by code, so tests and callers can write `error == .unexpectedAudience`.
/// Reasons never contain a token, an authorization code or a key.
public struct LatchkeyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, bounded, snake_case error code. Codes are never renamed.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        // Token shape
        public static let malformedToken = Code(rawValue: "malformed_token")
        public static let tokenTooLarge = Code(rawValue: "token_too_large")
        public static let unsupportedAlgorithm = Code(rawValue: "unsupported_algorithm")
        public static let unsupportedCriticalHeader = Code(rawValue: "unsupported_critical_header")
        public static let unknownKeyID = Code(rawValue: "unknown_key_id")
        public static let invalidSignature = Code(rawValue: "invalid_signature")
        public static let missingClaim = Code(rawValue: "missing_claim")
        public static let duplicateClaim = Code(rawValue: "duplicate_claim")
        public static let invalidClaim = Code(rawValue: "invalid_claim")
        // Claims
        public static let unexpectedIssuer = Code(rawValue: "unexpected_issuer")
        public static let unexpectedAudience = Code(rawValue: "unexpected_audience")
        public static let tokenExpired = Code(rawValue: "token_expired")
        public static let tokenNotYetValid = Code(rawValue: "token_not_yet_valid")
        public static let issuedInFuture = Code(rawValue: "issued_in_future")
        public static let nonceMissing = Code(rawValue: "nonce_missing")
        public static let nonceMismatch = Code(rawValue: "nonce_mismatch")
        /// A sign-in that cannot prove it holds the nonce: the token carries one and no raw nonce was sent,
        /// or the token carries none while the provider's `requireNonce` setting is on.
        public static let nonceRequired = Code(rawValue: "nonce_required")
        /// An identity token that already started a session (sign-ins are single use).
        public static let tokenAlreadyUsed = Code(rawValue: "token_already_used")
        public static let codeHashMismatch = Code(rawValue: "code_hash_mismatch")
        public static let accessTokenHashMismatch = Code(rawValue: "access_token_hash_mismatch")
        // Keys and configuration
        public static let keysUnavailable = Code(rawValue: "keys_unavailable")
        public static let invalidKey = Code(rawValue: "invalid_key")
        public static let invalidConfiguration = Code(rawValue: "invalid_configuration")
        // Talking to a provider (RFC 6749 §5.2 codes keep their names)
        public static let invalidRequest = Code(rawValue: "invalid_request")
        public static let invalidClient = Code(rawValue: "invalid_client")
        public static let invalidGrant = Code(rawValue: "invalid_grant")
        public static let unauthorizedClient = Code(rawValue: "unauthorized_client")
        public static let unsupportedGrantType = Code(rawValue: "unsupported_grant_type")
        public static let invalidScope = Code(rawValue: "invalid_scope")
        public static let providerUnavailable = Code(rawValue: "provider_unavailable")
        public static let providerRateLimited = Code(rawValue: "provider_rate_limited")
        public static let invalidProviderResponse = Code(rawValue: "invalid_provider_response")
        // Notifications
        public static let invalidNotification = Code(rawValue: "invalid_notification")
        // Latchkey's own API (RFC 6750 and RFC 6749 names)
        /// The caller's request lacks or garbles a field (answered as RFC 6749 `invalid_request`, 400).
        public static let malformedRequest = Code(rawValue: "malformed_request")
        public static let invalidToken = Code(rawValue: "invalid_token")
        public static let temporarilyUnavailable = Code(rawValue: "temporarily_unavailable")
        public static let notFound = Code(rawValue: "not_found")
        public static let rateLimited = Code(rawValue: "rate_limited")
        // Accounts
        /// The provider account is already linked to another user.
        public static let identityInUse = Code(rawValue: "identity_in_use")
        /// Unlinking would leave the user with no way to sign in.
        public static let lastIdentity = Code(rawValue: "last_identity")
        /// Sign-up needs an invitation (`signup.mode` is `invite`) and none valid was sent.
        public static let signupClosed = Code(rawValue: "signup_closed")
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
