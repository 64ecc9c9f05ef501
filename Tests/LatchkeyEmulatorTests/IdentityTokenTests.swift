import Crypto
import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Emulator: identity tokens and keys")
struct EmulatorIdentityTokenTests {
    func claims(_ token: String) throws -> [String: Any] { jsonSegment(token.split(separator: ".")[1]) }

    @Test("native tokens look like Apple's: sub shape, string booleans, real_user_status, verbatim nonce, c_hash")
    func nativeToken() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser(hideMyEmail: true, realUserStatus: 1)
            #expect(sub.wholeMatch(of: /\d{6}\.[0-9a-f]{32}\.\d{4}/) != nil)
            let nonce = sha256Hex("raw-nonce")
            let signIn = try await harness.nativeSignIn(sub: sub, nonce: nonce)
            let claims = try claims(signIn.identityToken)
            #expect(claims["iss"] as? String == "https://appleid.apple.com")
            #expect(claims["nonce"] as? String == nonce)
            #expect(claims["email_verified"] as? String == "true")
            #expect(claims["is_private_email"] as? String == "true")
            #expect((claims["email"] as? String)?.hasSuffix("@privaterelay.appleid.com") == true)
            #expect(claims["real_user_status"] as? Int == 1)
            #expect(claims["nonce_supported"] as? Bool == true)
            #expect((claims["exp"] as! Int) - (claims["iat"] as! Int) == 600)
            let identity = try await harness.verifier.verify(signIn.identityToken, expecting: .init(rawNonce: "raw-nonce", authorizationCode: signIn.code))
            #expect(identity.subject == sub)
            #expect(identity.realUserStatus == .unknown)
        }
    }

    @Test("a Hide My Email address can be at private.icloud.com, where Apple also issues them; another domain is refused")
    func relayDomains() async throws {
        try await EmulatorHarness.with { harness in
            let user = try await harness.createUserAnswer(["hideMyEmail": true, "relayDomain": "private.icloud.com"])
            let sub = try #require(user["sub"] as? String)
            let claims = try claims(try await harness.nativeSignIn(sub: sub, nonce: sha256Hex("raw-nonce")).identityToken)
            #expect((claims["email"] as? String)?.hasSuffix("@private.icloud.com") == true, "\(claims["email"] ?? "none")")
            #expect(claims["is_private_email"] as? String == "true")
            let refused = try await harness.send("POST", "/emulator/users", json: ["hideMyEmail": true, "relayDomain": "icloud.com"])
            #expect(refused.status == 400, "\(refused.text)")
        }
    }

    @Test("booleans as JSON booleans and a longer lifetime are configurable")
    func configurable() async throws {
        var configuration = EmulatorHarness.configuration()
        configuration.booleanStyle = .booleans
        configuration.identityTokenLifetime = 86_400
        try await EmulatorHarness.with(configuration) { harness in
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            let claims = try claims(signIn.identityToken)
            #expect(claims["email_verified"] as? Bool == true)
            #expect(claims["is_private_email"] as? Bool == false)
            #expect((claims["exp"] as! Int) - (claims["iat"] as! Int) == 86_400)
        }
    }

    @Test("the first authorization shares name and e-mail, later ones do not; no scopes share nothing")
    func firstAuthorization() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser(givenName: "Jane", familyName: "Appleseed")
            let first = try await harness.nativeSignIn(sub: sub)
            let name = try #require(first.user?["name"] as? [String: Any])
            #expect(name["firstName"] as? String == "Jane")
            #expect(first.user?["email"] as? String == "jane@example.com")
            #expect(try await harness.nativeSignIn(sub: sub).user == nil)
            // The Services ID belongs to the same team: still not a first authorization.
            #expect(try await harness.nativeSignIn(sub: sub, clientID: Fixtures.servicesID).user == nil)
            let quiet = try await harness.createUser(email: "quiet@example.com")
            let none = try await harness.nativeSignIn(sub: quiet, scopes: [])
            #expect(none.user == nil)
            #expect(try claims(none.identityToken)["email"] == nil)
        }
    }

    @Test("key rotation keeps the previous key published, so earlier tokens still verify")
    func rotation() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            let before = try await harness.nativeSignIn(sub: sub)
            _ = try await harness.verifier.verify(before.identityToken)
            let oldKid = try await harness.send("GET", "/auth/keys").json["keys"].flatMap { ($0 as? [[String: Any]])?.first?["kid"] as? String }
            #expect(try await harness.send("POST", "/emulator/keys/rotate").status == 200)
            let keys = (try await harness.send("GET", "/auth/keys").json["keys"] as? [[String: Any]]) ?? []
            #expect(keys.count == 2)
            #expect(keys.contains { $0["kid"] as? String == oldKid })
            let after = try await harness.nativeSignIn(sub: sub)
            _ = try await harness.verifier.verify(before.identityToken)
            _ = try await harness.verifier.verify(after.identityToken)
            #expect(harness.keys.fetchCount == 2)
        }
    }

    @Test("discovery describes the emulator's endpoints; keys are cacheable RS256 JWKs")
    func discovery() async throws {
        try await EmulatorHarness.with { harness in
            let discovery = try await harness.send("GET", "/.well-known/openid-configuration").json
            #expect(discovery["issuer"] as? String == "https://appleid.apple.com")
            #expect(discovery["token_endpoint"] as? String == harness.emulator.baseURL + "/auth/token")
            #expect(discovery["token_endpoint_auth_methods_supported"] as? [String] == ["client_secret_post"])
            #expect(discovery["code_challenge_methods_supported"] == nil)
            let keys = try await harness.send("GET", "/auth/keys")
            #expect(keys.headers["cache-control"]?.contains("max-age") == true)
            let key = try #require((keys.json["keys"] as? [[String: Any]])?.first)
            #expect(Set(key.keys) == ["kty", "kid", "use", "alg", "n", "e"])
            #expect(key["e"] as? String == "AQAB")
        }
    }

    @Test("the clock offset moves token times")
    func clock() async throws {
        try await EmulatorHarness.with { harness in
            _ = try await harness.send("POST", "/emulator/clock", json: ["offsetSeconds": -7200])
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            await #expect(throws: LatchkeyError(.tokenExpired, "")) { _ = try await harness.verifier.verify(signIn.identityToken) }
        }
    }
}
