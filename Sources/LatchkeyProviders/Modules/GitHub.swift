public import Configuration
import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyModels

/// GitHub (github.com, or a GitHub Enterprise Server by its URLs): OAuth 2.0 with PKCE, no ID token. The identity is
/// `GET /user` (the numeric `id` is the subject: logins can be renamed) and the primary verified address of
/// `GET /user/emails`. The access token is the grant (an OAuth app's does not expire): validated with
/// `POST /applications/{client_id}/token` and revoked with `DELETE /applications/{client_id}/grant`. See docs/providers.md.
public struct GitHubModule: ProviderModule {
    public static let name = "github"
    public static let displayName = "GitHub"
    public static let settings = [
        ProviderSettingDescription("clientId", "the OAuth app's client id"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "its client secret (secret): GitHub's token endpoint needs it, PKCE or not"),
        ProviderSettingDescription("baseUrl", "where users sign in; a GitHub Enterprise Server's https://HOST", default: "https://github.com"),
        ProviderSettingDescription("apiUrl", "the REST API; a GitHub Enterprise Server's https://HOST/api/v3", default: "https://api.github.com"),
    ]

    public var clientID: String
    public var clientSecret: Secret
    public var baseURL = "https://github.com"
    public var apiURL = "https://api.github.com"
    public var requestTimeout: Duration = .seconds(10)

    public init(clientID: String, clientSecret: String, baseURL: String = "https://github.com", apiURL: String = "https://api.github.com") {
        self.clientID = clientID
        self.clientSecret = Secret(clientSecret)
        self.baseURL = baseURL
        self.apiURL = apiURL
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let secret = try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "github.clientSecretFile")
        let baseURL = try config.settingURL("baseUrl", fullKey: "github.baseUrl")
        let apiURL = try config.settingURL("apiUrl", fullKey: "github.apiUrl")
        guard let clientID = config.string(forKey: "clientId") else {
            guard secret == nil, baseURL == nil, apiURL == nil else {
                throw LatchkeyError(.invalidConfiguration, "setting github.clientId is missing (other github.* settings are set)")
            }
            return nil
        }
        guard let secret, !secret.isEmpty else {
            throw LatchkeyError(
                .invalidConfiguration, "setting github.clientSecret is missing: GitHub's token endpoint needs the OAuth app's client secret")
        }
        self.init(clientID: clientID, clientSecret: secret, baseURL: baseURL ?? "https://github.com", apiURL: apiURL ?? "https://api.github.com")
    }

    public var findings: [ProviderFinding] {
        [
            ProviderFinding(
                .ok, "github", "GitHub OAuth app \(clientID) at \(baseURL): authorization codes with PKCE are accepted, in the app and in the browser flow")
        ]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider { GitHubProvider(module: self, context: context) }

    /// A made-up code at GitHub's token endpoint: `bad_verification_code` means GitHub accepted the client.
    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        let provider = GitHubProvider(module: self, context: context)
        let outcome: Result<Void, LatchkeyError>
        do {
            let body = try await provider.calls.postForm(
                baseURL + "/login/oauth/access_token",
                [("client_id", clientID), ("client_secret", clientSecret.revealed), ("code", "latchkey-doctor-invalid-code")], operation: "doctor")
            _ = try GitHubProvider.accessToken(in: body)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        return [.clientProbe(Self.name, Self.displayName, outcome)]
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let clientID = clientIDs.first ?? ""
        return ["clientId": clientID, "clientSecret": clientID + "-secret", "baseUrl": baseURL, "apiUrl": baseURL + "/api"]
    }
}

struct GitHubProvider: IdentityProvider {
    let module: GitHubModule
    let calls: ProviderCalls
    let timeSource: TimeSource

    init(module: GitHubModule, context: ProviderContext) {
        self.module = module
        timeSource = context.timeSource
        calls = ProviderCalls(
            provider: GitHubModule.name, displayName: GitHubModule.displayName, transport: context.transport, timeout: module.requestTimeout,
            observer: context.observer)
    }

    var name: String { GitHubModule.name }
    var displayName: String { GitHubModule.displayName }
    var signsInWithBrowser: Bool { true }
    var acceptedCredentials: String { "{authorizationCode, codeVerifier, redirectUri}" }
    var credentialKinds: Set<CredentialKind> { [.authorizationCode] }

    func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart? {
        BrowserSignInStart(
            url: url(
                module.baseURL + "/login/oauth/authorize",
                query: [("client_id", module.clientID), ("scope", "read:user user:email")] + request.codeFlowParameters))
    }

    func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn {
        let (code, verifier) = try credential.codeWithVerifier(GitHubModule.displayName)
        var fields = [
            ("client_id", module.clientID), ("client_secret", module.clientSecret.revealed), ("code", code), ("code_verifier", verifier),
        ]
        if let redirectURI = credential.redirectURI { fields.append(("redirect_uri", redirectURI)) }
        let body = try await calls.postForm(module.baseURL + "/login/oauth/access_token", fields, operation: "code_exchange")
        let accessToken = try Self.accessToken(in: body)
        return ProviderSignIn(identity: try await identity(accessToken), grant: accessToken)
    }

    /// GitHub answers a refused code with 200 and an `error` in the body.
    static func accessToken(in body: [UInt8]) throws(LatchkeyError) -> String {
        struct Answer: Decodable {
            let access_token: String?
            let error: String?
        }
        guard let answer = try? JSONDecoder().decode(Answer.self, from: Data(body)) else {
            throw LatchkeyError(.invalidProviderResponse, "GitHub's token endpoint answered 200 with a body Latchkey cannot read")
        }
        switch answer.error {
        case nil:
            guard let token = answer.access_token, !token.isEmpty else {
                throw LatchkeyError(.invalidProviderResponse, "GitHub's token answer has no access_token")
            }
            return token
        case "bad_verification_code":
            throw LatchkeyError(
                .invalidGrant,
                "GitHub refused the authorization code: it is unknown, expired or already used, or the code verifier does not match the authorization request")
        case "redirect_uri_mismatch":
            throw LatchkeyError(.invalidGrant, "GitHub refused the code: redirectUri is not the one the code was issued to")
        case "incorrect_client_credentials":
            throw LatchkeyError(.invalidClient, "GitHub did not accept the client id or secret; check the github.clientId and github.clientSecret settings")
        case .some(let code):
            throw LatchkeyError(.invalidRequest, "GitHub refused the code exchange: \(code.prefix(64))")
        }
    }

    private func identity(_ accessToken: String) async throws(LatchkeyError) -> VerifiedIdentity {
        struct User: Decodable {
            let id: Int64
            let login: String
            let name: String?
            let email: String?
        }
        struct Email: Decodable {
            let email: String
            let primary: Bool
            let verified: Bool
        }
        let user = try calls.decode(User.self, try await calls.send(api("/user", accessToken), operation: "account", bearer: true), what: "GET /user")
        // Without the user:email scope (the user may untick it), /user/emails is refused: no verified address then.
        let emails = try? calls.decode(
            [Email].self, try await calls.send(api("/user/emails", accessToken), operation: "account", bearer: true), what: "GET /user/emails")
        let primary = emails?.first { $0.primary && $0.verified }
        return VerifiedIdentity(
            issuer: module.baseURL, subject: String(user.id), audience: module.clientID, checkedAt: timeSource.now,
            email: primary?.email ?? user.email, emailVerified: primary != nil ? true : (user.email == nil ? nil : false), name: user.name ?? user.login)
    }

    private func api(_ path: String, _ accessToken: String) -> OutboundRequest {
        OutboundRequest(
            url: module.apiURL + path,
            headers: [
                ("Authorization", "Bearer \(accessToken)"), ("Accept", "application/vnd.github+json"), ("X-GitHub-Api-Version", "2022-11-28"),
                ("User-Agent", "Latchkey"),
            ], timeout: module.requestTimeout)
    }

    /// `/applications/{client_id}/…` with the app's Basic credentials and the user's token in the body.
    private func application(_ method: String, _ path: String, token: String) -> OutboundRequest {
        let basic = Data("\(module.clientID):\(module.clientSecret.revealed)".utf8).base64EncodedString()
        let body = (try? JSONSerialization.data(withJSONObject: ["access_token": token])) ?? Data()
        var segment = CharacterSet.urlPathAllowed
        segment.remove("/")
        let clientID = module.clientID.addingPercentEncoding(withAllowedCharacters: segment) ?? module.clientID
        return OutboundRequest(
            method: method, url: module.apiURL + "/applications/\(clientID)\(path)",
            headers: [
                ("Authorization", "Basic \(basic)"), ("Accept", "application/vnd.github+json"), ("Content-Type", "application/json"),
                ("X-GitHub-Api-Version", "2022-11-28"), ("User-Agent", "Latchkey"),
            ], body: Array(body), timeout: module.requestTimeout)
    }

    func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            _ = try await calls.send(application("POST", "/token", token: refreshToken), operation: "refresh_validation", gone: [404])
            return .valid
        } catch {
            return error.code == .invalidGrant ? .revoked : .unreachable(error.errorCode)
        }
    }

    /// Revokes the whole grant (every token the user gave this app), as deleting the account should.
    func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        _ = try await calls.send(application("DELETE", "/grant", token: refreshToken), operation: "revocation", gone: [404])
    }
}
