public import Configuration
import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyModels

/// Dropbox: an authorization code redeemed with PKCE (no secret needed), then `users/get_current_account`;
/// the account id is the subject.
public struct DropboxConfiguration: Sendable {
    /// The app key, Dropbox's client id.
    public var appKey: String
    public var appSecret: Secret?
    public var apiURL = "https://api.dropboxapi.com"
    /// Where the browser flow signs in.
    public var authorizeURL = "https://www.dropbox.com/oauth2/authorize"
    /// Dropbox cannot say which app an access token was issued to, so a token from any Dropbox app would
    /// sign in. Off by default; turn on only when the tokens come from your own app's trusted code path.
    public var acceptAccessTokens = false
    public var requestTimeout: Duration = .seconds(10)

    public init(appKey: String, appSecret: String? = nil) {
        self.appKey = appKey
        self.appSecret = appSecret.map { Secret($0) }
    }
}

public struct DropboxProvider: IdentityProvider {
    public let configuration: DropboxConfiguration
    private let calls: ProviderCalls
    private let timeSource: TimeSource

    public init(configuration: DropboxConfiguration, transport: any HTTPTransport, timeSource: TimeSource = .system, observer: ProviderCallObserver? = nil) {
        self.configuration = configuration
        self.timeSource = timeSource
        self.calls = ProviderCalls(provider: "dropbox", displayName: "Dropbox", transport: transport, timeout: configuration.requestTimeout, observer: observer)
    }

    public var name: String { "dropbox" }
    public var displayName: String { "Dropbox" }
    public var signsInWithBrowser: Bool { true }
    public var acceptedCredentials: String { "{authorizationCode, codeVerifier, redirectUri}" + (configuration.acceptAccessTokens ? " or {accessToken}" : "") }
    public var credentialKinds: Set<CredentialKind> { configuration.acceptAccessTokens ? [.authorizationCode, .accessToken] : [.authorizationCode] }

    /// The code flow with PKCE, asking for a refresh token (`token_access_type=offline`) to revoke on deletion.
    public func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart? {
        BrowserSignInStart(
            url: url(
                configuration.authorizeURL,
                query: [("response_type", "code"), ("client_id", configuration.appKey)] + request.codeFlowParameters + [("token_access_type", "offline")]))
    }

    public func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn {
        if let code = credential.authorizationCode, !code.isEmpty {
            guard let verifier = credential.codeVerifier, PKCE.isValidVerifier(verifier) else {
                throw LatchkeyError(.malformedRequest, "codeVerifier is missing or not 43–128 unreserved characters (RFC 7636 §4.1)")
            }
            var fields = [("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier), ("client_id", configuration.appKey)]
            if let redirectURI = credential.redirectURI { fields.append(("redirect_uri", redirectURI)) }
            let answer = try await tokenCall(fields, operation: "code_exchange")
            guard let accessToken = answer.access_token else { throw LatchkeyError(.invalidProviderResponse, "Dropbox's token answer has no access_token") }
            let identity = try await account(accessToken)
            if let accountID = answer.account_id, accountID != identity.subject {
                throw LatchkeyError(.invalidProviderResponse, "Dropbox's token answer and get_current_account name different accounts")
            }
            return ProviderSignIn(identity: identity, grant: answer.refresh_token)
        }
        if let accessToken = credential.accessToken, !accessToken.isEmpty {
            guard configuration.acceptAccessTokens else {
                throw LatchkeyError(
                    .malformedRequest,
                    "Dropbox access tokens are not accepted (dropbox.acceptAccessTokens is off: Dropbox cannot tell which app a token belongs to); send authorizationCode with codeVerifier and redirectUri"
                )
            }
            return ProviderSignIn(identity: try await account(accessToken))
        }
        throw LatchkeyError(.malformedRequest, "send authorizationCode with codeVerifier and redirectUri")
    }

    func tokenCall(_ fields: [(String, String)], operation: String) async throws(LatchkeyError) -> OAuthTokenAnswer {
        var fields = fields
        if let secret = configuration.appSecret { fields.append(("client_secret", secret.revealed)) }
        return try calls.decode(
            OAuthTokenAnswer.self, try await calls.postForm(configuration.apiURL + "/oauth2/token", fields, operation: operation), what: "token endpoint")
    }

    private func account(_ accessToken: String) async throws(LatchkeyError) -> VerifiedIdentity {
        struct Account: Decodable {
            struct Name: Decodable {
                let given_name: String?
                let surname: String?
                let display_name: String?
            }
            let account_id: String
            let name: Name?
            let email: String?
            let email_verified: Bool?
            let disabled: Bool?
        }
        let request = OutboundRequest(
            method: "POST", url: configuration.apiURL + "/2/users/get_current_account",
            headers: [("Authorization", "Bearer \(accessToken)"), ("Content-Type", "application/json")], body: Array("null".utf8),
            timeout: configuration.requestTimeout)
        let account = try calls.decode(Account.self, try await calls.send(request, operation: "account", bearer: true), what: "get_current_account")
        if account.disabled == true { throw LatchkeyError(.invalidGrant, "the Dropbox account is disabled") }
        return VerifiedIdentity(
            issuer: "https://www.dropbox.com", subject: account.account_id, audience: configuration.appKey, checkedAt: timeSource.now, email: account.email,
            emailVerified: account.email_verified, name: account.name?.display_name, givenName: account.name?.given_name,
            familyName: account.name?.surname)
    }

    public func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            _ = try await tokenCall(
                [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", configuration.appKey)], operation: "refresh_validation")
            return .valid
        } catch {
            return error.code == .invalidGrant ? .revoked : .unreachable(error.errorCode)
        }
    }

    /// Dropbox revokes with an access token: one is minted from the refresh token first.
    public func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        let answer = try await tokenCall(
            [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", configuration.appKey)], operation: "revocation")
        guard let accessToken = answer.access_token else { throw LatchkeyError(.invalidProviderResponse, "Dropbox's token answer has no access_token") }
        _ = try await calls.send(
            OutboundRequest(
                method: "POST", url: configuration.apiURL + "/2/auth/token/revoke", headers: [("Authorization", "Bearer \(accessToken)")],
                timeout: configuration.requestTimeout),
            operation: "revocation", bearer: true)
    }
}

/// Dropbox as a provider module: its settings under `dropbox.*`.
extension DropboxConfiguration: ProviderModule {
    public static let name = "dropbox"
    public static let displayName = "Dropbox"
    public static let settings = [
        ProviderSettingDescription("appKey", "the app key (Dropbox's client id); codes with PKCE need nothing else"),
        ProviderSettingDescription("appSecret / appSecretFile", "the app secret (secret)", default: "none"),
        ProviderSettingDescription("apiUrl", "the API", default: "https://api.dropboxapi.com"),
        ProviderSettingDescription("authorizeUrl", "Dropbox's sign-in page, for the browser flow", default: "https://www.dropbox.com/oauth2/authorize"),
        ProviderSettingDescription(
            "acceptAccessTokens", "accept {accessToken}: Dropbox cannot say which app a token belongs to, so any Dropbox app's token signs in",
            default: "false"),
    ]

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        guard let appKey = config.string(forKey: "appKey") else { return nil }
        self.init(appKey: appKey, appSecret: try config.settingSecret("appSecret", fileKey: "appSecretFile", fullFileKey: "dropbox.appSecretFile"))
        apiURL = try config.settingURL("apiUrl", fullKey: "dropbox.apiUrl") ?? apiURL
        authorizeURL = try config.settingURL("authorizeUrl", fullKey: "dropbox.authorizeUrl", isBase: false) ?? authorizeURL
        acceptAccessTokens = try config.settingBool("acceptAccessTokens", fullKey: "dropbox.acceptAccessTokens") ?? false
    }

    public var findings: [ProviderFinding] {
        var findings = [ProviderFinding(.ok, "dropbox", "Dropbox app key \(appKey): authorization codes with PKCE are accepted")]
        if acceptAccessTokens {
            findings.append(
                ProviderFinding(
                    .warning, "dropbox.acceptAccessTokens",
                    "on: Dropbox cannot say which app a token was issued to, so any Dropbox app's token signs in; turn it off and send authorization codes with PKCE"
                ))
        }
        return findings
    }

    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await DropboxProvider(configuration: self, transport: context.transport, timeSource: context.timeSource).probeClient()]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        DropboxProvider(configuration: self, transport: context.transport, timeSource: context.timeSource, observer: context.observer)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let clientID = clientIDs.first ?? ""
        return ["appKey": clientID, "apiUrl": baseURL, "authorizeUrl": baseURL + "/oauth2/authorize"]
    }
}

extension DropboxProvider {
    /// `doctor --live`: a made-up code at the token endpoint.
    func probeClient() async -> ProviderFinding {
        let outcome: Result<Void, LatchkeyError>
        do {
            _ = try await tokenCall(
                [
                    ("grant_type", "authorization_code"), ("code", "latchkey-doctor-invalid-code"), ("code_verifier", PKCE.makeVerifier()),
                    ("client_id", configuration.appKey),
                ],
                operation: "doctor")
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        return .clientProbe("dropbox", "Dropbox", outcome)
    }
}
