public import Configuration
public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// Sign in with Slack: OpenID Connect (issuer `https://slack.com`, discovery, RS256 keys) with PKCE, whose token
/// endpoint is a Slack Web API method (`openid.connect.token`): it answers every refusal with HTTP 200 and
/// `{"ok": false, "error": …}`, which ``SlackTokenErrors`` turns into the RFC 6749 answer the OpenID Connect provider
/// reads. Slack's discovery names no revocation endpoint, and without token rotation it issues no refresh token, so
/// there is no grant to validate or revoke. See docs/providers.md.
public struct SlackModule: ProviderModule {
    public static let name = "slack"
    public static let displayName = "Slack"
    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        TokenVerification(
            policy: IdentityTokenPolicy(providerName: displayName, issuers: ["https://slack.com"], audiences: audiences, leeway: leeway),
            keysURL: "https://slack.com/openid/connect/keys")
    }
    public static let settings = [
        ProviderSettingDescription("clientIds", "the Slack app's client id (the ID tokens' aud)"),
        ProviderSettingDescription("clientSecret / clientSecretFile", "its client secret (secret): openid.connect.token needs it", default: "none"),
        ProviderSettingDescription("issuer", "Slack's issuer; its discovery document gives the endpoints", default: "https://slack.com"),
    ]

    public var clientIDs: [String]
    public var clientSecret: Secret?
    public var issuer = "https://slack.com"

    public init(clientIDs: [String], clientSecret: String? = nil, issuer: String = "https://slack.com") {
        self.clientIDs = clientIDs
        self.clientSecret = clientSecret.map { Secret($0) }
        self.issuer = issuer
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let secret = try config.settingSecret("clientSecret", fileKey: "clientSecretFile", fullFileKey: "slack.clientSecretFile")
        let issuer = try config.settingURL("issuer", fullKey: "slack.issuer")
        guard
            let clientIDs = try config.settingRequiredList(
                "clientIds", fullKey: "slack.clientIds", othersSet: secret != nil || issuer != nil, what: "the Slack app's client id")
        else { return nil }
        self.init(clientIDs: clientIDs, clientSecret: secret, issuer: issuer ?? "https://slack.com")
    }

    public var findings: [ProviderFinding] {
        var findings = [ProviderFinding(.ok, "slack", "Sign in with Slack, client ids \(clientIDs.joined(separator: ", ")): ID tokens and codes")]
        if clientSecret == nil {
            findings.append(ProviderFinding(.warning, "slack.clientSecret", "not set: openid.connect.token refuses codes without it; only ID tokens sign in"))
        }
        return findings
    }

    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        [await .openIDPreflight(makeProvider(context), Self.displayName, settings: "slack.issuer")]
    }

    public func makeProvider(_ context: ProviderContext) -> any IdentityProvider {
        var configuration = OpenIDProviderConfiguration.generic(
            name: Self.name, displayName: Self.displayName, issuer: issuer, clientIDs: clientIDs, clientSecret: clientSecret?.revealed)
        configuration.policy.configurationKey = Self.name
        configuration.policy.audienceHint = "Slack puts the app's client id in aud; add it to slack.clientIds"
        return OpenIDProvider(
            configuration: configuration, transport: SlackTokenErrors(context.transport), timeSource: context.timeSource, logger: context.logger,
            observer: context.observer)
    }

    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        let clientID = clientIDs.first ?? ""
        return ["clientIds": clientIDs.joined(separator: ","), "clientSecret": clientID + "-secret", "issuer": baseURL]
    }
}

/// Turns a Slack Web API refusal (`200 {"ok": false, "error": "invalid_code"}`) into an RFC 6749 one
/// (`400 {"error": "invalid_grant"}`), so the OpenID Connect provider reads Slack's token endpoint like any other.
package struct SlackTokenErrors: HTTPTransport {
    let inner: any HTTPTransport

    package init(_ inner: any HTTPTransport) { self.inner = inner }

    package func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
        let response = try await inner.send(request)
        struct Answer: Decodable {
            let ok: Bool?
            let error: String?
        }
        guard response.status == 200, let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body)), answer.ok == false else {
            return response
        }
        let code =
            switch answer.error {
            case "invalid_code", "code_already_used", "bad_redirect_uri", "invalid_refresh_token", "invalid_code_verifier": "invalid_grant"
            case "bad_client_secret", "invalid_client_id": "invalid_client"
            default: "invalid_request"
            }
        return OutboundResponse(status: 400, headers: response.headers, body: Array(#"{"error":"\#(code)"}"#.utf8))
    }
}
