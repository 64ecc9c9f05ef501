import Crypto
import Foundation
import SwiftASN1
import X509

/// Where an App Attest key was made: the environment of the app's entitlement, told apart by the aaguid of the
/// attestation's authenticator data.
enum AppAttestEnvironment: String, Sendable {
    case development, production

    /// `appattestdevelop`, or `appattest` and seven zero bytes.
    var aaguid: [UInt8] {
        switch self {
        case .development: Array("appattestdevelop".utf8)
        case .production: Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
        }
    }
}

/// The App Attest stand-in's certificate authority, in place of Apple's: a root and an intermediate made once per
/// emulator, which certify the keys the stand-in makes as a device's Secure Enclave would (DCAppAttestService).
///
/// Chains have Apple's shape: a P-384 root, a P-384 intermediate CA (path length 0) and a P-256 leaf for the app's
/// key signed with ECDSA-SHA256, carrying the nonce in extension 1.2.840.113635.100.8.2.
struct AppAttestAuthority: Sendable {
    static let rootName = "Latchkey Emulator App Attestation Root CA"
    static let intermediateName = "Latchkey Emulator App Attestation CA 1"
    static let organization = "Latchkey Emulator"
    /// Apple's extension that carries SHA256(authData ‖ clientDataHash).
    static let nonceExtension: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 2]
    /// The attestation's receipt: opaque, where Apple puts a signed receipt for its fraud metric.
    static let receipt = Array("LATCHKEY-EMULATOR-APP-ATTEST-RECEIPT".utf8)
    /// How long a leaf certificate is valid, as Apple's of these years (3 days).
    static let leafLifetime: TimeInterval = 3 * 86_400

    /// The root certificate, PEM.
    let rootPEM: String
    private let intermediate: Certificate
    private let intermediateDER: [UInt8]
    private let intermediateKey: P384.Signing.PrivateKey

    /// A new root and intermediate, valid from a year before `now` (so a skewed emulator clock stays inside) for 20 and
    /// 10 years.
    init(now: Date = Date()) throws {
        let year: TimeInterval = 365 * 86_400
        let rootKey = P384.Signing.PrivateKey()
        let rootSubject = try Self.name(Self.rootName)
        let root = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(rootKey.publicKey), notValidBefore: now - year,
            notValidAfter: now + 20 * year, issuer: rootSubject, subject: rootSubject, signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(keyIdentifier: Self.keyIdentifier(rootKey.publicKey.x963Representation))
            },
            issuerPrivateKey: .init(rootKey))
        rootPEM = try root.serializeAsPEM().pemString

        let intermediateKey = P384.Signing.PrivateKey()
        self.intermediateKey = intermediateKey
        intermediate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(intermediateKey.publicKey), notValidBefore: now - year,
            notValidAfter: now + 10 * year, issuer: rootSubject, subject: try Self.name(Self.intermediateName), signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                AuthorityKeyIdentifier(keyIdentifier: Self.keyIdentifier(rootKey.publicKey.x963Representation))
                SubjectKeyIdentifier(keyIdentifier: Self.keyIdentifier(intermediateKey.publicKey.x963Representation))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey))
        intermediateDER = try Self.der(intermediate)
    }

    /// An attestation as `DCAppAttestService.attestKey` makes it, of a new P-256 key.
    struct Attestation: Sendable {
        /// SHA256 of the key's uncompressed point.
        let keyID: [UInt8]
        let key: P256.Signing.PrivateKey
        /// The CBOR attestation object.
        let object: [UInt8]
    }

    /// Makes a key for `appID` (`TEAMID.bundle.id`) and attests it with `clientDataHash`, its leaf certificate valid from a
    /// minute before `now`.
    func attest(appID: String, clientDataHash: [UInt8], environment: AppAttestEnvironment, now: Date) throws -> Attestation {
        let key = P256.Signing.PrivateKey()
        let point = Array(key.publicKey.x963Representation)
        let keyID = Array(SHA256.hash(data: point))
        let coseKey = CBORItem.map([
            (.integer(1), .integer(2)), (.integer(3), .integer(-7)), (.integer(-1), .integer(1)),
            (.integer(-2), .bytes(Array(point[1...32]))), (.integer(-3), .bytes(Array(point[33...64]))),
        ])
        let authData =
            Self.rpIDHash(appID) + [0x40] + [0, 0, 0, 0] + environment.aaguid + [0, UInt8(keyID.count)] + keyID + coseKey.encoded
        let nonce = Array(SHA256.hash(data: authData + clientDataHash))
        var nonceValue = DER.Serializer()
        try nonceValue.appendConstructedNode(identifier: .sequence) { sequence in
            try sequence.serialize(ASN1OctetString(contentBytes: nonce[...]), explicitlyTaggedWithTagNumber: 1, tagClass: .contextSpecific)
        }
        let leaf = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey), notValidBefore: now - 60,
            notValidAfter: now + Self.leafLifetime, issuer: intermediate.subject,
            subject: try DistinguishedName {
                CommonName(keyID.map { String(format: "%02x", $0) }.joined())
                OrganizationalUnitName("AAA Certification")
                OrganizationName(Self.organization)
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true, nonRepudiation: true, keyEncipherment: true, dataEncipherment: true))
                Certificate.Extension(oid: Self.nonceExtension, critical: false, value: nonceValue.serializedBytes[...])
            },
            issuerPrivateKey: .init(intermediateKey))
        let object = CBORItem.map([
            (.text("fmt"), .text("apple-appattest")),
            (
                .text("attStmt"),
                .map([(.text("x5c"), .array([.bytes(try Self.der(leaf)), .bytes(intermediateDER)])), (.text("receipt"), .bytes(Self.receipt))])
            ),
            (.text("authData"), .bytes(authData)),
        ])
        return Attestation(keyID: keyID, key: key, object: object.encoded)
    }

    /// An assertion as `DCAppAttestService.generateAssertion` makes it: authenticator data of `appID` and `counter`, and
    /// the key's ECDSA-SHA256 signature (DER) of the nonce SHA256(authenticatorData ‖ clientDataHash).
    static func assertion(key: P256.Signing.PrivateKey, appID: String, counter: UInt32, clientDataHash: [UInt8]) throws -> [UInt8] {
        // Apple's assertions carry flags 0x40 (attested credential data), though no credential data follows.
        let authenticatorData = rpIDHash(appID) + [0x40] + (0..<4).reversed().map { UInt8(truncatingIfNeeded: counter >> (8 * $0)) }
        let nonce = Array(SHA256.hash(data: authenticatorData + clientDataHash))
        let signature = try key.signature(for: nonce)
        return CBORItem.map([(.text("signature"), .bytes(Array(signature.derRepresentation))), (.text("authenticatorData"), .bytes(authenticatorData))])
            .encoded
    }

    private static func rpIDHash(_ appID: String) -> [UInt8] { Array(SHA256.hash(data: Array(appID.utf8))) }

    private static func name(_ commonName: String) throws -> DistinguishedName {
        try DistinguishedName {
            CommonName(commonName)
            OrganizationName(organization)
        }
    }

    /// The usual key identifier: SHA-1 of the public key's bits.
    private static func keyIdentifier(_ publicKey: Data) -> ArraySlice<UInt8> { Array(Insecure.SHA1.hash(data: publicKey))[...] }

    private static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}
