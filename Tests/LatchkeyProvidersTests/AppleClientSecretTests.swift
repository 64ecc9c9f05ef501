import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Apple client secret")
struct AppleClientSecretTests {
    let credentials = try! AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)

    @Test("the secret is an ES256 JWT with Apple's claims and a raw r||s signature")
    func structure() throws {
        let secret = try AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: Fixtures.bundleID, issuedAt: Fixtures.now, lifetime: 3600)
        let parts = secret.split(separator: ".")
        #expect(parts.count == 3)
        let header = jsonSegment(parts[0])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == Fixtures.keyID)
        let claims = jsonSegment(parts[1])
        #expect(claims["iss"] as? String == Fixtures.teamID)
        #expect(claims["sub"] as? String == Fixtures.bundleID)
        #expect(claims["aud"] as? String == "https://appleid.apple.com")
        #expect(claims["iat"] as? Int == Int(Fixtures.now.timeIntervalSince1970))
        #expect(claims["exp"] as? Int == Int(Fixtures.now.timeIntervalSince1970) + 3600)
        let signature = base64URLDecoded(parts[2])
        #expect(signature.count == 64)
        let publicKey = try P256.Signing.PublicKey(pemRepresentation: Fixtures.p8PublicKey)
        let ecdsa = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        #expect(publicKey.isValidSignature(ecdsa, for: Array("\(parts[0]).\(parts[1])".utf8)))
    }

    @Test("lifetimes above 15,777,000 s or below 1 s are refused", arguments: [15_777_001.0, 0.0, -5.0])
    func lifetime(seconds: TimeInterval) {
        #expect(throws: LatchkeyError(.invalidConfiguration, "")) {
            _ = try AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: Fixtures.bundleID, issuedAt: Fixtures.now, lifetime: seconds)
        }
        #expect(throws: LatchkeyError(.invalidConfiguration, "")) {
            _ = try AppleClientSecretProvider(credentials: credentials, clientID: Fixtures.bundleID, lifetime: seconds)
        }
    }

    @Test("the six-month maximum itself is accepted")
    func maximumLifetime() throws {
        _ = try AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: Fixtures.bundleID, issuedAt: Fixtures.now, lifetime: 15_777_000)
    }

    @Test(
        "team ids and key ids of the wrong shape name the field",
        arguments: [("TEAM", "TESTKEY123", "team id"), ("teamid1234", "TESTKEY123", "team id"), (Fixtures.teamID, "KEY-1", "key id")])
    func identifiers(team: String, key: String, field: String) {
        do {
            _ = try AppleSigningCredentials(teamID: team, keyID: key, privateKeyPEM: Fixtures.p8)
            Issue.record("accepted \(team) / \(key)")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.reason.hasPrefix(field))
        }
    }

    @Test(
        "keys that are not a P-256 .p8 are explained",
        arguments: [
            (Fixtures.p384, "P-384"), (Fixtures.p8PublicKey, "public key"), ("not a pem", "not PEM"), (Fixtures.text("apple-rs256.pem"), "not a PKCS#8 P-256"),
        ])
    func keys(pem: String, mention: String) {
        do {
            _ = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: pem)
            Issue.record("accepted a bad key")
        } catch {
            #expect(error.code == .invalidKey)
            #expect(error.reason.contains(mention), "\(error.reason)")
        }
    }

    @Test("an empty client id is refused")
    func emptyClientID() {
        #expect(throws: LatchkeyError(.invalidConfiguration, "")) { _ = try AppleClientSecretProvider(credentials: credentials, clientID: "") }
    }

    @Test("the secret is cached, shared by concurrent callers, and renewed before it expires")
    func caching() async throws {
        let clock = MutableClock()
        let provider = try AppleClientSecretProvider(credentials: credentials, clientID: Fixtures.bundleID, lifetime: 1000, timeSource: clock.source)
        let secrets = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<100 { group.addTask { try await provider.secret() } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(secrets.count == 1)
        clock.advance(700)
        #expect(try await provider.secret() == secrets.first)
        clock.advance(200)  // 900 s: less than a fifth of the lifetime left
        #expect(try await provider.secret() != secrets.first)
    }
}
