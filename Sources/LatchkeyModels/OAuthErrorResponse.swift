/// The error body of RFC 6749 §5.2: `{"error": "...", "error_description": "..."}`.
public struct OAuthErrorResponse: Codable, Sendable, Equatable {
    /// A stable snake_case code such as `invalid_grant`.
    public var error: String
    /// A human-readable explanation; never contains a token, code or key.
    public var errorDescription: String?

    public init(error: String, errorDescription: String? = nil) {
        self.error = error
        self.errorDescription = errorDescription
    }

    enum CodingKeys: String, CodingKey {
        case error
        case errorDescription = "error_description"
    }
}
