import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Emulator: Google")
struct GoogleEmulatorTests {
    static let client = EmulatorHarness.googleClientID
    static let redirect = EmulatorHarness.redirectURI

    func code(_ harness: EmulatorHarness, challenge: String?, method: String? = "S256", email: String = "ann@corp.example") async throws -> String {
        var form: [(String, String)] = [
            ("client_id", Self.client), ("redirect_uri", Self.redirect), ("response_type", "code"), ("scope", "openid email profile"),
            ("state", "g-state"), ("nonce", "g-nonce"), ("email", email), ("action", "continue"),
        ]
        if let challenge { form.append(("code_challenge", challenge)) }
        if let method, challenge != nil { form.append(("code_challenge_method", method)) }
        let answer = try await harness.send("POST", "/google/o/oauth2/v2/auth", form: form)
        let location = try #require(answer.headers["location"])
        let items = URLComponents(string: location)?.queryItems ?? []
        #expect(items.first { $0.name == "state" }?.value == "g-state")
        return try #require(items.first { $0.name == "code" }?.value)
    }

    func exchange(_ harness: EmulatorHarness, code: String, verifier: String?) async throws -> EmulatorHarness.Answer {
        var form: [(String, String)] = [("client_id", Self.client), ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", Self.redirect)]
        if let verifier { form.append(("code_verifier", verifier)) }
        return try await harness.send("POST", "/google/token", form: form)
    }

    @Test("a wrong, missing or unexpected PKCE verifier is invalid_grant")
    func pkceRefusals() async throws {
        try await EmulatorHarness.with { harness in
            let verifier = PKCE.makeVerifier()
            let wrong = try await exchange(harness, code: try await code(harness, challenge: PKCE.challenge(for: verifier)), verifier: PKCE.makeVerifier())
            #expect(wrong.status == 400)
            #expect(wrong.json["error"] as? String == "invalid_grant")
            let missing = try await exchange(harness, code: try await code(harness, challenge: PKCE.challenge(for: verifier)), verifier: nil)
            #expect(missing.json["error"] as? String == "invalid_grant")
            let downgrade = try await exchange(harness, code: try await code(harness, challenge: nil), verifier: verifier)
            #expect(downgrade.json["error"] as? String == "invalid_grant")
            let unknownClient = try await harness.send(
                "POST", "/google/token", form: [("client_id", "nope"), ("grant_type", "authorization_code"), ("code", "x")])
            #expect(unknownClient.status == 401)
            #expect(unknownClient.json["error"] as? String == "invalid_client")
        }
    }

    @Test("S256 and plain PKCE without a client secret yield a Google-shaped ID token that verifies")
    func pkce() async throws {
        try await EmulatorHarness.with { harness in
            let verifier = PKCE.makeVerifier()
            let answer = try await exchange(harness, code: try await code(harness, challenge: PKCE.challenge(for: verifier)), verifier: verifier)
            #expect(answer.status == 200, "\(answer.text)")
            let idToken = try #require(answer.json["id_token"] as? String)
            // Written as Google writes it, slashes unescaped.
            let payload = String(decoding: base64URLDecoded(idToken.split(separator: ".")[1]), as: UTF8.self)
            #expect(payload.contains(#""iss":"https://accounts.google.com""#), "\(payload)")
            let google = JWKSCache(url: harness.emulator.googleBaseURL + "/oauth2/v3/certs", transport: AsyncHTTPClientTransport())
            let identity = try await IdentityTokenVerifier(policy: .google(clientIDs: [Self.client]), keys: google)
                .verify(idToken, expecting: .init(rawNonce: "g-nonce", accessToken: answer.json["access_token"] as? String))
            #expect(identity.emailVerified == true)
            #expect(identity.hostedDomain == "corp.example")
            #expect(identity.authorizedParty == Self.client)
            #expect(identity.subject.count == 21)

            let plain = try await exchange(harness, code: try await code(harness, challenge: verifier, method: "plain"), verifier: verifier)
            #expect(plain.status == 200)

            let refreshed = try await harness.send(
                "POST", "/google/token",
                form: [("client_id", Self.client), ("grant_type", "refresh_token"), ("refresh_token", answer.json["refresh_token"] as! String)])
            #expect(refreshed.json["id_token"] != nil)

            let info = try await harness.send("GET", "/google/tokeninfo?id_token=\(idToken)")
            #expect(info.json["email_verified"] as? String == "true")
            #expect(Int(info.json["exp"] as? String ?? "") != nil)
            #expect(try await harness.send("GET", "/google/tokeninfo?id_token=bogus").status == 400)
        }
    }

    @Test("discovery advertises PKCE and both grant types")
    func discovery() async throws {
        try await EmulatorHarness.with { harness in
            let discovery = try await harness.send("GET", "/google/.well-known/openid-configuration").json
            #expect(discovery["code_challenge_methods_supported"] as? [String] == ["plain", "S256"])
            #expect(discovery["issuer"] as? String == "https://accounts.google.com")
        }
    }
}
