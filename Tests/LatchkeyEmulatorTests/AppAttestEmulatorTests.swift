import Crypto
import Foundation
import LatchkeyEmulator
import LatchkeyTestSupport
import LatchkeyWebAuthn
import SwiftASN1
import Testing
import X509

@Suite("Emulator: App Attest stand-in (/emulator/appattest/…)")
struct AppAttestEmulatorTests {
    static let appID = "TEAMA12345.com.example.app"
    static let development = Array("appattestdevelop".utf8)

    /// base64url without padding, as the routes take `clientDataHash`.
    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }

    /// The bytes of `field` of a JSON answer, standard base64.
    static func base64Field(_ answer: EmulatorHarness.Answer, _ field: String) throws -> [UInt8] {
        guard let text = answer.json[field] as? String, let data = Data(base64Encoded: text) else {
            throw HarnessError("\(field) is not standard base64 in \(answer.text)")
        }
        return Array(data)
    }

    static func bigEndian(_ bytes: ArraySlice<UInt8>) -> UInt32 { bytes.reduce(0) { $0 << 8 | UInt32($1) } }

    /// An attestation decoded and taken apart.
    struct Attested {
        let keyID: [UInt8]
        let object: CBORValue
        let authData: [UInt8]
        let leaf: Certificate
        let intermediate: Certificate
        let publicKey: P256.Signing.PublicKey
    }

    func attest(
        _ harness: EmulatorHarness, appID: String = appID, clientDataHash: [UInt8], environment: String? = nil
    ) async throws -> Attested {
        var body: [String: any Sendable] = ["appId": appID, "clientDataHash": Self.base64URL(clientDataHash)]
        if let environment { body["environment"] = environment }
        let answer = try await harness.send("POST", "/emulator/appattest/attestations", json: body)
        try #require(answer.status == 200, "\(answer.text)")
        let keyID = try Self.base64Field(answer, "keyId")
        let raw = try Self.base64Field(answer, "attestation")
        let object = try CBORReader.value(raw)
        let x5c = try #require(object["attStmt"]?["x5c"])
        guard case .array(let certificates) = x5c else { throw HarnessError("x5c is not an array") }
        try #require(certificates.count == 2)
        let leaf = try Certificate(derEncoded: try #require(certificates[0].bytes))
        let intermediate = try Certificate(derEncoded: try #require(certificates[1].bytes))
        let publicKey = try #require(P256.Signing.PublicKey(leaf.publicKey))
        return Attested(
            keyID: keyID, object: object, authData: try #require(object["authData"]?.bytes), leaf: leaf, intermediate: intermediate, publicKey: publicKey)
    }

    func assert(_ harness: EmulatorHarness, keyID: String, clientDataHash: String) async throws -> EmulatorHarness.Answer {
        try await harness.send("POST", "/emulator/appattest/assertions", json: ["keyId": keyID, "clientDataHash": clientDataHash])
    }

    func root(_ harness: EmulatorHarness) async throws -> Certificate {
        let answer = try await harness.send("GET", "/emulator/appattest/root.pem")
        #expect(answer.status == 200)
        #expect(answer.headers["content-type"] == "application/x-pem-file")
        #expect(answer.text == harness.emulator.appAttestRootPEM)
        return try Certificate(pemEncoded: answer.text)
    }

    @Test("root.pem: the stand-in's self-signed P-384 root CA, as Emulator.appAttestRootPEM says, its own per emulator")
    func rootCertificate() async throws {
        let first = try await EmulatorHarness.with { harness in
            let root = try await root(harness)
            #expect(root.subject == root.issuer)
            #expect(root.subject.description.contains("CN=Latchkey Emulator App Attestation Root CA"))
            #expect(P384.Signing.PublicKey(root.publicKey) != nil)
            #expect(root.publicKey.isValidSignature(root.signature, for: root))
            #expect(try root.extensions.basicConstraints == .isCertificateAuthority(maxPathLength: nil))
            #expect(root.notValidBefore < Date() && Date() < root.notValidAfter)
            return harness.emulator.appAttestRootPEM
        }
        let second = try await EmulatorHarness.with { harness in harness.emulator.appAttestRootPEM }
        #expect(first != second)
    }

    @Test(
        "an attestation as a device makes it: keyId, authData, COSE key, nonce extension, receipt, and a chain to root.pem",
        arguments: [(nil, Self.development), ("development", Self.development), ("production", Array("appattest".utf8) + [0, 0, 0, 0, 0, 0, 0])]
            as [(String?, [UInt8])])
    func attestation(environment: String?, aaguid: [UInt8]) async throws {
        try await EmulatorHarness.with { harness in
            let root = try await root(harness)
            for clientDataHash in [Self.sha256(Array("challenge".utf8)), [0x2A], Array(repeating: 0xEE, count: 64), Array("test_server_challenge".utf8)] {
                let attested = try await attest(harness, clientDataHash: clientDataHash, environment: environment)
                #expect(attested.object["fmt"]?.text == "apple-appattest")
                #expect(attested.object["attStmt"]?["receipt"]?.bytes?.isEmpty == false)
                let point = Array(attested.publicKey.x963Representation)
                #expect(attested.keyID == Self.sha256(point))

                // rpIdHash ‖ flags ‖ counter ‖ aaguid ‖ credentialId length ‖ credentialId ‖ COSE key.
                let authData = attested.authData
                try #require(authData.count > 87)
                #expect(Array(authData[0..<32]) == Self.sha256(Array(Self.appID.utf8)))
                #expect(authData[32] == 0x40)
                #expect(Self.bigEndian(authData[33..<37]) == 0)
                #expect(Array(authData[37..<53]) == aaguid)
                #expect(authData[53] == 0 && authData[54] == 32)
                #expect(Array(authData[55..<87]) == attested.keyID)
                let (coseKey, end) = try CBORReader.prefix(Array(authData[87...]))
                #expect(end == authData.count - 87)
                #expect(coseKey[1]?.integer == 2 && coseKey[3]?.integer == -7 && coseKey[-1]?.integer == 1)
                let x = try #require(coseKey[-2]?.bytes)
                let y = try #require(coseKey[-3]?.bytes)
                #expect([0x04] + x + y == point)

                // The leaf carries SEQUENCE { [1] EXPLICIT OCTET STRING SHA256(authData ‖ clientDataHash) }.
                let nonce = Self.sha256(authData + clientDataHash)
                let nonceExtension = try #require(attested.leaf.extensions[oid: [1, 2, 840, 113_635, 100, 8, 2]])
                #expect(!nonceExtension.critical)
                #expect(Array(nonceExtension.value) == [0x30, 0x24, 0xA1, 0x22, 0x04, 0x20] + nonce)
                #expect(try attested.leaf.extensions.basicConstraints == .notCertificateAuthority)
                #expect(attested.leaf.notValidAfter.timeIntervalSince(attested.leaf.notValidBefore) == 3 * 86_400 + 60)
                #expect(attested.leaf.notValidBefore < Date() && Date() < attested.leaf.notValidAfter)

                // leaf ← "Latchkey Emulator App Attestation CA 1" (a CA) ← root.pem.
                #expect(attested.leaf.issuer == attested.intermediate.subject)
                #expect(attested.intermediate.subject.description.contains("CN=Latchkey Emulator App Attestation CA 1"))
                #expect(attested.intermediate.issuer == root.subject)
                #expect(P384.Signing.PublicKey(attested.intermediate.publicKey) != nil)
                #expect(try attested.intermediate.extensions.basicConstraints == .isCertificateAuthority(maxPathLength: 0))
                #expect(attested.intermediate.publicKey.isValidSignature(attested.leaf.signature, for: attested.leaf))
                #expect(root.publicKey.isValidSignature(attested.intermediate.signature, for: attested.intermediate))
                #expect(!root.publicKey.isValidSignature(attested.leaf.signature, for: attested.leaf))
                var verifier = Verifier(rootCertificates: CertificateStore([root])) { RFC5280Policy() }
                let result = await verifier.validate(leaf: attested.leaf, intermediates: CertificateStore([attested.intermediate]))
                guard case .validCertificate(let chain) = result else {
                    Issue.record("the chain does not verify to root.pem: \(result)")
                    continue
                }
                #expect(chain.count == 3)
            }
            let other = try await attest(harness, clientDataHash: [1], environment: environment)
            let again = try await attest(harness, clientDataHash: [1], environment: environment)
            #expect(other.keyID != again.keyID)
        }
    }

    @Test("assertions: counters 1, 2, 3… per key, rpIdHash of the key's app, and ES256 over SHA256(authenticatorData ‖ clientDataHash)")
    func assertions() async throws {
        try await EmulatorHarness.with { harness in
            let first = try await attest(harness, clientDataHash: [7, 7, 7])
            let second = try await attest(harness, appID: "TEAMB12345.org.example.other", clientDataHash: [8])
            var previous: UInt32 = 0
            for round in 0..<5 {
                let clientDataHash = Self.sha256(Array("request \(round)".utf8))
                let answer = try await assert(harness, keyID: Data(first.keyID).base64EncodedString(), clientDataHash: Self.base64URL(clientDataHash))
                try #require(answer.status == 200, "\(answer.text)")
                let raw = try Self.base64Field(answer, "assertion")
                let assertion = try CBORReader.value(raw)
                guard case .map(let entries) = assertion else { throw HarnessError("the assertion is not a map") }
                #expect(entries.map(\.key) == [.text("signature"), .text("authenticatorData")])
                let authenticatorData = try #require(assertion["authenticatorData"]?.bytes)
                try #require(authenticatorData.count == 37)
                #expect(Array(authenticatorData[0..<32]) == Self.sha256(Array(Self.appID.utf8)))
                #expect(authenticatorData[32] == 0x40)
                let counter = Self.bigEndian(authenticatorData[33..<37])
                #expect(counter == UInt32(round + 1))
                #expect(counter > previous)
                previous = counter
                let signature = try P256.Signing.ECDSASignature(derRepresentation: try #require(assertion["signature"]?.bytes))
                let nonce = Self.sha256(authenticatorData + clientDataHash)
                #expect(first.publicKey.isValidSignature(signature, for: nonce))
                #expect(!first.publicKey.isValidSignature(signature, for: Self.sha256(authenticatorData + [0])))
                #expect(!second.publicKey.isValidSignature(signature, for: nonce))
            }
            // The other key counts on its own, under its own app.
            let answer = try await assert(harness, keyID: Data(second.keyID).base64EncodedString(), clientDataHash: "AA")
            let assertion = try CBORReader.value(try Self.base64Field(answer, "assertion"))
            let authenticatorData = try #require(assertion["authenticatorData"]?.bytes)
            #expect(Self.bigEndian(authenticatorData[33..<37]) == 1)
            #expect(Array(authenticatorData[0..<32]) == Self.sha256(Array("TEAMB12345.org.example.other".utf8)))
        }
    }

    @Test("bad input is 400 and an unknown keyId 404, with the emulator's error JSON")
    func refusals() async throws {
        try await EmulatorHarness.with { harness in
            let good = Self.base64URL(Self.sha256([1]))
            let bodies: [[String: any Sendable]] = [
                [:], ["appId": Self.appID], ["clientDataHash": good], ["appId": "", "clientDataHash": good], ["appId": 42, "clientDataHash": good],
                ["appId": Self.appID, "clientDataHash": ""], ["appId": Self.appID, "clientDataHash": good + "="],
                ["appId": Self.appID, "clientDataHash": "+/+/"], ["appId": Self.appID, "clientDataHash": "not base64!"],
                ["appId": Self.appID, "clientDataHash": "AB"], ["appId": Self.appID, "clientDataHash": Self.base64URL(Array(repeating: 1, count: 65))],
                ["appId": Self.appID, "clientDataHash": good, "environment": "staging"],
                ["appId": Self.appID, "clientDataHash": good, "environment": "Production"],
            ]
            for body in bodies {
                let answer = try await harness.send("POST", "/emulator/appattest/attestations", json: body)
                #expect(answer.status == 400, "\(body)")
                #expect(answer.json["error"] as? String == "invalid_request", "\(body)")
            }
            #expect(try await harness.send("POST", "/emulator/appattest/attestations", rawBody: "{").status == 400)

            let keyID = Data(try await attest(harness, clientDataHash: [1]).keyID).base64EncodedString()
            let refused: [(String, String)] = [
                (keyID, ""), (keyID, good + "="), (keyID, Self.base64URL(Array(repeating: 1, count: 65))), ("", good), ("%%%", good),
                (String(keyID.dropLast()), good), (Data(Array(repeating: 1, count: 31)).base64EncodedString(), good),
                (Self.base64URL(Array(Data(base64Encoded: keyID)!)), good),
            ]
            for (key, hash) in refused {
                let answer = try await assert(harness, keyID: key, clientDataHash: hash)
                #expect(answer.status == 400, "\(key) \(hash)")
                #expect(answer.json["error"] as? String == "invalid_request")
            }
            #expect(try await harness.send("POST", "/emulator/appattest/assertions", json: ["keyId": keyID]).status == 400)
            #expect(try await harness.send("POST", "/emulator/appattest/assertions", json: ["clientDataHash": good]).status == 400)

            let unknown = try await assert(harness, keyID: Data(Array(repeating: 9, count: 32)).base64EncodedString(), clientDataHash: good)
            #expect(unknown.status == 404)
            #expect(unknown.json["error"] as? String == "not_found")
            #expect(unknown.json["error_description"] is String)
            // A refusal spends no counter: the key's first assertion is still 1.
            let answer = try await assert(harness, keyID: keyID, clientDataHash: good)
            let assertion = try CBORReader.value(try Self.base64Field(answer, "assertion"))
            #expect(Self.bigEndian(try #require(assertion["authenticatorData"]?.bytes)[33..<37]) == 1)
        }
    }
}
