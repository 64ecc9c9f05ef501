import Crypto
import Foundation
import LatchkeyWebAuthn
import Testing

/// The verifier against every published vector of Fixtures/appattest, with the verdicts of cases.tsv.
@Suite("App Attest fixtures")
struct AppAttestFixtureTests {
    @Test("every case of cases.tsv gets its verdict: 82 genuine accepted, 594 forgeries refused on their intended check")
    func allCases() async throws {
        var (accepted, refused, unknown) = (0, 0, 0)
        for (path, expected) in try AppAttestFixture.cases() {
            await Task.yield()  // thousands of checks: give the 2-core pool back, or concurrent tests' deadlines starve
            let fixture = try AppAttestFixture.load(path)
            #expect(fixture.expect == expected, "\(path): cases.tsv and the file disagree")
            switch expected {
            case "accept":
                switch try fixture.verify() {
                case .success: accepted += 1
                case .failure(let failure): Issue.record("\(path) was refused: \(failure)")
                }
            case "refuse":
                switch try fixture.verify() {
                case .success: Issue.record("\(path) (\(fixture.tamper ?? "?")) was accepted")
                case .failure(let failure):
                    refused += 1
                    let intended = Set((fixture.expectedFailingChecks ?? []).compactMap(AppAttestFixture.check))
                    #expect(!intended.isEmpty, "\(path) names no check")
                    #expect(intended.contains(failure.check), "\(path): refused on \(failure), expected one of \(intended.map(\.rawValue).sorted())")
                }
            case "unknown":
                unknown += 1
            default:
                Issue.record("\(path): unknown verdict \(expected)")
            }
        }
        #expect(accepted == 82)
        #expect(refused == 594)
        #expect(unknown == 8)
    }

    @Test("a genuine attestation passes every check, and its key is the fixture's")
    func genuineAttestations() async throws {
        let attestations = try AppAttestFixture.all(in: "attestations")
        #expect(attestations.count == 51)
        var environments: [AppAttestEnvironment: Int] = [:]
        for (path, fixture) in attestations {
            await Task.yield()
            let keyID = try AppAttestFixture.bytes(fixture.keyId)
            let (results, key) = try fixture.verifier().checkAttestation(
                try AppAttestFixture.bytes(fixture.attestation), keyID: keyID, clientDataHash: try AppAttestFixture.bytes(fixture.clientDataHash),
                at: try fixture.notBefore)
            #expect(results.map(\.check) == AppAttestCheck.allCases.filter { $0 != .signature }, "\(path)")
            let failed = results.filter { !$0.passed }
            #expect(failed.isEmpty, "\(path): \(failed)")
            let attested = try #require(key, "\(path) gave no key")
            #expect(attested.keyID == keyID, "\(path)")
            #expect(attested.publicKey.count == 65 && attested.publicKey.first == 0x04, "\(path)")
            #expect(Array(SHA256.hash(data: attested.publicKey)) == keyID, "\(path)")
            #expect(attested.appID == fixture.appId, "\(path)")
            #expect(attested.environment == fixture.environmentValue, "\(path)")
            #expect(attested.counter == 0, "\(path)")
            #expect(!attested.receipt.isEmpty, "\(path)")
            environments[attested.environment, default: 0] += 1
        }
        #expect(environments == [.production: 7, .development: 44])
    }

    @Test("Apple's samples: a clientDataHash of 21 and 24 bytes, and extension bytes after the COSE key without ED")
    func appleSamples() throws {
        for (name, hashLength) in [("apple-doc-sample-2024", 21), ("apple-doc-sample-2026", 24)] {
            let fixture = try AppAttestFixture.load("attestations/\(name).json")
            #expect(try AppAttestFixture.bytes(fixture.clientDataHash).count == hashLength)
            #expect(try fixture.verify() == .success(0), "\(name)")
        }
    }

    @Test("a genuine assertion verifies with its stored key and returns its counter")
    func genuineAssertions() async throws {
        let assertions = try AppAttestFixture.all(in: "assertions")
        #expect(assertions.count == 31)
        for (path, fixture) in assertions {
            await Task.yield()
            #expect(try fixture.verify() == .success(try #require(fixture.expectedCounter)), "\(path)")
        }
    }

    @Test("the key an attestation returns verifies the assertions published with it")
    func attestationThenAssertion() async throws {
        var chained = 0
        for (path, fixture) in try AppAttestFixture.all(in: "assertions") {
            await Task.yield()
            guard let reference = fixture.attestationRef, reference.hasPrefix("attestations/") else { continue }
            let attestation = try AppAttestFixture.load(reference)
            var key = try attestation.verifier().verifyAttestation(
                try AppAttestFixture.bytes(attestation.attestation), keyID: try AppAttestFixture.bytes(attestation.keyId),
                clientDataHash: try AppAttestFixture.bytes(attestation.clientDataHash), at: try attestation.notBefore)
            #expect(key.publicKey == (try AppAttestFixture.bytes(fixture.publicKey)), "\(path)")
            let counter = try attestation.verifier().verifyAssertion(
                try AppAttestFixture.bytes(fixture.assertion), clientDataHash: try AppAttestFixture.bytes(fixture.clientDataHash), key: key)
            #expect(counter == fixture.expectedCounter, "\(path)")
            // The same assertion again is a replay.
            key.counter = counter
            #expect(throws: AppAttestFailure.self, "\(path)") {
                try attestation.verifier().verifyAssertion(
                    try AppAttestFixture.bytes(fixture.assertion), clientDataHash: try AppAttestFixture.bytes(fixture.clientDataHash), key: key)
            }
            chained += 1
        }
        #expect(chained == 30)
    }

    @Test("the rejected vectors (no challenge or key published, corrupt copies) are read without a crash, and refused")
    func unknownVectors() async throws {
        let rejected = try AppAttestFixture.all(in: "rejected")
        #expect(rejected.count == 8)
        // Their challenge or key was never published: placeholders take them as far as they go.
        let placeholderHash = [UInt8](repeating: 0, count: 32)
        for (path, fixture) in rejected {
            await Task.yield()
            let appID = fixture.appId ?? "TEAMID1234.placeholder"
            let verifier = try AppAttestVerifier(appIDs: [appID], environment: .development)
            if fixture.type == "attestation" {
                let (results, key) = verifier.checkAttestation(
                    try AppAttestFixture.bytes(fixture.attestation), keyID: try AppAttestFixture.bytesIfPresent(fixture.keyId ?? fixture.keyIdOfLeafKey) ?? [],
                    clientDataHash: try AppAttestFixture.bytesIfPresent(fixture.clientDataHash) ?? placeholderHash, at: try fixture.notBefore)
                #expect(results.count == 8, "\(path)")
                #expect(key == nil, "\(path): accepted with a placeholder clientDataHash")
            } else {
                let key = AttestedAppKey(
                    keyID: [], publicKey: Array(P256.Signing.PrivateKey().publicKey.x963Representation), counter: 0, receipt: [], appID: appID,
                    environment: .development)
                #expect(throws: AppAttestFailure.self, "\(path)") {
                    try verifier.verifyAssertion(try AppAttestFixture.bytes(fixture.assertion), clientDataHash: placeholderHash, key: key)
                }
            }
        }
    }
}
