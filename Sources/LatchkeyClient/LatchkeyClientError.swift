public import LatchkeyModels

/// Why a ``LatchkeyClient`` call failed. Compared by code: `catch let error as LatchkeyClientError where error == .notSignedIn`.
public struct LatchkeyClientError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: String, Sendable {
        case notSignedIn = "not_signed_in"
        case storageUnavailable = "storage_unavailable"
        case temporarilyUnavailable = "temporarily_unavailable"
        case rejected
        case invalidResponse = "invalid_response"
        case cancelled
        case webSheetUnavailable = "web_sheet_unavailable"
        case passkeyUnavailable = "passkey_unavailable"
    }

    private let code: Code
    /// What happened, for logs; never contains a token.
    public let reason: String?
    /// The server's HTTP status, when it answered.
    public let statusCode: Int?
    /// The server's `{"error", "error_description"}` body, when it sent one.
    public let serverError: OAuthErrorResponse?

    private init(_ code: Code, _ reason: String?, statusCode: Int? = nil, serverError: OAuthErrorResponse? = nil) {
        self.code = code
        self.reason = reason
        self.statusCode = statusCode
        self.serverError = serverError
    }

    /// No session: never signed in, signed out, or the server ended the session (`invalid_grant`).
    public static let notSignedIn = Self(.notSignedIn, "no session; sign in")
    /// The token store cannot be read or written now (a locked Keychain); the session is kept and retried.
    public static let storageUnavailable = Self(.storageUnavailable, "the token store cannot be used now; the session is kept")
    /// The refresh did not get a definite answer (timeout, 5xx, 429, a proxy's page); the session is kept and retried.
    public static let temporarilyUnavailable = Self(.temporarilyUnavailable, "the server gave no definite answer; retry later")
    /// The server refused a sign-in; ``serverError`` says why.
    public static let rejected = Self(.rejected, nil)
    /// The server answered 2xx with a body that is not what the endpoint returns.
    public static let invalidResponse = Self(.invalidResponse, nil)

    /// The user closed the web sheet (or cancelled the sign-in) before it finished.
    public static let cancelled = Self(.cancelled, "the user cancelled the sign-in")
    /// The web sheet could not be shown: another one is up, there is no window to present from, `start()` failed, or
    /// the redirect URI cannot end a web sheet.
    public static let webSheetUnavailable = Self(.webSheetUnavailable, nil)

    static func webSheetUnavailable(_ reason: String) -> Self { Self(.webSheetUnavailable, reason) }

    /// The platform made no passkey or assertion: none is saved for this server, the app lacks the `webcredentials:`
    /// associated domain, or the authenticator failed. The reason says which, when the platform told.
    public static let passkeyUnavailable = Self(.passkeyUnavailable, nil)

    static func passkeyUnavailable(_ reason: String) -> Self { Self(.passkeyUnavailable, reason) }

    static func unavailable(_ reason: String) -> Self { Self(.temporarilyUnavailable, reason) }

    static func storageUnavailable(_ reason: String) -> Self { Self(.storageUnavailable, reason) }

    static func rejected(status: Int, _ body: OAuthErrorResponse?) -> Self {
        Self(.rejected, body.map { "\($0.error): \($0.errorDescription ?? "")" } ?? "HTTP \(status)", statusCode: status, serverError: body)
    }

    static func invalidResponse(_ reason: String) -> Self { Self(.invalidResponse, reason) }

    /// The stable snake_case code, such as `not_signed_in`.
    public var errorCode: String { code.rawValue }

    public var description: String { reason.map { "\(code.rawValue): \($0)" } ?? code.rawValue }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
}

/// What happened to the session; ``LatchkeyClient/events`` starts with the stored state.
public enum SessionEvent: Sendable, Equatable {
    /// A session exists: stored at launch, or a sign-in just succeeded.
    case signedIn
    /// The access token was renewed.
    case refreshed
    /// There is no session any more (or none at launch).
    case sessionEnded(SessionEndReason)
    /// The token store cannot be read or written now. Nothing was deleted; the client retries.
    case storageUnavailable
}

/// Why ``SessionEvent/sessionEnded(_:)`` was sent.
public enum SessionEndReason: Sendable, Equatable {
    /// Nothing was stored at launch.
    case noStoredSession
    /// ``LatchkeyClient/signOut()`` was called, here or in another process sharing the store.
    case signedOut
    /// The server answered `invalid_grant`: the session was revoked or has expired.
    case revoked
}
