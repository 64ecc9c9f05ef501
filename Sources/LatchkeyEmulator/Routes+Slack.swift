import Foundation
import Hummingbird

extension CodeRecord.Provider {
    static let slack = Self("slack")
}

extension ProviderProfile {
    /// Sign in with Slack at `/slack`, its own issuer.
    static let slack: ProviderProfile = {
        var profile = ProviderProfile(provider: .slack, displayName: "Slack") { $0.addSlackRoutes(to: $1) }
        profile.subject = { $0.slack }
        profile.ownIssuerPath = true
        profile.keyID = Identifiers.googleKeyID
        return profile
    }()
}

/// Sign in with Slack's stand-in at `/slack` (its issuer here): OpenID Connect discovery without a revocation endpoint,
/// keys at `/openid/connect/keys`, `/openid/connect/authorize`, and `/api/openid.connect.token`, a Slack Web API method:
/// every answer is HTTP 200 with `ok`, and a refusal is `{"ok": false, "error": …}` in Slack's words. No refresh token
/// without token rotation.
extension Emulator {
    func addSlackRoutes(to router: Router<BasicRequestContext>) {
        addOpenIDIssuerRoutes(
            .slack, authorize: "/openid/connect/authorize", token: "/api/openid.connect.token", keys: "/openid/connect/keys", revocation: nil,
            codeChallengeMethods: ["S256"], to: router)

        router.post("/slack/api/openid.connect.token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                do throws(ProviderOAuthError) {
                    var answer = try await state.providerToken(.slack, form, issuer: request.baseURL + "/slack")
                    answer["refresh_token"] = nil
                    answer["ok"] = .bool(true)
                    return HTTPAnswer.json(answer, noStore: true)
                } catch {
                    let slackError =
                        switch error.code {
                        case "invalid_client": form["client_secret"] == nil ? "invalid_client_id" : "bad_client_secret"
                        case "invalid_grant": error.description.contains("verifier") ? "invalid_code_verifier" : "invalid_code"
                        default: "invalid_arguments"
                        }
                    return HTTPAnswer.json(["ok": Claim.bool(false), "error": .string(slackError)])
                }
            }
        }
    }
}
