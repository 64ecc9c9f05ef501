import Crypto
import Foundation
import LatchkeyWebAuthn
import Testing
import X509

/// The checks one at a time: time, environment, App IDs, the trusted root, the chain's rules, counters, and hostile
/// bytes.
@Suite("App Attest verifier")
struct AppAttestVerifierTests {
    /// The first check that failed, or nil when the attestation passed.
    static func firstFailure(
        _ verifier: AppAttestVerifier, _ attestation: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], at time: Date
    ) -> AppAttestFailure? {
        do {
            _ = try verifier.verifyAttestation(attestation, keyID: keyID, clientDataHash: clientDataHash, at: time)
            return nil
        } catch {
            return error
        }
    }

    static func firstFailure(_ fixture: AppAttestFixture, verifier: AppAttestVerifier? = nil, at time: Date? = nil) throws -> AppAttestFailure? {
        firstFailure(
            try verifier ?? fixture.verifier(), try AppAttestFixture.bytes(fixture.attestation), keyID: try AppAttestFixture.bytes(fixture.keyId),
            clientDataHash: try AppAttestFixture.bytes(fixture.clientDataHash), at: try time ?? fixture.notBefore)
    }

    static func assertionFailure(_ verifier: AppAttestVerifier, _ assertion: [UInt8], clientDataHash: [UInt8], key: AttestedAppKey) -> AppAttestFailure? {
        do {
            _ = try verifier.verifyAssertion(assertion, clientDataHash: clientDataHash, key: key)
            return nil
        } catch {
            return error
        }
    }

    // MARK: Time, environment, App IDs, root

    @Test("a genuine attestation is valid from its leaf's notBefore to its notAfter, and fails chain outside")
    func validityWindow() async throws {
        for (path, fixture) in try AppAttestFixture.all(in: "attestations") {
            await Task.yield()  // thousands of checks: give the 2-core pool back, or concurrent tests' deadlines starve
            #expect(try Self.firstFailure(fixture, at: fixture.notAfter) == nil, "\(path) at its leaf's notAfter")
            let late = try Self.firstFailure(fixture, at: fixture.notAfter.addingTimeInterval(86_400))
            #expect(late?.check == .chain, "\(path) a day after notAfter: \(String(describing: late))")
            #expect(late?.reason.contains("leaf certificate has expired") == true, "\(path)")
            let early = try Self.firstFailure(fixture, at: fixture.notBefore.addingTimeInterval(-1))
            #expect(early?.check == .chain, "\(path) a second before notBefore: \(String(describing: early))")
            #expect(early?.reason.contains("leaf certificate is not valid yet") == true, "\(path)")
        }
    }

    @Test("after expiry only chain fails: the other checks still run and pass")
    func otherChecksRunAfterChain() throws {
        let fixture = try AppAttestFixture.load("attestations/apple-doc-sample-2026.json")
        let (results, key) = try fixture.verifier().checkAttestation(
            try AppAttestFixture.bytes(fixture.attestation), keyID: try AppAttestFixture.bytes(fixture.keyId),
            clientDataHash: try AppAttestFixture.bytes(fixture.clientDataHash), at: try fixture.notAfter.addingTimeInterval(86_400))
        #expect(key == nil)
        #expect(results.filter { !$0.passed }.map(\.check) == [.chain])
    }

    @Test("an attestation made in the other environment fails environment", arguments: ["apple-doc-sample-2026", "veehaitch-ios-14.4"])
    func wrongEnvironment(name: String) throws {
        let fixture = try AppAttestFixture.load("attestations/\(name).json")
        let other: AppAttestEnvironment = fixture.environmentValue == .production ? .development : .production
        let failure = try Self.firstFailure(fixture, verifier: AppAttestVerifier(appIDs: [try #require(fixture.appId)], environment: other))
        #expect(failure?.check == .environment)
        #expect(failure?.reason == "the key was made in \(fixture.environmentValue.rawValue), not \(other.rawValue)")
    }

    @Test("the App ID must be configured; any one of several will do, and the key names it")
    func appIDs() throws {
        let fixture = try AppAttestFixture.load("attestations/node-app-attest-prod-2024-02-06.json")
        let appID = try #require(fixture.appId)
        let others = ["V8H6LQ9448.io.uebelacker.Other", "ABCDE12345.io.uebelacker.AppAttestExample"]
        let failure = try Self.firstFailure(fixture, verifier: AppAttestVerifier(appIDs: others, environment: .production))
        #expect(failure?.check == .appId)
        #expect(try Self.firstFailure(fixture, verifier: AppAttestVerifier(appIDs: [], environment: .production))?.check == .appId)
        let key = try AppAttestVerifier(appIDs: others + [appID], environment: .production).verifyAttestation(
            try AppAttestFixture.bytes(fixture.attestation), keyID: try AppAttestFixture.bytes(fixture.keyId),
            clientDataHash: try AppAttestFixture.bytes(fixture.clientDataHash), at: try fixture.notBefore)
        #expect(key.appID == appID)
    }

    @Test("another trusted root refuses Apple's attestations on chain")
    func customRootRefusesApple() throws {
        let software = try SoftwareAppAttest()
        for name in ["apple-doc-sample-2024", "warden-asitplus-prod-2023-04-12", "veehaitch-2020-08-16-ios14b4"] {
            let fixture = try AppAttestFixture.load("attestations/\(name).json")
            let verifier = try AppAttestVerifier(
                appIDs: [try #require(fixture.appId)], environment: fixture.environmentValue, rootCertificatePEM: try software.rootPEM)
            let failure = try Self.firstFailure(fixture, verifier: verifier)
            #expect(failure?.check == .chain, "\(name): \(String(describing: failure))")
        }
    }

    @Test("the verifier refuses a root that is not a PEM certificate")
    func badRoot() throws {
        #expect(throws: (any Error).self) { try AppAttestVerifier(appIDs: [], environment: .production, rootCertificatePEM: "") }
        #expect(throws: (any Error).self) {
            try AppAttestVerifier(appIDs: [], environment: .production, rootCertificatePEM: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
        }
        let fixtureRoot = try String(contentsOf: try AppAttestFixture.directory.appendingPathComponent("Apple_App_Attestation_Root_CA.pem"), encoding: .utf8)
        #expect(try Certificate(pemEncoded: fixtureRoot) == Certificate(pemEncoded: AppAttestVerifier.appleRootCertificatePEM))
        let der = try SoftwareAppAttest.der(try Certificate(pemEncoded: AppAttestVerifier.appleRootCertificatePEM))
        let fingerprint = SHA256.hash(data: der).map { String(format: "%02X", $0) }.joined(separator: ":")
        #expect(fingerprint == "1C:B9:82:3B:A2:8B:A6:AD:2D:33:A0:06:94:1D:E2:AE:4F:51:3E:F1:D4:E8:31:B9:F7:E0:FA:7B:62:42:C9:32")
    }

    // MARK: The chain's rules, on a chain of our own

    @Test("an attestation under a test root passes with that root")
    func softwareAttestation() throws {
        let software = try SoftwareAppAttest()
        let clientDataHash = Array(SHA256.hash(data: Array("challenge".utf8)))
        let attestation = try software.attestation(clientDataHash: clientDataHash)
        let key = try software.verifier().verifyAttestation(attestation, keyID: software.keyID, clientDataHash: clientDataHash, at: SoftwareAppAttest.issued)
        #expect(key == software.storedKey(counter: 0))
        // The same under Apple's root fails the chain, and only the chain.
        let apple = try AppAttestVerifier(appIDs: [SoftwareAppAttest.appID], environment: .development)
        let (results, _) = apple.checkAttestation(attestation, keyID: software.keyID, clientDataHash: clientDataHash, at: SoftwareAppAttest.issued)
        #expect(results.filter { !$0.passed }.map(\.check) == [.chain])
    }

    @Test("the chain: the intermediate must be a CA, sign the leaf and be named as its issuer")
    func chainRules() throws {
        let software = try SoftwareAppAttest()
        let clientDataHash = [UInt8](repeating: 7, count: 32)
        func failure(_ attestation: [UInt8]) throws -> AppAttestFailure? {
            Self.firstFailure(try software.verifier(), attestation, keyID: software.keyID, clientDataHash: clientDataHash, at: SoftwareAppAttest.issued)
        }
        let notCA = try failure(try software.attestation(clientDataHash: clientDataHash, intermediateIsCA: false))
        #expect(notCA == AppAttestFailure(check: .chain, reason: "the intermediate certificate is not a CA"))
        let otherSigner = try failure(try software.attestation(clientDataHash: clientDataHash, leafSigner: P256.Signing.PrivateKey()))
        #expect(otherSigner == AppAttestFailure(check: .chain, reason: "the leaf certificate's signature does not verify with the intermediate"))
        let otherIssuer = try failure(
            try software.attestation(clientDataHash: clientDataHash, leafIssuer: try DistinguishedName { CommonName("Someone Else") }))
        #expect(otherIssuer == AppAttestFailure(check: .chain, reason: "the leaf certificate is not issued by the intermediate"))
    }

    @Test("the leaf: its nonce extension, a P-256 key, the same key in the authenticator data; the counter at 0")
    func leafRules() throws {
        let software = try SoftwareAppAttest()
        let clientDataHash = [UInt8](repeating: 9, count: 32)
        func failure(_ attestation: [UInt8]) throws -> AppAttestFailure? {
            Self.firstFailure(try software.verifier(), attestation, keyID: software.keyID, clientDataHash: clientDataHash, at: SoftwareAppAttest.issued)
        }
        #expect(try failure(try software.attestation(clientDataHash: clientDataHash, nonceExtension: false))?.check == .nonce)
        let p384 = try failure(try software.attestation(clientDataHash: clientDataHash, leafKey: .init(P384.Signing.PrivateKey().publicKey)))
        #expect(p384 == AppAttestFailure(check: .keyId, reason: "the leaf certificate's key is not a P-256 key"))
        let otherKey = software.authenticatorData(coseKey: P256.Signing.PrivateKey().publicKey)
        #expect(
            try failure(try software.attestation(clientDataHash: clientDataHash, authenticatorData: otherKey))
                == AppAttestFailure(check: .keyId, reason: "the authenticator data's public key is not the certified key"))
        let counted = software.authenticatorData(counter: 1)
        #expect(try failure(try software.attestation(clientDataHash: clientDataHash, authenticatorData: counted))?.check == .counter)
        let production = software.authenticatorData(environment: .production)
        let attestation = try software.attestation(clientDataHash: clientDataHash, authenticatorData: production)
        #expect(try failure(attestation)?.check == .environment)
        #expect(
            try software.verifier(environment: .production).verifyAttestation(
                attestation, keyID: software.keyID, clientDataHash: clientDataHash, at: SoftwareAppAttest.issued
            ).environment == .production)
        // Extension bytes after the COSE key (as in Apple's 2026 sample), with ED clear: certified by the nonce, accepted.
        let extended = software.authenticatorData() + SoftwareAppAttest.encode(.map([CBORMapEntry(.text("apple_bundle_version_01"), .text("1"))]))
        #expect(try failure(try software.attestation(clientDataHash: clientDataHash, authenticatorData: extended)) == nil)
    }

    @Test("assertions: the counter must rise, up to UInt32.max; the signature must be the stored key's over this clientDataHash")
    func assertionRules() throws {
        let software = try SoftwareAppAttest()
        let verifier = try software.verifier()
        let hash = Array(SHA256.hash(data: Array("request".utf8)))
        #expect(
            try verifier.verifyAssertion(try software.assertion(counter: 1, clientDataHash: hash), clientDataHash: hash, key: software.storedKey(counter: 0))
                == 1)
        #expect(
            try verifier.verifyAssertion(try software.assertion(counter: .max, clientDataHash: hash), clientDataHash: hash, key: software.storedKey(counter: 7))
                == .max)
        for (counter, stored) in [(UInt32(5), UInt32(5)), (4, 5), (.max, .max), (0, 0)] {
            let failure = Self.assertionFailure(
                verifier, try software.assertion(counter: counter, clientDataHash: hash), clientDataHash: hash, key: software.storedKey(counter: stored))
            #expect(failure == AppAttestFailure(check: .counter, reason: "the counter is \(counter), not above the stored \(stored)"))
        }
        let key = software.storedKey(counter: 0)
        let signedByOther = try software.assertion(counter: 1, clientDataHash: hash, signer: P256.Signing.PrivateKey())
        #expect(Self.assertionFailure(verifier, signedByOther, clientDataHash: hash, key: key)?.check == .signature)
        let genuine = try software.assertion(counter: 1, clientDataHash: hash)
        #expect(Self.assertionFailure(verifier, genuine, clientDataHash: hash.reversed(), key: key)?.check == .signature)
        var otherApp = key
        otherApp.appID = "ABCDE12345.com.example.other"
        #expect(Self.assertionFailure(verifier, genuine, clientDataHash: hash, key: otherApp)?.check == .appId)
        var brokenKey = key
        brokenKey.publicKey = Array(brokenKey.publicKey.dropLast())
        #expect(Self.assertionFailure(verifier, genuine, clientDataHash: hash, key: brokenKey)?.check == .signature)
        // The signature over the nonce itself as a prehashed digest is not App Attest's: refused.
        let data = Array(SHA256.hash(data: Array(SoftwareAppAttest.appID.utf8))) + [0x00, 0, 0, 0, 1]
        let digestSigned = try software.deviceKey.signature(for: SHA256.hash(data: data + hash))
        let prehashed = SoftwareAppAttest.encode(
            .map([CBORMapEntry(.text("signature"), .bytes(Array(digestSigned.derRepresentation))), CBORMapEntry(.text("authenticatorData"), .bytes(data))]))
        #expect(Self.assertionFailure(verifier, prehashed, clientDataHash: hash, key: key)?.check == .signature)
    }

    // MARK: Hostile bytes

    @Test("empty, oversized and malformed inputs fail encoding, and the checks after it are not run")
    func malformedInputs() throws {
        let fixture = try AppAttestFixture.load("attestations/veehaitch-ios-14.3.json")
        let verifier = try fixture.verifier()
        let (attestation, keyID, hash, time) = (
            try AppAttestFixture.bytes(fixture.attestation), try AppAttestFixture.bytes(fixture.keyId), try AppAttestFixture.bytes(fixture.clientDataHash),
            try fixture.notBefore
        )
        let (results, key) = verifier.checkAttestation([], keyID: keyID, clientDataHash: hash, at: time)
        #expect(key == nil)
        #expect(results.first?.check == .encoding && results.first?.passed == false)
        let notRun = results.dropFirst().filter { $0.failure?.hasPrefix("not run: ") == true }
        #expect(notRun.count == 7)
        #expect(results.count == 8)
        let huge = attestation + [UInt8](repeating: 0, count: AppAttestVerifier.maximumAttestationSize)
        #expect(Self.firstFailure(verifier, huge, keyID: keyID, clientDataHash: hash, at: time)?.check == .encoding)
        for badHash in [[], [UInt8](repeating: 1, count: AppAttestVerifier.maximumClientDataHashSize + 1)] {
            #expect(Self.firstFailure(verifier, attestation, keyID: keyID, clientDataHash: badHash, at: time)?.check == .encoding)
            let assertion = try software().assertion(counter: 1, clientDataHash: [1])
            #expect(Self.assertionFailure(verifier, assertion, clientDataHash: badHash, key: try software().storedKey(counter: 0))?.check == .encoding)
        }
        // A trailing byte after the attestation object, and certificates that are not DER.
        #expect(Self.firstFailure(verifier, attestation + [0], keyID: keyID, clientDataHash: hash, at: time)?.check == .encoding)
        let garbage = SoftwareAppAttest.encode(
            .map([
                CBORMapEntry(.text("fmt"), .text("apple-appattest")),
                CBORMapEntry(
                    .text("attStmt"),
                    .map([
                        CBORMapEntry(.text("x5c"), .array([.bytes([0x30, 0x03, 0x02, 0x01, 0x00]), .bytes([])])), CBORMapEntry(.text("receipt"), .bytes([])),
                    ])),
                CBORMapEntry(.text("authData"), .bytes([UInt8](repeating: 0, count: 37))),
            ]))
        #expect(
            Self.firstFailure(verifier, garbage, keyID: keyID, clientDataHash: hash, at: time)
                == AppAttestFailure(check: .encoding, reason: "x5c[0] is not a DER certificate"))
    }

    private func software() throws -> SoftwareAppAttest { try SoftwareAppAttest() }

    @Test("every prefix of a genuine attestation and assertion is refused on encoding")
    func truncations() async throws {
        let fixture = try AppAttestFixture.load("attestations/bas-d-chiff-2021-03-29.json")
        let verifier = try fixture.verifier()
        let (attestation, keyID, hash, time) = (
            try AppAttestFixture.bytes(fixture.attestation), try AppAttestFixture.bytes(fixture.keyId), try AppAttestFixture.bytes(fixture.clientDataHash),
            try fixture.notBefore
        )
        for length in 0..<attestation.count {
            await Task.yield()
            let failure = Self.firstFailure(verifier, Array(attestation.prefix(length)), keyID: keyID, clientDataHash: hash, at: time)
            #expect(failure?.check == .encoding, "prefix of \(length) bytes: \(String(describing: failure))")
        }
        let assertionFixture = try AppAttestFixture.load("assertions/bas-d-chiff-2021-03-29-assertion.json")
        let assertion = try AppAttestFixture.bytes(assertionFixture.assertion)
        let assertionHash = try AppAttestFixture.bytes(assertionFixture.clientDataHash)
        for length in 0..<assertion.count {
            await Task.yield()
            let failure = Self.assertionFailure(verifier, Array(assertion.prefix(length)), clientDataHash: assertionHash, key: try assertionFixture.storedKey())
            #expect(failure?.check == .encoding, "prefix of \(length) bytes: \(String(describing: failure))")
        }
    }

    @Test("random bytes, alone and inside a well-formed envelope, are refused")
    func randomBytes() async throws {
        var random = SeededGenerator(state: 0x4C41_5443_484B_4559)
        let fixture = try AppAttestFixture.load("attestations/warden-asitplus-2024-03-04.json")
        let verifier = try fixture.verifier()
        let (keyID, hash, time) = (try AppAttestFixture.bytes(fixture.keyId), try AppAttestFixture.bytes(fixture.clientDataHash), try fixture.notBefore)
        let key = try AppAttestFixture.load("assertions/warden-asitplus-2024-03-04-assertion.json").storedKey()
        for round in 0..<2000 {
            await Task.yield()
            let bytes = random.bytes(Int.random(in: 0...600, using: &random))
            #expect(Self.firstFailure(verifier, bytes, keyID: keyID, clientDataHash: hash, at: time) != nil, "round \(round)")
            #expect(Self.assertionFailure(verifier, bytes, clientDataHash: hash, key: key) != nil, "round \(round)")
            // The same bytes as certificates, authenticator data and assertion fields of objects that are otherwise well formed.
            let envelope = SoftwareAppAttest.encode(
                .map([
                    CBORMapEntry(.text("fmt"), .text("apple-appattest")),
                    CBORMapEntry(
                        .text("attStmt"),
                        .map([CBORMapEntry(.text("x5c"), .array([.bytes(bytes), .bytes(bytes)])), CBORMapEntry(.text("receipt"), .bytes(bytes))])),
                    CBORMapEntry(.text("authData"), .bytes(bytes)),
                ]))
            #expect(Self.firstFailure(verifier, envelope, keyID: keyID, clientDataHash: hash, at: time)?.check == .encoding, "round \(round)")
            let assertion = SoftwareAppAttest.encode(
                .map([CBORMapEntry(.text("signature"), .bytes(bytes)), CBORMapEntry(.text("authenticatorData"), .bytes(bytes))]))
            #expect(Self.assertionFailure(verifier, assertion, clientDataHash: hash, key: key) != nil, "round \(round)")
        }
    }

    @Test("a bit flipped anywhere outside the receipt makes a genuine attestation fail")
    func bitFlips() async throws {
        let fixture = try AppAttestFixture.load("attestations/oliver-binns-2024-11-19.json")
        let verifier = try fixture.verifier()
        let (attestation, keyID, hash, time) = (
            try AppAttestFixture.bytes(fixture.attestation), try AppAttestFixture.bytes(fixture.keyId), try AppAttestFixture.bytes(fixture.clientDataHash),
            try fixture.notBefore
        )
        let receipt = try verifier.verifyAttestation(attestation, keyID: keyID, clientDataHash: hash, at: time).receipt
        let receiptRange = try #require(attestation.firstRange(of: receipt))
        var refused = 0
        for position in attestation.indices where !receiptRange.contains(position) {
            await Task.yield()
            var flipped = attestation
            flipped[position] ^= 0x01
            let failure = Self.firstFailure(verifier, flipped, keyID: keyID, clientDataHash: hash, at: time)
            #expect(failure != nil, "a flip at byte \(position) was accepted")
            refused += failure == nil ? 0 : 1
        }
        #expect(refused == attestation.count - receipt.count)
        // The receipt is Apple's to check (it is kept, not verified here): a flip inside it does not crash either.
        for position in stride(from: receiptRange.lowerBound, to: receiptRange.upperBound, by: 97) {
            await Task.yield()
            var flipped = attestation
            flipped[position] ^= 0x01
            _ = Self.firstFailure(verifier, flipped, keyID: keyID, clientDataHash: hash, at: time)
        }
    }
}
