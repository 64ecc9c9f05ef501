import Foundation
import LatchkeyCore
public import LatchkeyJOSE
public import Logging

/// Apple's answer from `/auth/token`.
public struct AppleTokenResponse: Sendable, Decodable, Equatable {
    public var accessToken: String
    public var tokenType: String
    public var expiresIn: Int
    /// Only from the authorization-code grant: Apple never rotates refresh tokens.
    public var refreshToken: String?
    public var idToken: String?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token"
        case tokenType = "token_type"
        case expiresIn = "expires_in"
        case refreshToken = "refresh_token"
        case idToken = "id_token"
    }
}

/// A user as the recipient team sees them after an app transfer (`/auth/usermigrationinfo`).
public struct AppleMigratedUser: Sendable, Decodable, Equatable {
    /// The user's subject under the recipient team.
    public var sub: String
    /// Present only when the user used Hide My Email.
    public var email: String?
    public var isPrivateEmail: Bool?

    public init(sub: String, email: String? = nil, isPrivateEmail: Bool? = nil) {
        self.sub = sub
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }

    enum CodingKeys: String, CodingKey {
        case sub, email
        case isPrivateEmail = "is_private_email"
    }
}

/// Which token `/auth/revoke` is given.
public enum AppleTokenTypeHint: String, Sendable {
    case refreshToken = "refresh_token"
    case accessToken = "access_token"
}

/// Talks to Sign in with Apple's REST API (or the emulator): code exchange, refresh-token validation,
/// revocation and app-transfer calls. Apple's terse errors become ``LatchkeyError``s that say what to check.
///
/// ```swift
/// let apple = try AppleClient(configuration: config)
/// let tokens = try await apple.exchangeCode(code, clientID: "com.example.app")
/// ```
public struct AppleClient: Sendable {
    public let configuration: AppleConfiguration
    private let transport: any HTTPTransport
    private let secrets: [String: AppleClientSecretProvider]
    private let logger: Logger?

    public init(
        configuration: AppleConfiguration,
        transport: any HTTPTransport = AsyncHTTPClientTransport(),
        timeSource: TimeSource = .system,
        logger: Logger? = nil
    ) throws(LatchkeyError) {
        guard !configuration.clientIDs.isEmpty else {
            throw LatchkeyError(.invalidConfiguration, "apple.clientIDs is empty; list your bundle id and, for web sign-ins, your Services ID")
        }
        var secrets: [String: AppleClientSecretProvider] = [:]
        for clientID in configuration.clientIDs {
            secrets[clientID] = try AppleClientSecretProvider(
                credentials: configuration.credentials,
                clientID: clientID,
                lifetime: configuration.clientSecretLifetime,
                timeSource: timeSource
            )
        }
        self.configuration = configuration
        self.transport = transport
        self.secrets = secrets
        self.logger = logger
    }

    /// Redeems an authorization code. Native codes (from `ASAuthorizationAppleIDCredential`) are redeemed with the
    /// bundle id and no `redirectURI`; web codes with the Services ID and the `redirect_uri` used to get them.
    /// Never retried: a code is single-use, and a repeat would fail with `invalid_grant` anyway.
    public func exchangeCode(_ code: String, clientID: String, redirectURI: String? = nil) async throws(LatchkeyError) -> AppleTokenResponse {
        var fields = [("grant_type", "authorization_code"), ("code", code)]
        if let redirectURI { fields.append(("redirect_uri", redirectURI)) }
        let response = try await post("/auth/token", clientID: clientID, fields: fields, operation: .codeExchange, retry: .never)
        return try decode(AppleTokenResponse.self, from: response, endpoint: "/auth/token")
    }

    /// Validates a refresh token (Apple allows this about once a day per user). Apple answers with a new access
    /// and ID token, never a new refresh token; `invalid_grant` means the user revoked the authorization.
    public func validateRefreshToken(_ refreshToken: String, clientID: String) async throws(LatchkeyError) -> AppleTokenResponse {
        let fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        let response = try await post("/auth/token", clientID: clientID, fields: fields, operation: .refreshValidation, retry: configuration.retry)
        return try decode(AppleTokenResponse.self, from: response, endpoint: "/auth/token")
    }

    /// Revokes a refresh or access token, as the App Store requires on account deletion.
    /// Apple answers 200 for tokens that were already invalid too.
    public func revoke(_ token: String, clientID: String, typeHint: AppleTokenTypeHint = .refreshToken) async throws(LatchkeyError) {
        let fields = [("token", token), ("token_type_hint", typeHint.rawValue)]
        _ = try await post("/auth/revoke", clientID: clientID, fields: fields, operation: .revocation, retry: configuration.retry)
    }

    /// A team access token for app-transfer calls (`client_credentials` with scope `user.migration`).
    public func teamTransferToken(clientID: String) async throws(LatchkeyError) -> String {
        let fields = [("grant_type", "client_credentials"), ("scope", "user.migration")]
        let response = try await post("/auth/token", clientID: clientID, fields: fields, operation: .teamToken, retry: configuration.retry)
        return try decode(AppleTokenResponse.self, from: response, endpoint: "/auth/token").accessToken
    }

    /// Sending team: the transfer identifier for one user, to hand to the recipient team.
    /// - Parameter teamToken: a token of ``teamTransferToken(clientID:)`` to reuse (it lasts an hour); nil fetches one.
    public func makeTransferSubject(for subject: String, recipientTeamID: String, clientID: String, teamToken: String? = nil) async throws(LatchkeyError)
        -> String
    {
        let token: String
        if let teamToken { token = teamToken } else { token = try await teamTransferToken(clientID: clientID) }
        let fields = [("sub", subject), ("target", recipientTeamID)]
        let response = try await post(
            "/auth/usermigrationinfo", clientID: clientID, fields: fields, bearer: token, operation: .migration, retry: configuration.retry)
        struct Answer: Decodable { let transfer_sub: String }
        return try decode(Answer.self, from: response, endpoint: "/auth/usermigrationinfo").transfer_sub
    }

    /// Recipient team: exchanges a transfer identifier for the user's subject under this team.
    /// - Parameter teamToken: a token of ``teamTransferToken(clientID:)`` to reuse; nil fetches one.
    public func exchangeTransferSubject(_ transferSubject: String, clientID: String, teamToken: String? = nil) async throws(LatchkeyError)
        -> AppleMigratedUser
    {
        let token: String
        if let teamToken { token = teamToken } else { token = try await teamTransferToken(clientID: clientID) }
        let fields = [("transfer_sub", transferSubject)]
        let response = try await post(
            "/auth/usermigrationinfo", clientID: clientID, fields: fields, bearer: token, operation: .migration, retry: configuration.retry)
        return try decode(AppleMigratedUser.self, from: response, endpoint: "/auth/usermigrationinfo")
    }

    // MARK: - Plumbing

    enum Operation: String {
        case codeExchange = "code_exchange"
        case refreshValidation = "refresh_validation"
        case revocation
        case teamToken = "team_token"
        case migration
    }

    private func post(
        _ path: String,
        clientID: String,
        fields: [(String, String)],
        bearer: String? = nil,
        operation: Operation,
        retry: RetryPolicy
    ) async throws(LatchkeyError) -> OutboundResponse {
        guard let secrets = secrets[clientID] else {
            throw LatchkeyError(
                .invalidConfiguration,
                "client id \"\(clientID.prefix(128))\" is not in apple.clientIDs [\(configuration.clientIDs.joined(separator: ", "))]"
            )
        }
        let secret = try await secrets.secret()
        let request = OutboundRequest.form(
            url: configuration.baseURL + path,
            fields: [("client_id", clientID), ("client_secret", secret)] + fields,
            headers: bearer.map { [("Authorization", "Bearer \($0)")] } ?? [],
            timeout: configuration.requestTimeout
        )
        var attempt = 1
        while true {
            let outcome: Result<OutboundResponse, LatchkeyError>
            do {
                let response = try await transport.send(request)
                outcome = response.status == 200 ? .success(response) : .failure(appleError(response, operation: operation, clientID: clientID))
            } catch {
                outcome = .failure(error)
            }
            switch outcome {
            case .success(let response):
                return response
            case .failure(let error):
                let transient = error.code == .providerUnavailable || error.code == .providerRateLimited
                logger?.debug(
                    "apple call failed", metadata: ["apple.operation": "\(operation.rawValue)", "error": "\(error.errorCode)", "attempt": "\(attempt)"])
                guard transient, attempt < retry.maximumAttempts else { throw error }
                try? await Task.sleep(for: retry.backoff(beforeAttempt: attempt))
                attempt += 1
            }
        }
    }

    private func decode<T: Decodable>(_ type: T.Type, from response: OutboundResponse, endpoint: String) throws(LatchkeyError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(response.body))
        } catch {
            throw LatchkeyError(.invalidProviderResponse, "Apple's \(endpoint) answered 200 with a body Latchkey cannot read")
        }
    }

    func appleError(_ response: OutboundResponse, operation: Operation, clientID: String) -> LatchkeyError {
        if response.status == 429 {
            return LatchkeyError(.providerRateLimited, "Apple is throttling requests (HTTP 429); refresh-token validation is allowed about once a day per user")
        }
        if response.status >= 500 {
            return LatchkeyError(.providerUnavailable, "Apple answered HTTP \(response.status); try again later")
        }
        struct ErrorBody: Decodable { let error: String }
        guard let body = try? JSONDecoder().decode(ErrorBody.self, from: Data(response.body)) else {
            return LatchkeyError(.invalidProviderResponse, "Apple answered HTTP \(response.status) without an error code")
        }
        return Self.explain(body.error, operation: operation, clientID: clientID, configuration: configuration)
    }

    static func explain(_ code: String, operation: Operation, clientID: String, configuration: AppleConfiguration) -> LatchkeyError {
        let credentials = configuration.credentials
        switch code {
        case "invalid_client":
            return LatchkeyError(
                .invalidClient,
                "Apple did not accept the client (client_id \"\(clientID)\", team \(credentials.teamID), key \(credentials.keyID))",
                likelyCauses: [
                    "the key id \(credentials.keyID) is not the id of this .p8 key, or the key was revoked in the developer portal",
                    "the team id \(credentials.teamID) is not the team that owns the key and the client id",
                    "\"\(clientID)\" is not enabled for Sign in with Apple (a bundle id needs the capability; a Services ID needs configuring)",
                    "the client secret's sub must equal client_id: native codes use the bundle id, web codes the Services ID",
                    "the client secret expired, or expires more than 15777000 s (six months) ahead of Apple's clock",
                    "the signature is DER-encoded instead of raw r||s (a hand-built secret; Latchkey's are raw)",
                    "for web sign-ins: the redirect_uri is not registered for the Services ID",
                ]
            )
        case "invalid_grant":
            switch operation {
            case .refreshValidation:
                return LatchkeyError(
                    .invalidGrant,
                    "Apple refused the refresh token: the user revoked this app's access, changed their Apple Account password or deleted the account, or the token belongs to another client id than \"\(clientID)\""
                )
            case .revocation:
                return LatchkeyError(
                    .invalidGrant, "Apple refused to revoke the token: it was issued to another client id than \"\(clientID)\", or does not match the type hint"
                )
            default:
                return LatchkeyError(
                    .invalidGrant,
                    "Apple refused the authorization code: it expired (codes live five minutes), was already redeemed (codes are single-use), or was issued to another client id than \"\(clientID)\" — native codes need the bundle id and no redirect_uri, web codes the Services ID and the same redirect_uri"
                )
            }
        case "invalid_request":
            return LatchkeyError(
                .invalidRequest,
                "Apple found the request malformed",
                likelyCauses: [
                    "a parameter is missing, duplicated or not supported for this grant",
                    "the user has revoked this app's authorization",
                    "the access token, client_id and client secret sub do not belong together",
                ]
            )
        case "unauthorized_client":
            return LatchkeyError(.unauthorizedClient, "Apple says client \"\(clientID)\" may not use this grant type")
        case "unsupported_grant_type":
            return LatchkeyError(.unsupportedGrantType, "Apple does not support this grant type for client \"\(clientID)\"")
        case "invalid_scope":
            return LatchkeyError(.invalidScope, "Apple refused the requested scope")
        default:
            return LatchkeyError(.invalidProviderResponse, "Apple answered with an unknown error code \"\(code.prefix(64))\"")
        }
    }
}
