import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyServer
import Testing

@Suite("Server: provider settings")
struct ProviderConfigurationTests {
    func reading(_ values: [String: String]) throws -> ServerConfiguration { try ConfigurationTests.read(values) }

    @Test("a built-in provider that is not configured answers 503 naming its settings, whichever it is; an unknown one 404 listing those configured")
    func notConfigured() async throws {
        try await RouterHarness.with(configure: { $0.apple = nil }) { harness in
            for (provider, settings) in [("apple", "apple.teamId, apple.keyId"), ("github", "github.clientId"), ("nonesuch", nil)] {
                let body = provider == "apple" ? #"{"identityToken":"x"}"# : #"{"idToken":"x"}"#
                let answer = try await harness.send("POST", "/v1/auth/\(provider)", body: body)
                guard let settings else {
                    #expect(answer.status == 404, "\(provider): \(answer.text)")
                    #expect(answer.error == "not_found")
                    #expect((answer.json["error_description"] as? String)?.contains("configured: google") == true, "\(answer.text)")
                    continue
                }
                #expect(answer.status == 503, "\(provider): \(answer.text)")
                #expect(answer.error == "temporarily_unavailable")
                #expect((answer.json["error_description"] as? String)?.contains(settings) == true, "\(answer.text)")
            }
            #expect(harness.providerCalls == 0)
        }
    }

    @Test("each provider is configured by its settings, with nonces optional by default outside Apple")
    func providers() throws {
        let configuration = try reading([
            "google.clientIds": "ios.apps.googleusercontent.com, web.apps.googleusercontent.com", "google.hostedDomains": "example.com",
            "google.requireNonce": "true",
            "microsoft.clientIds": "00000000-0000-0000-0000-000000000001", "microsoft.tenants": "consumers, 72f988bf-86f1-41af-91ab-2d7cd011db47",
            "oidc.providers": "okta", "oidc.okta.issuer": "https://example.okta.com", "oidc.okta.clientIds": "0oa1",
            "facebook.appId": "1234", "facebook.appSecret": "s", "dropbox.appKey": "k", "signup.mode": "invite",
        ])
        #expect(configuration.providerNames == ["google", "microsoft", "facebook", "dropbox", "okta"])
        let google = try #require(configuration.module(GoogleModule.self)?.configuration)
        #expect(google.policy.audiences == ["ios.apps.googleusercontent.com", "web.apps.googleusercontent.com"])
        #expect(google.policy.requireNonce)
        #expect(google.policy.nonceMatching == .hashed)
        let microsoft = try #require(configuration.module(MicrosoftModule.self)?.configuration)
        #expect(!microsoft.policy.requireNonce)
        #expect(microsoft.discoveryURL == "https://login.microsoftonline.com/common/v2.0/.well-known/openid-configuration")
        let okta = try #require(configuration.openIDProviders.first { $0.name == "okta" })
        #expect(okta.expectedIssuer == "https://example.okta.com")
        #expect(okta.discoveryURL == "https://example.okta.com/.well-known/openid-configuration")
        #expect(configuration.module(FacebookConfiguration.self)?.appID == "1234")
        #expect(configuration.module(DropboxConfiguration.self)?.acceptAccessTokens == false)
        #expect(configuration.signUp == .invite)
        #expect(configuration.warnings.isEmpty)
    }

    @Test(
        "bad provider settings are refused with the setting's name",
        arguments: [
            (["microsoft.clientIds": "x", "microsoft.tenants": "contoso"], "microsoft.tenants"),
            (["oidc.providers": "Okta!"], "oidc.providers"),
            (["oidc.providers": "okta"], "oidc.okta.issuer"),
            (["oidc.providers": "okta", "oidc.okta.issuer": "https://example.okta.com"], "oidc.okta.clientIds"),
            (["google.clientIds": "g", "oidc.providers": "google", "oidc.google.issuer": "https://x.example", "oidc.google.clientIds": "c"], "oidc.providers"),
            (["google.clientIds": "g", "google.nonceMatching": "sometimes"], "google.nonceMatching"),
            (["signup.mode": "closed"], "signup.mode"),
            (["dropbox.appKey": "k", "dropbox.acceptAccessTokens": "maybe"], "dropbox.acceptAccessTokens"),
        ])
    func refusals(values: [String: String], setting: String) throws {
        #expect {
            try reading(values)
        } throws: {
            ($0 as? LatchkeyError)?.reason.contains(setting) == true
        }
    }

    @Test("verbatim nonce matching is a warning for any provider")
    func weakNonceWarning() throws {
        let configuration = try reading(["google.clientIds": "g", "google.nonceMatching": "verbatim"])
        #expect(configuration.warnings.contains { $0.hasPrefix("google.nonceMatching is verbatim") })
    }

    @Test("Microsoft tenants: common takes any, organizations no personal accounts, consumers only them, GUIDs exactly")
    func microsoftTenants() throws {
        let work = "72f988bf-86f1-41af-91ab-2d7cd011db47"
        let personal = OpenIDProviderConfiguration.microsoftConsumersTenant
        func accepts(_ tenants: [String], _ tid: String?) -> Bool {
            var identity = VerifiedIdentity(issuer: "i", subject: "s", audience: "a", checkedAt: Date())
            identity.tenantID = tid
            return (try? OpenIDProviderConfiguration.microsoft(clientIDs: ["a"], tenants: tenants).checks(identity)) != nil
        }
        #expect(accepts(["common"], work) && accepts(["common"], personal))
        #expect(accepts(["organizations"], work) && !accepts(["organizations"], personal))
        #expect(!accepts(["consumers"], work) && accepts(["consumers"], personal))
        #expect(accepts([work], work) && !accepts([work], "11111111-2222-3333-4444-555555555555"))
        #expect(!accepts(["common"], "not-a-guid") && !accepts(["common"], nil))
    }

    @Test("Google: azp must be a configured client id when present; hd must be allowed when the list is set")
    func googleChecks() throws {
        func passes(azp: String?, hd: String?, hostedDomains: [String] = []) -> Bool {
            var identity = VerifiedIdentity(issuer: "https://accounts.google.com", subject: "s", audience: "web", checkedAt: Date())
            identity.authorizedParty = azp
            identity.hostedDomain = hd
            return (try? OpenIDProviderConfiguration.google(clientIDs: ["web", "ios"], hostedDomains: hostedDomains).checks(identity)) != nil
        }
        #expect(passes(azp: nil, hd: nil))
        #expect(passes(azp: "ios", hd: nil))
        #expect(!passes(azp: "someone-else", hd: nil))
        #expect(passes(azp: nil, hd: "example.com", hostedDomains: ["example.com"]))
        #expect(!passes(azp: nil, hd: "other.com", hostedDomains: ["example.com"]))
        #expect(!passes(azp: nil, hd: nil, hostedDomains: ["example.com"]))
    }
}

@Suite("Server: every provider module's settings are documented")
struct ProviderModuleDocumentationTests {
    @Test("docs/configuration.md names each setting of each module in ProviderModules.all")
    func documented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        #expect(ProviderModules.all.allSatisfy { !$0.settings.isEmpty })
        for module in ProviderModules.all {
            for setting in module.settings {
                for key in setting.key.components(separatedBy: CharacterSet(charactersIn: "/,")).map({ $0.trimmingCharacters(in: .whitespaces) })
                where !key.hasSuffix("File") {
                    #expect(
                        text.contains("`\(module.name).\(key)`") || text.contains("`<provider>.\(key)`"),
                        "docs/configuration.md does not name \(module.name).\(key)")
                }
            }
        }
    }
}
