public import Configuration
public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
public import Logging

/// Facebook Login: Limited Login ID tokens (iOS) verified locally, and classic user access tokens checked
/// with `debug_token` against the app's own token, so a token issued to another app is refused.
public struct FacebookConfiguration: Sendable {
    public var appID: String
    /// Needed for classic access tokens (`debug_token` takes `{app-id}|{app-secret}`).
    public var appSecret: Secret?
    public var graphURL = "https://graph.facebook.com"
    /// Which `iss` Limited Login tokens carry is not documented firmly; both seen values are accepted by default.
    public var limitedLoginIssuers: Set<String> = ["https://www.facebook.com", "https://limited.facebook.com"]
    public var jwksURL = "https://limited.facebook.com/.well-known/oauth/openid/jwks/"
    public var nonceMatching: NonceMatching = .hashed
    public var requireNonce = false
    public var requestTimeout: Duration = .seconds(10)
    /// Set by ``init(reading:)`` for settings that weaken something.
    public private(set) var warnings: [String] = []

    public init(appID: String, appSecret: String? = nil) {
        self.appID = appID
        self.appSecret = appSecret.map { Secret($0) }
    }
}

public struct FacebookProvider: IdentityProvider {
    public let configuration: FacebookConfiguration
    private let keys: JWKSCache
    private let verifier: IdentityTokenVerifier
    private let calls: ProviderCalls
    private let timeSource: TimeSource

    public init(
        configuration: FacebookConfiguration, transport: any HTTPTransport, timeSource: TimeSource = .system, logger: Logger? = nil,
        observer: ProviderCallObserver? = nil
    ) {
        self.configuration = configuration
        self.timeSource = timeSource
        self.keys = JWKSCache(url: configuration.jwksURL, transport: transport, timeSource: timeSource, logger: logger)
        let policy = IdentityTokenPolicy(
            providerName: "Facebook", issuers: configuration.limitedLoginIssuers, audiences: [configuration.appID], nonceMatching: configuration.nonceMatching,
            audienceHint: "Limited Login tokens carry the Facebook app id; set facebook.appId to it", requireNonce: configuration.requireNonce,
            configurationKey: "facebook")
        self.verifier = IdentityTokenVerifier(policy: policy, keys: keys, timeSource: timeSource)
        self.calls = ProviderCalls(
            provider: "facebook", displayName: "Facebook", transport: transport, timeout: configuration.requestTimeout, observer: observer)
    }

    public var name: String { "facebook" }
    public var displayName: String { "Facebook" }
    public var acceptedCredentials: String { "{idToken, rawNonce?} (Limited Login) or {accessToken} (classic login)" }
    public var credentialKinds: Set<CredentialKind> { [.idToken, .accessToken] }
    public var keyCaches: [JWKSCache] { [keys] }

    public func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn {
        if let idToken = credential.idToken, !idToken.isEmpty {
            let identity = try await verifier.verify(idToken, expecting: .signIn(rawNonce: credential.rawNonce))
            return ProviderSignIn(identity: identity, singleUseToken: idToken)
        }
        guard let accessToken = credential.accessToken, !accessToken.isEmpty else {
            throw LatchkeyError(.malformedRequest, "send idToken (Limited Login) or accessToken (classic login)")
        }
        let userID = try await checkedUserID(accessToken)
        struct Me: Decodable {
            let id: String
            let name: String?
            let email: String?
        }
        let me = try calls.decode(
            Me.self,
            try await calls.send(
                OutboundRequest(url: graph("/me", [("fields", "id,name,email"), ("access_token", accessToken)]), timeout: configuration.requestTimeout),
                operation: "profile", bearer: true),
            what: "Graph API")
        guard me.id == userID else { throw LatchkeyError(.invalidProviderResponse, "Facebook's /me names another user than debug_token") }
        let identity = VerifiedIdentity(
            issuer: "https://www.facebook.com", subject: userID, audience: configuration.appID, checkedAt: timeSource.now, email: me.email,
            emailVerified: me.email == nil ? nil : true, name: me.name)
        return ProviderSignIn(identity: identity, grant: accessToken)
    }

    /// Asks `debug_token` about a user access token: valid, issued to this app, not expired.
    private func checkedUserID(_ accessToken: String) async throws(LatchkeyError) -> String {
        guard let secret = configuration.appSecret else {
            throw LatchkeyError(.invalidConfiguration, "classic Facebook access tokens need facebook.appSecret (debug_token checks them with the app's token)")
        }
        struct Answer: Decodable {
            struct Data: Decodable {
                let app_id: String?
                let is_valid: Bool
                let user_id: String?
                let expires_at: Int?
                let type: String?
            }
            let data: Data
        }
        let url = graph("/debug_token", [("input_token", accessToken), ("access_token", "\(configuration.appID)|\(secret.revealed)")])
        let body: [UInt8]
        do throws(LatchkeyError) {
            body = try await calls.send(OutboundRequest(url: url, timeout: configuration.requestTimeout), operation: "token_check", bearer: true)
        } catch  where error.code == .invalidGrant {
            // debug_token answers 200 with `is_valid: false` for a user token it refuses; an error status means it
            // refused the app's own token: the operator's settings, never a reason to end users' sessions.
            throw LatchkeyError(.invalidClient, "Facebook refused this app's token in debug_token; check facebook.appId and facebook.appSecret")
        }
        let answer = try calls.decode(Answer.self, body, what: "debug_token")
        let data = answer.data
        guard data.is_valid else { throw LatchkeyError(.invalidGrant, "Facebook says the access token is not valid (expired, revoked or malformed)") }
        guard data.app_id == configuration.appID else {
            throw LatchkeyError(.unexpectedAudience, "the access token was issued to another Facebook app, not \(configuration.appID) (facebook.appId)")
        }
        if let type = data.type, type != "USER" { throw LatchkeyError(.invalidGrant, "the access token is a \(type.prefix(16)) token, not a user token") }
        if let expiresAt = data.expires_at, expiresAt != 0, Date(timeIntervalSince1970: TimeInterval(expiresAt)) <= timeSource.now {
            throw LatchkeyError(.tokenExpired, "the Facebook access token has expired")
        }
        guard let userID = data.user_id, !userID.isEmpty else { throw LatchkeyError(.invalidProviderResponse, "debug_token named no user") }
        return userID
    }

    public func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            _ = try await checkedUserID(refreshToken)
            return .valid
        } catch {
            return [.invalidGrant, .tokenExpired].contains(error.code) ? .revoked : .unreachable(error.errorCode)
        }
    }

    public func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        _ = try await calls.send(
            OutboundRequest(method: "DELETE", url: graph("/me/permissions", [("access_token", refreshToken)]), timeout: configuration.requestTimeout),
            operation: "revocation", bearer: true)
    }

    private func graph(_ path: String, _ query: [(String, String)]) -> String {
        configuration.graphURL + path + "?" + formURLEncoded(query)
    }
}

/// Facebook as a provider module: its settings under `facebook.*`.
extension FacebookConfiguration: ProviderModule {
    public static let name = "facebook"
    public static let displayName = "Facebook"
    /// Limited Login's ID tokens, as the server checks them (its default issuers and nonce matching).
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        let facebook = FacebookConfiguration(appID: audiences.first ?? "")
        let policy = IdentityTokenPolicy(
            providerName: "Facebook", issuers: facebook.limitedLoginIssuers, audiences: audiences, leeway: leeway, nonceMatching: facebook.nonceMatching,
            requireNonce: false)
        return TokenVerification(policy: policy, keysURL: facebook.jwksURL)
    }
    public static let settings = [
        ProviderSettingDescription("appId", "the Facebook app id (Limited Login tokens' aud)"),
        ProviderSettingDescription("appSecret / appSecretFile", "the app secret (secret): debug_token needs it for classic access tokens", default: "none"),
        ProviderSettingDescription("graphUrl", "the Graph API", default: "https://graph.facebook.com"),
        ProviderSettingDescription("jwksUrl", "Limited Login's keys", default: "https://limited.facebook.com/.well-known/oauth/openid/jwks/"),
        ProviderSettingDescription("issuers", "accepted iss values", default: "https://www.facebook.com, https://limited.facebook.com"),
        ProviderSettingDescription("nonceMatching, requireNonce", "as for Apple", default: "hashed, false"),
    ]

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        guard let appID = config.string(forKey: "appId") else { return nil }
        self.init(appID: appID, appSecret: try config.settingSecret("appSecret", fileKey: "appSecretFile", fullFileKey: "facebook.appSecretFile"))
        graphURL = try config.settingURL("graphUrl", fullKey: "facebook.graphUrl") ?? graphURL
        jwksURL = try config.settingURL("jwksUrl", fullKey: "facebook.jwksUrl", isBase: false) ?? jwksURL
        if let issuers = config.settingList("issuers") { limitedLoginIssuers = Set(issuers) }
        let nonces = try config.settingNonces("", fullPrefix: "facebook.", requireByDefault: false)
        (nonceMatching, requireNonce) = (nonces.matching, nonces.required)
        warnings = nonces.warning.map { [$0] } ?? []
    }

    public var findings: [ProviderFinding] {
        var findings = [ProviderFinding(.ok, "facebook", "Facebook app \(appID): Limited Login ID tokens are accepted")]
        if appSecret == nil {
            findings.append(
                ProviderFinding(
                    .warning, "facebook.appSecret",
                    "not set: classic-login access tokens are refused; set facebook.appSecret (or facebook.appSecretFile) so debug_token can check them, or use Limited Login only"
                ))
        }
        return findings
    }

    /// Limited Login's keys, as sign-ins read them.
    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        do {
            let keys = try await JWKSCache(url: jwksURL, transport: context.transport, timeSource: context.timeSource).refresh()
            return [ProviderFinding(.ok, "live", "Facebook: Limited Login keys read, \(keys.keyIDs.count) signing key(s)")]
        } catch {
            return [ProviderFinding(.error, "live", "Facebook: \(error.reason); check facebook.jwksUrl and network access")]
        }
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        FacebookProvider(
            configuration: self, transport: context.transport, timeSource: context.timeSource, logger: context.logger, observer: context.observer)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let clientID = clientIDs.first ?? ""
        return ["appId": clientID, "appSecret": clientID + "-secret", "graphUrl": baseURL, "jwksUrl": baseURL + "/.well-known/oauth/openid/jwks/"]
    }
}
