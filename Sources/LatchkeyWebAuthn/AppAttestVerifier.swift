import Crypto
public import Foundation
import LatchkeyJOSE
import SwiftASN1
import X509

/// Apple App Attest on the server (any platform): checks an app's attestation of a new key, then the assertions made
/// with it, as Apple's "Validating apps that connect to your server" lists. Certificates are read and checked by
/// swift-certificates, hashes and signatures by swift-crypto, CBOR by ``CBORReader``.
///
/// The caller passes `clientDataHash` as the app gave it to `attestKey` or `generateAssertion` (usually SHA256 of the
/// server's challenge, but Apple's own samples pass the raw challenge of 21 or 24 bytes): it is taken as given, of any
/// length from 1 to ``maximumClientDataHashSize`` bytes. The time at which the certificates must be valid is passed
/// too. The receipt is kept, not verified.
public struct AppAttestVerifier: Sendable {
    /// Apple's App Attestation Root CA (CN=Apple App Attestation Root CA, O=Apple Inc., ST=California; valid
    /// 2020-03-18T18:32:53Z to 2045-03-15T00:00:00Z), from
    /// https://www.apple.com/certificateauthority/Apple_App_Attestation_Root_CA.pem. Its SHA-256 fingerprint is
    /// 1C:B9:82:3B:A2:8B:A6:AD:2D:33:A0:06:94:1D:E2:AE:4F:51:3E:F1:D4:E8:31:B9:F7:E0:FA:7B:62:42:C9:32.
    public static let appleRootCertificatePEM = """
        -----BEGIN CERTIFICATE-----
        MIICITCCAaegAwIBAgIQC/O+DvHN0uD7jG5yH2IXmDAKBggqhkjOPQQDAzBSMSYw
        JAYDVQQDDB1BcHBsZSBBcHAgQXR0ZXN0YXRpb24gUm9vdCBDQTETMBEGA1UECgwK
        QXBwbGUgSW5jLjETMBEGA1UECAwKQ2FsaWZvcm5pYTAeFw0yMDAzMTgxODMyNTNa
        Fw00NTAzMTUwMDAwMDBaMFIxJjAkBgNVBAMMHUFwcGxlIEFwcCBBdHRlc3RhdGlv
        biBSb290IENBMRMwEQYDVQQKDApBcHBsZSBJbmMuMRMwEQYDVQQIDApDYWxpZm9y
        bmlhMHYwEAYHKoZIzj0CAQYFK4EEACIDYgAERTHhmLW07ATaFQIEVwTtT4dyctdh
        NbJhFs/Ii2FdCgAHGbpphY3+d8qjuDngIN3WVhQUBHAoMeQ/cLiP1sOUtgjqK9au
        Yen1mMEvRq9Sk3Jm5X8U62H+xTD3FE9TgS41o0IwQDAPBgNVHRMBAf8EBTADAQH/
        MB0GA1UdDgQWBBSskRBTM72+aEH/pwyp5frq5eWKoTAOBgNVHQ8BAf8EBAMCAQYw
        CgYIKoZIzj0EAwMDaAAwZQIwQgFGnByvsiVbpTKwSga0kP0e8EeDS4+sQmTvb7vn
        53O5+FRXgeLhpJ06ysC5PrOyAjEAp5U4xDgEgllF7En3VcE3iexZZtKeYnpqtijV
        oyFraWVIyd/dganmrduC1bmTBGwD
        -----END CERTIFICATE-----
        """

    /// The largest attestation object read (Apple's are about 5.5 KB, most of it the receipt).
    public static let maximumAttestationSize = CBORReader.maximumSize
    /// The largest assertion read (Apple's are about 110 bytes).
    public static let maximumAssertionSize = 4096
    /// The longest clientDataHash taken.
    public static let maximumClientDataHashSize = 1024
    /// The most certificates x5c may hold (Apple sends two: the leaf and its intermediate).
    public static let maximumCertificates = 8

    /// The App IDs accepted (team id, a dot, bundle id), with the SHA256 that rpIdHash carries.
    private let appIDs: [(appID: String, hash: [UInt8])]
    private let environment: AppAttestEnvironment
    private let root: Certificate

    /// A verifier for the apps `appIDs` (such as `ABCDE12345.com.example.app`) built for `environment`, trusting
    /// `rootCertificatePEM` (Apple's App Attestation Root CA unless a test passes its own). Throws
    /// `LatchkeyError(.invalidConfiguration)` when the PEM is not one certificate. With no App ID, every attestation
    /// fails `appId`.
    public init(appIDs: [String], environment: AppAttestEnvironment, rootCertificatePEM: String = Self.appleRootCertificatePEM) throws {
        do {
            root = try Certificate(pemEncoded: rootCertificatePEM)
        } catch {
            throw LatchkeyError(.invalidConfiguration, "the App Attest root is not a PEM certificate")
        }
        self.appIDs = appIDs.map { ($0, Array(SHA256.hash(data: Array($0.utf8)))) }
        self.environment = environment
    }

    // MARK: Attestation

    /// Every check of an attestation, in ``AppAttestCheck`` order (all but `signature`), for a report of one line per
    /// check. When `encoding` fails, the checks after it cannot run and fail with a reason that starts with
    /// "not run: "; after that, every check runs whatever the others found. `key` is the key to store when all passed.
    ///
    /// - Parameters:
    ///   - attestation: The attestation object, as `attestKey` returned it.
    ///   - keyID: The key id the app sent (the bytes of `generateKey`'s base64 string, decoded).
    ///   - clientDataHash: The clientDataHash the app passed to `attestKey`, as given.
    ///   - time: When the certificates must be valid: now, or a past time for a stored attestation.
    public func checkAttestation(_ attestation: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], at time: Date) -> (
        results: [AppAttestCheckResult], key: AttestedAppKey?
    ) {
        let checks = AppAttestCheck.allCases.filter { $0 != .signature }
        let object: AttestationObject
        do {
            object = try AttestationObject(attestation, clientDataHash: clientDataHash)
        } catch {
            let notRun = checks.dropFirst().map { AppAttestCheckResult(check: $0, failure: "not run: the attestation is not well formed") }
            return ([AppAttestCheckResult(check: .encoding, failure: error.reason)] + notRun, nil)
        }
        let data = object.authenticatorData
        let leafKey = P256.Signing.PublicKey(object.leaf.publicKey).map { Array($0.x963Representation) }
        let appID = appIDs.first { $0.hash == data.rpIDHash }?.appID
        var results = [AppAttestCheckResult(check: .encoding, failure: nil)]
        for check in checks.dropFirst() {
            let failure: String? =
                switch check {
                case .chain: chainFailure(object, at: time)
                case .nonce: Self.nonceFailure(object, clientDataHash: clientDataHash)
                case .keyId: Self.keyIDFailure(leafKey: leafKey, credentialKey: data.credentialKey, keyID: keyID)
                case .appId: appID == nil ? "the rpIdHash is not the hash of \(appIDList)" : nil
                case .environment: Self.environmentFailure(aaguid: data.aaguid, expected: environment)
                case .counter: data.counter == 0 ? nil : "the counter is \(data.counter), not 0"
                case .credentialId: data.credentialID == keyID ? nil : "the credential id is not the key id"
                case .encoding, .signature: nil
                }
            results.append(AppAttestCheckResult(check: check, failure: failure))
        }
        guard results.allSatisfy(\.passed), let appID, let leafKey else { return (results, nil) }
        return (results, AttestedAppKey(keyID: keyID, publicKey: leafKey, counter: 0, receipt: object.receipt, appID: appID, environment: environment))
    }

    /// Checks an attestation (see ``checkAttestation(_:keyID:clientDataHash:at:)``) and returns the key to store, or
    /// throws the first check that failed.
    public func verifyAttestation(_ attestation: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], at time: Date) throws(AppAttestFailure)
        -> AttestedAppKey
    {
        let (results, key) = checkAttestation(attestation, keyID: keyID, clientDataHash: clientDataHash, at: time)
        if let key { return key }
        let failed = results.first { !$0.passed }
        throw AppAttestFailure(check: failed?.check ?? .encoding, reason: failed?.failure ?? "the attestation was refused")
    }

    /// The chain: intermediate under the root first (the root's key is trusted; the intermediate's is not yet), then
    /// the leaf under the intermediate; names chain; the intermediate is a CA; all three are valid at `time`.
    private func chainFailure(_ object: AttestationObject, at time: Date) -> String? {
        let (leaf, intermediate) = (object.leaf, object.intermediate)
        guard intermediate.issuer == root.subject else { return "the intermediate certificate is not issued by the trusted root" }
        guard root.publicKey.isValidSignature(intermediate.signature, for: intermediate) else {
            return "the intermediate certificate's signature does not verify with the trusted root"
        }
        guard case .isCertificateAuthority = try? intermediate.extensions.basicConstraints else {
            return "the intermediate certificate is not a CA"
        }
        guard leaf.issuer == intermediate.subject else { return "the leaf certificate is not issued by the intermediate" }
        guard intermediate.publicKey.isValidSignature(leaf.signature, for: leaf) else {
            return "the leaf certificate's signature does not verify with the intermediate"
        }
        for (name, certificate) in [("leaf", leaf), ("intermediate", intermediate), ("root", root)] {
            if time < certificate.notValidBefore { return "the \(name) certificate is not valid yet at \(time.formatted(.iso8601))" }
            if time > certificate.notValidAfter { return "the \(name) certificate has expired at \(time.formatted(.iso8601))" }
        }
        return nil
    }

    private static let nonceExtension: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 2]

    private static func nonceFailure(_ object: AttestationObject, clientDataHash: [UInt8]) -> String? {
        guard let value = object.leaf.extensions[oid: nonceExtension]?.value else { return "the leaf certificate has no nonce extension" }
        let nonce: ArraySlice<UInt8>
        do {
            nonce = try DER.sequence(try DER.parse(value), identifier: .sequence) { nodes in
                try DER.explicitlyTagged(&nodes, tagNumber: 1, tagClass: .contextSpecific) { try ASN1OctetString(derEncoded: $0).bytes }
            }
        } catch {
            return "the leaf certificate's nonce extension is not SEQUENCE { [1] OCTET STRING }"
        }
        let expected = SHA256.hash(data: object.authenticatorData.bytes + clientDataHash)
        return nonce.elementsEqual(expected) ? nil : "the certified nonce is not SHA256(authenticator data ‖ clientDataHash)"
    }

    private static func keyIDFailure(leafKey: [UInt8]?, credentialKey: [UInt8]?, keyID: [UInt8]) -> String? {
        guard let leafKey else { return "the leaf certificate's key is not a P-256 key" }
        guard Array(SHA256.hash(data: leafKey)) == keyID else { return "the key id is not SHA256 of the certified key" }
        guard credentialKey == leafKey else { return "the authenticator data's public key is not the certified key" }
        return nil
    }

    private static func environmentFailure(aaguid: [UInt8], expected: AppAttestEnvironment) -> String? {
        if aaguid == expected.aaguid { return nil }
        guard let found = AppAttestEnvironment.allCases.first(where: { $0.aaguid == aaguid }) else { return "the aaguid names no App Attest environment" }
        return "the key was made in \(found.rawValue), not \(expected.rawValue)"
    }

    private var appIDList: String {
        switch appIDs.count {
        case 0: "no App ID (none is configured)"
        case 1: appIDs[0].appID
        default: "any of \(appIDs.count) App IDs"
        }
    }

    // MARK: Assertion

    /// Checks an assertion by `key` (stored from ``verifyAttestation(_:keyID:clientDataHash:at:)``) and returns its
    /// counter, for the caller to store as `key.counter`. The checks, in order: `encoding` (a CBOR map with
    /// `signature` and `authenticatorData` byte strings), `appId` (rpIdHash is SHA256 of `key.appID`), `counter`
    /// (strictly above `key.counter`), `signature` (ES256 by `key.publicKey` over SHA256(authenticatorData ‖
    /// clientDataHash), DER-encoded).
    public func verifyAssertion(_ assertion: [UInt8], clientDataHash: [UInt8], key: AttestedAppKey) throws(AppAttestFailure) -> UInt32 {
        guard assertion.count <= Self.maximumAssertionSize else {
            throw AppAttestFailure(check: .encoding, reason: "the assertion is longer than \(Self.maximumAssertionSize) bytes")
        }
        try Self.checkClientDataHash(clientDataHash)
        let value: CBORValue
        do { value = try CBORReader.value(assertion) } catch { throw AppAttestFailure(check: .encoding, reason: "the assertion is not CBOR (\(error.reason))") }
        guard case .map = value, let signature = value["signature"]?.bytes, let bytes = value["authenticatorData"]?.bytes else {
            throw AppAttestFailure(check: .encoding, reason: "the assertion is not a map with signature and authenticatorData")
        }
        let data = try AppAttestAuthenticatorData(bytes, attested: false)
        guard data.rpIDHash == Array(SHA256.hash(data: Array(key.appID.utf8))) else {
            throw AppAttestFailure(check: .appId, reason: "the rpIdHash is not the hash of the key's App ID \(key.appID)")
        }
        guard data.counter > key.counter else {
            throw AppAttestFailure(check: .counter, reason: "the counter is \(data.counter), not above the stored \(key.counter)")
        }
        guard let publicKey = try? P256.Signing.PublicKey(x963Representation: key.publicKey) else {
            throw AppAttestFailure(check: .signature, reason: "the stored key is not an uncompressed P-256 key")
        }
        guard let parsed = try? P256.Signing.ECDSASignature(derRepresentation: signature) else {
            throw AppAttestFailure(check: .signature, reason: "the signature is not a DER ECDSA signature")
        }
        // ES256 hashes the 32-byte nonce once more: the device signs SHA256(SHA256(authenticatorData ‖ clientDataHash)).
        let nonce = SHA256.hash(data: bytes + clientDataHash)
        guard publicKey.isValidSignature(parsed, for: Array(nonce)) else {
            throw AppAttestFailure(check: .signature, reason: "the signature does not verify with the stored key")
        }
        return data.counter
    }

    static func checkClientDataHash(_ clientDataHash: [UInt8]) throws(AppAttestFailure) {
        guard !clientDataHash.isEmpty, clientDataHash.count <= maximumClientDataHashSize else {
            throw AppAttestFailure(check: .encoding, reason: "the clientDataHash is empty or longer than \(maximumClientDataHashSize) bytes")
        }
    }
}

/// An attestation object read: `fmt` "apple-appattest", `attStmt` with `x5c` and `receipt`, and `authData`.
private struct AttestationObject {
    let leaf: Certificate
    let intermediate: Certificate
    let receipt: [UInt8]
    let authenticatorData: AppAttestAuthenticatorData

    /// The reason of every refusal is for `encoding`.
    init(_ bytes: [UInt8], clientDataHash: [UInt8]) throws(AppAttestFailure) {
        func refusal(_ reason: String) -> AppAttestFailure { AppAttestFailure(check: .encoding, reason: reason) }
        guard bytes.count <= AppAttestVerifier.maximumAttestationSize else {
            throw refusal("the attestation is longer than \(AppAttestVerifier.maximumAttestationSize) bytes")
        }
        try AppAttestVerifier.checkClientDataHash(clientDataHash)
        let value: CBORValue
        do { value = try CBORReader.value(bytes) } catch { throw refusal("the attestation is not CBOR (\(error.reason))") }
        guard case .map = value else { throw refusal("the attestation is not a CBOR map") }
        guard let format = value["fmt"]?.text else { throw refusal("the attestation has no fmt") }
        guard format == "apple-appattest" else { throw refusal("the format is \(format.prefix(40).debugDescription), not \"apple-appattest\"") }
        guard let statement = value["attStmt"], case .map = statement, case .array(let x5c) = statement["x5c"] else {
            throw refusal("the attestation statement has no x5c array")
        }
        guard (2...AppAttestVerifier.maximumCertificates).contains(x5c.count) else {
            throw refusal("x5c holds \(x5c.count) certificates, not 2 to \(AppAttestVerifier.maximumCertificates)")
        }
        var certificates: [Certificate] = []
        for (index, item) in x5c.enumerated() {
            guard let der = item.bytes, let certificate = try? Certificate(derEncoded: der) else {
                throw refusal("x5c[\(index)] is not a DER certificate")
            }
            certificates.append(certificate)
        }
        guard let receipt = statement["receipt"]?.bytes else { throw refusal("the attestation statement has no receipt") }
        guard let authenticatorData = value["authData"]?.bytes else { throw refusal("the attestation has no authData") }
        (leaf, intermediate, self.receipt) = (certificates[0], certificates[1], receipt)
        self.authenticatorData = try AppAttestAuthenticatorData(authenticatorData, attested: true)
    }
}

/// App Attest's authenticator data: WebAuthn's layout (§6.1), read for App Attest. After the credential's COSE key
/// an attestation's may carry more bytes with the ED flag clear (Apple's 2026 sample: a CBOR map of bundle version and
/// validation category); they are kept in the nonce that Apple certifies, so they are accepted unread.
struct AppAttestAuthenticatorData {
    let bytes: [UInt8]
    let rpIDHash: [UInt8]
    let flags: UInt8
    let counter: UInt32
    /// The attested credential's: empty in an assertion's.
    let aaguid: [UInt8]
    let credentialID: [UInt8]
    /// The credential's key, X9.63 uncompressed, when it is an ES256 COSE key.
    let credentialKey: [UInt8]?

    init(_ bytes: [UInt8], attested: Bool) throws(AppAttestFailure) {
        func refusal(_ reason: String) -> AppAttestFailure { AppAttestFailure(check: .encoding, reason: "authenticator data: \(reason)") }
        guard bytes.count >= 37 else { throw refusal("shorter than 37 bytes") }
        self.bytes = bytes
        rpIDHash = Array(bytes[0..<32])
        flags = bytes[32]
        counter = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
        guard attested else {
            (aaguid, credentialID, credentialKey) = ([], [], nil)
            return
        }
        guard flags & 0x40 != 0 else { throw refusal("no attested credential (AT is not set)") }
        guard bytes.count >= 55 else { throw refusal("the attested credential is cut short") }
        aaguid = Array(bytes[37..<53])
        let length = Int(bytes[53]) << 8 | Int(bytes[54])
        guard bytes.count - 55 >= length else { throw refusal("the credential id is cut short") }
        credentialID = Array(bytes[55..<55 + length])
        let key: CBORValue
        do {
            (key, _) = try CBORReader.prefix(Array(bytes[(55 + length)...]))
        } catch {
            throw refusal("the credential public key is not CBOR (\(error.reason))")
        }
        let coseKey: COSEKey
        do { coseKey = try COSEKey(key) } catch { throw refusal(error.reason) }
        if coseKey.algorithm == .es256, let x = key[-2]?.bytes, let y = key[-3]?.bytes {
            credentialKey = [0x04] + x + y
        } else {
            credentialKey = nil
        }
    }
}
