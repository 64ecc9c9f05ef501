import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// App Attest at sign-in, against the emulator's stand-in (a real CBOR attestation under its own root CA).
@Suite("Server: App Attest at sign-in")
struct AppAttestTests {
    static let appID = Fixtures.teamID + "." + Fixtures.bundleID

    static func attest(_ mode: AppAttestMode) -> (inout ServerConfiguration) -> Void {
        { configuration in
            configuration.session.anonymous.enabled = true
            configuration.session.anonymous.perIPPerHour = 100
            configuration.appAttest.mode = mode
            configuration.appAttest.appIDs = [appID]
            configuration.appAttest.environment = .development
        }
    }

    /// An install: the emulator's stand-in of DCAppAttestService, and the DPoP key it vouches for.
    struct Install {
        let harness: ServerHarness
        let dpop = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
        var keyID: String?

        func challenge() async throws -> String {
            let answer = try await harness.post("/v1/attest/challenge", json: [:])
            #expect(answer.status == 200 && answer.json["expiresIn"] as? Int == 300, "\(answer.text)")
            return try #require(answer.json["challenge"] as? String)
        }

        /// SHA-256 of `challenge.thumbprint`, base64url, as the emulator takes it.
        func clientDataHash(_ challenge: String, thumbprint: String? = nil) -> String {
            base64URL(Array(SHA256.hash(data: Array((challenge + "." + (thumbprint ?? dpop.thumbprint)).utf8))))
        }

        mutating func attestation(_ challenge: String, appID: String = AppAttestTests.appID, thumbprint: String? = nil) async throws -> [String: String] {
            let made = try await harness.emulator.send(
                "POST", "/emulator/appattest/attestations",
                json: ["appId": appID, "clientDataHash": clientDataHash(challenge, thumbprint: thumbprint), "environment": "development"])
            #expect(made.status == 200, "\(made.text)")
            let keyID = try #require(made.json["keyId"] as? String)
            self.keyID = keyID
            return ["keyId": keyID, "attestation": try #require(made.json["attestation"] as? String), "challenge": challenge]
        }

        func assertion(_ challenge: String) async throws -> [String: String] {
            let keyID = try #require(keyID)
            let made = try await harness.emulator.send(
                "POST", "/emulator/appattest/assertions", json: ["keyId": keyID, "clientDataHash": clientDataHash(challenge)])
            #expect(made.status == 200, "\(made.text)")
            return ["keyId": keyID, "assertion": try #require(made.json["assertion"] as? String), "challenge": challenge]
        }

        func signIn(_ evidence: [String: String]?) async throws -> ServerHarness.Answer {
            let proof = try dpop.proof(
                method: "POST", url: URL(string: harness.server.configuration.issuer + "/v1/auth/anonymous")!, at: harness.clock.now)
            return try await harness.post("/v1/auth/anonymous", json: evidence.map { ["appAttest": $0] } ?? [:], headers: [("DPoP", proof)])
        }
    }

    static func claims(_ answer: ServerHarness.Answer) throws -> [String: Any] {
        try AdminAPITests.claims(try answer.decode(SignInResponse.self).accessToken)
    }

    @Test("require: an attestation, then assertions, vouch for the install and its DPoP key; attested: true in the tokens")
    func attestThenAssert() async throws {
        try await ServerHarness.with(configure: Self.attest(.require)) { harness in
            var install = Install(harness: harness)
            let missing = try await install.signIn(nil)
            #expect((missing.status, missing.error) == (401, "invalid_attestation"))
            let first = try await install.signIn(try await install.attestation(try await install.challenge()))
            #expect(first.status == 200, "\(first.text)")
            let claims = try Self.claims(first)
            #expect(claims["attested"] as? Bool == true)
            #expect((claims["cnf"] as? [String: Any])?["jkt"] as? String == install.dpop.thumbprint)
            let userID = try first.decode(SignInResponse.self).user.id
            let keyID = try #require(install.keyID)
            let stored = try #require(try await harness.store.appAttestKey(id: keyID))
            #expect(stored.counter == 0 && stored.appID == Self.appID)

            let later = try await install.signIn(try await install.assertion(try await install.challenge()))
            #expect(later.status == 200, "\(later.text)")
            #expect(try Self.claims(later)["attested"] as? Bool == true)
            #expect(try await harness.store.appAttestKey(id: keyID)?.counter == 1)
            // The refreshed access token still says so.
            let refreshed = try await harness.send(
                "POST", "/v1/token", body: "grant_type=refresh_token&refresh_token=\(try later.decode(SignInResponse.self).refreshToken)",
                contentType: "application/x-www-form-urlencoded",
                headers: [
                    (
                        "DPoP",
                        try install.dpop.proof(method: "POST", url: URL(string: harness.server.configuration.issuer + "/v1/token")!, at: harness.clock.now)
                    )
                ])
            #expect(try AdminAPITests.claims(try refreshed.decode(TokenPairResponse.self).accessToken)["attested"] as? Bool == true)
            _ = userID
        }
    }

    @Test("refusals name their check: a spent or forged challenge, another App ID, another DPoP key, a counter that does not move, an unknown key")
    func refusals() async throws {
        try await ServerHarness.with(configure: Self.attest(.require)) { harness in
            var install = Install(harness: harness)
            let challenge = try await install.challenge()
            let evidence = try await install.attestation(challenge)
            #expect(try await install.signIn(evidence).status == 200)
            let spent = try await install.signIn(evidence)
            #expect((spent.status, spent.error) == (401, "invalid_attestation") && spent.text.contains("already used"), "\(spent.text)")

            var other = Install(harness: harness)
            var forged = try await other.attestation(try await other.challenge())
            forged["challenge"] = base64URL(Array(repeating: 7, count: 40))
            #expect(try await other.signIn(forged).text.contains("not one of this server's"))
            let wrongApp = try await other.signIn(try await other.attestation(try await other.challenge(), appID: Fixtures.teamID + ".com.other.app"))
            #expect(wrongApp.error == "invalid_attestation" && wrongApp.text.contains("appId"), "\(wrongApp.text)")
            // The attested key vouches for another DPoP key than the proof's.
            let wrongKey = try await other.signIn(
                try await other.attestation(try await other.challenge(), thumbprint: DPoPProofMaker(privateKey: P256.Signing.PrivateKey()).thumbprint))
            #expect(wrongKey.error == "invalid_attestation" && wrongKey.text.contains("nonce"), "\(wrongKey.text)")

            // Two assertions made in order, used in the other order: the second one's counter does not move.
            let (first, second) = (try await install.assertion(try await install.challenge()), try await install.assertion(try await install.challenge()))
            #expect(try await install.signIn(second).status == 200)
            let stale = try await install.signIn(first)
            #expect(stale.error == "invalid_attestation" && stale.text.contains("counter"), "\(stale.text)")

            var tampered = try await install.assertion(try await install.challenge())
            let encoded = try #require(tampered["assertion"])
            var bytes = try #require(Data(base64Encoded: encoded))
            bytes[bytes.count - 5] ^= 0x01
            tampered["assertion"] = bytes.base64EncodedString()
            #expect(try await install.signIn(tampered).error == "invalid_attestation")

            var unknown = try await install.assertion(try await install.challenge())
            unknown["keyId"] = Data(repeating: 1, count: 32).base64EncodedString()
            #expect(try await install.signIn(unknown).text.contains("never attested"))
            var both = try await install.assertion(try await install.challenge())
            both["attestation"] = both["assertion"]
            #expect(try await install.signIn(both).error == "invalid_attestation")
        }
    }

    @Test("report refuses nothing and counts each outcome; off: no challenge endpoint and appAttest ignored")
    func reportAndOff() async throws {
        try await ServerHarness.with(configure: Self.attest(.report)) { harness in
            var install = Install(harness: harness)
            let missing = try await install.signIn(nil)
            #expect(missing.status == 200)
            #expect(try Self.claims(missing)["attested"] == nil)
            let bad = try await install.signIn(try await install.attestation(try await install.challenge(), appID: Fixtures.teamID + ".com.other.app"))
            #expect(bad.status == 200)
            #expect(try Self.claims(bad)["attested"] == nil)
            let good = try await install.signIn(try await install.attestation(try await install.challenge()))
            #expect(try Self.claims(good)["attested"] as? Bool == true)
            let metrics = try await harness.send("GET", "/metrics").text
            for outcome in ["missing", "invalid", "attestation"] {
                #expect(metrics.contains(#"latchkey_app_attest_total{outcome="\#(outcome)"} 1"#), "\(outcome)")
            }
        }
        try await ServerHarness.with(configure: { $0.session.anonymous.enabled = true }) { harness in
            #expect(try await harness.post("/v1/attest/challenge", json: [:]).status == 404)
            let ignored = try await harness.post("/v1/auth/anonymous", json: ["appAttest": ["keyId": "x", "challenge": "y"]])
            #expect(ignored.status == 200)
        }
    }
}
