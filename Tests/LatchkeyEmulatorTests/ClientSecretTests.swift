import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

/// Apple's client-secret rules, negative cases first: every bad secret is `invalid_client`.
@Suite("Emulator: client secret checks")
struct EmulatorClientSecretTests {
    struct Claims: Encodable {
        var iss = Fixtures.teamID
        var iat = Int(Date().timeIntervalSince1970)
        var exp = Int(Date().timeIntervalSince1970) + 600
        var aud = "https://appleid.apple.com"
        var sub = Fixtures.bundleID
    }

    static var key: P256.Signing.PrivateKey { try! P256.Signing.PrivateKey(pemRepresentation: Fixtures.p8) }

    static func secret(_ claims: Claims = Claims(), keyID: String = Fixtures.keyID, key: P256.Signing.PrivateKey = key) -> String {
        try! JWSSigner.es256(claims, keyID: keyID, key: key)
    }

    static func derSigned(_ claims: Claims = Claims()) -> String {
        let raw = secret(claims)
        let parts = raw.split(separator: ".")
        let signature = try! P256.Signing.ECDSASignature(rawRepresentation: base64URLDecoded(parts[2]))
        return "\(parts[0]).\(parts[1]).\(base64URL(Array(signature.derRepresentation)))"
    }

    static func withHeader(_ header: String) -> String {
        let raw = secret()
        let parts = raw.split(separator: ".")
        let input = base64URL(Array(header.utf8)) + "." + parts[1]
        let signature = try! key.signature(for: Array(input.utf8))
        return input + "." + base64URL(Array(signature.rawRepresentation))
    }

    static let bad: [(String, String)] = {
        let now = Int(Date().timeIntervalSince1970)
        var wrongIssuer = Claims(); wrongIssuer.iss = "OTHERTEAM1"
        var wrongAudience = Claims(); wrongAudience.aud = "https://appleid.apple.com/"
        var wrongSubject = Claims(); wrongSubject.sub = Fixtures.servicesID
        var expired = Claims(); expired.iat = now - 7200; expired.exp = now - 3600
        var tooLong = Claims(); tooLong.exp = now + 15_777_000 + 86_400
        return [
            ("unknown kid", secret(keyID: "OTHERKEY00")),
            ("iss is not the team", secret(wrongIssuer)),
            ("aud is not Apple's", secret(wrongAudience)),
            ("sub is not the client id", secret(wrongSubject)),
            ("expired", secret(expired)),
            ("expires more than six months ahead", secret(tooLong)),
            ("DER signature", derSigned()),
            ("signed by another key", secret(key: P256.Signing.PrivateKey())),
            ("alg ES384", withHeader(#"{"alg":"ES384","kid":"\#(Fixtures.keyID)"}"#)),
            ("alg none", withHeader(#"{"alg":"none","kid":"\#(Fixtures.keyID)"}"#)),
            ("not a JWT", "not-a-jwt"),
        ]
    }()

    @Test("bad client secrets are invalid_client", arguments: bad)
    func badSecrets(name: String, secret: String) async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            let signIn = try await harness.nativeSignIn(sub: sub)
            let answer = try await harness.send(
                "POST", "/auth/token", form: try harness.tokenForm(secret: secret, [("grant_type", "authorization_code"), ("code", signIn.code)]))
            #expect(answer.status == 400, "\(name)")
            #expect(answer.text == #"{"error":"invalid_client"}"#, "\(name)")
        }
    }

    @Test("a missing client secret or client id is invalid_request; an unknown client id is invalid_client")
    func missing() async throws {
        try await EmulatorHarness.with { harness in
            let noSecret = try await harness.send(
                "POST", "/auth/token", form: [("client_id", Fixtures.bundleID), ("grant_type", "authorization_code"), ("code", "x")])
            #expect(noSecret.json["error"] as? String == "invalid_request")
            let noClient = try await harness.send("POST", "/auth/token", form: [("client_secret", Self.secret()), ("grant_type", "authorization_code")])
            #expect(noClient.json["error"] as? String == "invalid_request")
            let unknown = try await harness.send(
                "POST", "/auth/token", form: try harness.tokenForm(clientID: "com.unknown", secret: Self.secret(), [("grant_type", "refresh_token")]))
            #expect(unknown.json["error"] as? String == "invalid_client")
        }
    }

    @Test("the exact six-month limit and Latchkey's own secrets are accepted")
    func accepted() async throws {
        try await EmulatorHarness.with { harness in
            var claims = Claims()
            claims.exp = Int(Date().timeIntervalSince1970) + 15_777_000 - 5
            let sub = try await harness.createUser()
            let signIn = try await harness.nativeSignIn(sub: sub)
            let answer = try await harness.send(
                "POST", "/auth/token", form: try harness.tokenForm(secret: Self.secret(claims), [("grant_type", "authorization_code"), ("code", signIn.code)]))
            #expect(answer.status == 200, "\(answer.text)")
        }
    }

    @Test("the request log says why a secret was refused")
    func logged() async throws {
        try await EmulatorHarness.with { harness in
            _ = try await harness.send(
                "POST", "/auth/token", form: try harness.tokenForm(secret: Self.derSigned(), [("grant_type", "refresh_token"), ("refresh_token", "r")]))
            let entry = try #require(try await harness.requestLog().last)
            #expect(entry["error"] as? String == "invalid_client")
            #expect((entry["detail"] as? String)?.contains("DER") == true)
            #expect(entry["grantType"] as? String == "refresh_token")
        }
    }
}
