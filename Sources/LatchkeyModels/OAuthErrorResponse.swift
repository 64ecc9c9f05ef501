/// The error body of RFC 6749 §5.2: `{"error": "...", "error_description": "..."}`.
public struct OAuthErrorResponse: Codable, Sendable, Equatable {
    /// A stable snake_case code such as `invalid_grant`.
    public var error: String
    /// A human-readable explanation; never contains a token, code or key.
    public var errorDescription: String?
    /// `identity_in_use` answered to a guest: the guest may merge into the account that holds the identity
    /// (`POST /v1/me/merge/{provider}`).
    public var mergeable: Bool?

    public init(error: String, errorDescription: String? = nil, mergeable: Bool? = nil) {
        self.error = error
        self.errorDescription = errorDescription
        self.mergeable = mergeable
    }

    enum CodingKeys: String, CodingKey {
        case error
        case errorDescription = "error_description"
        case mergeable
    }
}
