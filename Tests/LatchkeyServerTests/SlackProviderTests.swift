import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Sign in with Slack: OpenID Connect whose token endpoint answers refusals as `200 {"ok": false}`.
@Suite("Server: Slack")
struct SlackProviderTests {
    @Test("slack.* settings: client ids, the secret's absence is a warning, a wrong issuer URL is named")
    func settings() throws {
        let configuration = try ConfigurationTests.read(["slack.clientIds": "123.456"])
        let module = try #require(configuration.providerModules.first as? SlackModule)
        #expect(module.issuer == "https://slack.com" && module.clientIDs == ["123.456"])
        #expect(module.findings.contains { $0.level == .warning && $0.key == "slack.clientSecret" })
        #expect {
            try ConfigurationTests.read(["slack.clientIds": "1", "slack.issuer": "slack.com"])
        } throws: {
            ($0 as? LatchkeyError)?.reason.contains("slack.issuer") == true
        }
    }

    @Test("Slack's 200 {ok: false} refusals are read as RFC 6749 errors: a wrong client secret is invalid_client")
    func refusals() async throws {
        try await ServerHarness.with(configure: { configuration in
            configuration.providerModules = configuration.providerModules.map { module in
                guard var slack = module as? SlackModule else { return module }
                slack.clientSecret = Secret("not-the-secret")
                return slack
            }
        }) { harness in
            let subjects = try await ProviderEndToEndTests.newUser(harness)
            let answer = try await harness.post(
                "/v1/auth/slack", json: try await ProviderContractTests.body("slack", .authorizationCode, harness, subjects: subjects))
            #expect(answer.error == "invalid_client", "\(answer.text)")
        }
    }

    @Test("the translation leaves other answers alone")
    func translation() async throws {
        struct Fixed: HTTPTransport {
            let response: OutboundResponse
            func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse { response }
        }
        func through(_ status: Int, _ body: String) async throws -> OutboundResponse {
            try await SlackTokenErrors(Fixed(response: OutboundResponse(status: status, body: Array(body.utf8)))).send(OutboundRequest(url: "https://x"))
        }
        let refused = try await through(200, #"{"ok":false,"error":"bad_client_secret"}"#)
        #expect(refused.status == 400 && String(decoding: refused.body, as: UTF8.self) == #"{"error":"invalid_client"}"#)
        #expect(try await through(200, #"{"ok":false,"error":"invalid_code"}"#).body == Array(#"{"error":"invalid_grant"}"#.utf8))
        #expect(try await through(200, #"{"ok":true,"id_token":"x"}"#).status == 200)
        #expect(try await through(200, #"{"keys":[]}"#).status == 200)
        #expect(try await through(503, #"{"ok":false,"error":"x"}"#).status == 503)
    }
}
