import Foundation
import LatchkeyWebAuthn
import Testing

/// The published App Attest vectors in Fixtures/appattest (SOURCES.md there says where each comes from, verify.py
/// is the reference verifier that judged them).
struct AppAttestFixture: Decodable {
    struct MadeAt: Decodable {
        let leafNotBefore: String
        let leafNotAfter: String?
    }

    let id: String
    let type: String
    let expect: String
    let attestation: String?
    let assertion: String?
    let keyId: String?
    let keyIdOfLeafKey: String?
    let clientDataHash: String?
    let appId: String?
    let environment: String?
    let madeAt: MadeAt?
    let publicKey: String?
    let expectedCounter: UInt32?
    let previousCounter: UInt32?
    let attestationRef: String?
    let tamper: String?
    let expectedFailingChecks: [String]?

    static var directory: URL {
        get throws { try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil)).appendingPathComponent("appattest") }
    }

    static func load(_ path: String) throws -> AppAttestFixture {
        try JSONDecoder().decode(AppAttestFixture.self, from: Data(contentsOf: directory.appendingPathComponent(path)))
    }

    /// cases.tsv: every vector's path and expected verdict (accept, refuse or unknown).
    static func cases() throws -> [(path: String, expected: String)] {
        let text = try String(contentsOf: directory.appendingPathComponent("cases.tsv"), encoding: .utf8)
        return text.split(separator: "\n").dropFirst().map { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            return (String(fields[0]), fields.count > 1 ? String(fields[1]) : "")
        }
    }

    /// The vectors of one folder, such as "attestations".
    static func all(in folder: String) throws -> [(path: String, fixture: AppAttestFixture)] {
        try cases().filter { $0.path.hasPrefix(folder + "/") }.map { ($0.path, try load($0.path)) }
    }

    /// Base64 or base64url, padded or not, as the publishers wrote it (verify.py reads it the same way).
    static func bytes(_ text: String?) throws -> [UInt8] {
        let text = try #require(text)
        var standard = text.filter { !$0.isWhitespace }.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        standard += String(repeating: "=", count: (4 - standard.count % 4) % 4)
        return Array(try #require(Data(base64Encoded: standard), "\(text.prefix(20))… is not base64"))
    }

    /// The bytes of a field that may be missing (null in the rejected vectors).
    static func bytesIfPresent(_ text: String?) throws -> [UInt8]? { try text.map { try bytes($0) } }

    static func date(_ text: String?) throws -> Date {
        let text = try #require(text)
        return try #require(ISO8601DateFormatter().date(from: text), "\(text) is not an ISO 8601 time")
    }

    var environmentValue: AppAttestEnvironment { AppAttestEnvironment(rawValue: environment ?? "") ?? .production }
    var notBefore: Date { get throws { try Self.date(madeAt?.leafNotBefore) } }
    var notAfter: Date { get throws { try Self.date(madeAt?.leafNotAfter) } }

    /// A verifier for this vector's App ID and environment, trusting Apple's root.
    func verifier() throws -> AppAttestVerifier {
        try AppAttestVerifier(appIDs: appId.map { [$0] } ?? [], environment: environmentValue)
    }

    /// The stored key an assertion vector is checked against: its counter is `previousCounter`, or one below the
    /// counter expected.
    func storedKey() throws -> AttestedAppKey {
        let expected = try #require(expectedCounter)
        return AttestedAppKey(
            keyID: try Self.bytes(keyId), publicKey: try Self.bytes(publicKey), counter: previousCounter ?? expected - 1, receipt: [],
            appID: try #require(appId), environment: .production)
    }

    /// Verifies this vector as its type says: an attestation at its leaf's notBefore, an assertion with its stored key.
    func verify() throws -> Result<UInt32, AppAttestFailure> {
        if type == "attestation" {
            let key: AttestedAppKey
            do {
                key = try verifier().verifyAttestation(
                    try Self.bytes(attestation), keyID: try Self.bytes(keyId), clientDataHash: try Self.bytes(clientDataHash), at: try notBefore)
            } catch let failure as AppAttestFailure {
                return .failure(failure)
            }
            return .success(key.counter)
        }
        do {
            return .success(try verifier().verifyAssertion(try Self.bytes(assertion), clientDataHash: try Self.bytes(clientDataHash), key: try storedKey()))
        } catch let failure as AppAttestFailure {
            return .failure(failure)
        }
    }

    /// verify.py's check names as the verifier's checks (cdh_rule re-derives the recorded clientDataHash, which the
    /// verifier takes as given: it has no counterpart).
    static func check(_ name: String) -> AppAttestCheck? {
        switch name {
        case "cbor", "fmt", "x5c": .encoding
        case "root_pinned", "chain_sig", "intermediate_ca", "chain_validity": .chain
        case "nonce": .nonce
        case "key_id", "cose_key": .keyId
        case "rp_id": .appId
        case "aaguid": .environment
        case "counter": .counter
        case "credential_id": .credentialId
        case "signature": .signature
        default: nil
        }
    }
}

/// A reproducible stream of random bytes (SplitMix64), for hostile inputs that a failure can be rerun with.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) } }
}
