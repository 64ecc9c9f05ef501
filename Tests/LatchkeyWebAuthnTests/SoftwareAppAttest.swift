import Crypto
import Foundation
import LatchkeyWebAuthn
import SwiftASN1
import X509

/// App Attest in software: a root, an intermediate and a device key of its own, made with swift-certificates, for the
/// rules the published vectors cannot reach (an intermediate that is not a CA, a leaf of another curve, counters at
/// their limits).
struct SoftwareAppAttest {
    static let appID = "ABCDE12345.com.example.latchkey"
    /// When the leaf starts to be valid; it is valid for three days, like most of Apple's.
    static let issued = Date(timeIntervalSince1970: 1_735_689_600)  // 2025-01-01T00:00:00Z

    let rootKey = P256.Signing.PrivateKey()
    let intermediateKey = P256.Signing.PrivateKey()
    let deviceKey = P256.Signing.PrivateKey()
    let root: Certificate
    let rootName: DistinguishedName
    let intermediateName: DistinguishedName

    init() throws {
        rootName = try DistinguishedName { CommonName("Latchkey Test App Attestation Root CA") }
        intermediateName = try DistinguishedName { CommonName("Latchkey Test App Attestation CA 1") }
        root = try Self.certificate(
            key: .init(rootKey.publicKey), subject: rootName, issuer: rootName, issuerKey: rootKey, years: (-5, 20),
            extensions: try Certificate.Extensions { Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil)) })
    }

    var rootPEM: String { get throws { try root.serializeAsPEM().pemString } }

    func verifier(environment: AppAttestEnvironment = .development) throws -> AppAttestVerifier {
        try AppAttestVerifier(appIDs: [Self.appID], environment: environment, rootCertificatePEM: try rootPEM)
    }

    var keyID: [UInt8] { Array(SHA256.hash(data: deviceKey.publicKey.x963Representation)) }

    /// The authenticator data of an attestation: rpIdHash, AT, the counter, aaguid, the key id and the COSE key.
    func authenticatorData(counter: UInt32 = 0, environment: AppAttestEnvironment = .development, coseKey: P256.Signing.PublicKey? = nil) -> [UInt8] {
        let point = Array((coseKey ?? deviceKey.publicKey).x963Representation)
        let key = CBORValue.map([
            CBORMapEntry(.unsigned(1), .unsigned(2)), CBORMapEntry(.unsigned(3), .negative(6)), CBORMapEntry(.negative(0), .unsigned(1)),
            CBORMapEntry(.negative(1), .bytes(Array(point[1...32]))), CBORMapEntry(.negative(2), .bytes(Array(point[33...]))),
        ])
        let aaguid = Array((environment == .development ? "appattestdevelop" : "appattest\0\0\0\0\0\0\0").utf8)
        return Array(SHA256.hash(data: Array(Self.appID.utf8))) + [0x40] + Self.bigEndian(counter) + aaguid + [0x00, 0x20] + keyID
            + Self.encode(key)
    }

    /// An attestation object for `clientDataHash`, with the parts a test may spoil.
    func attestation(
        clientDataHash: [UInt8], authenticatorData: [UInt8]? = nil, intermediateIsCA: Bool = true, leafKey: Certificate.PublicKey? = nil,
        leafIssuer: DistinguishedName? = nil, leafSigner: P256.Signing.PrivateKey? = nil, nonceExtension: Bool = true
    ) throws -> [UInt8] {
        let data = authenticatorData ?? self.authenticatorData()
        let intermediate = try Self.certificate(
            key: .init(intermediateKey.publicKey), subject: intermediateName, issuer: rootName, issuerKey: rootKey, years: (-5, 10),
            extensions: try Certificate.Extensions {
                Critical(intermediateIsCA ? BasicConstraints.isCertificateAuthority(maxPathLength: 0) : BasicConstraints.notCertificateAuthority)
            })
        var nonce = DER.Serializer()
        try nonce.appendConstructedNode(identifier: .sequence) { coder in
            try coder.serialize(explicitlyTaggedWithTagNumber: 1, tagClass: .contextSpecific) { coder in
                try coder.serialize(ASN1OctetString(contentBytes: ArraySlice(SHA256.hash(data: data + clientDataHash))))
            }
        }
        let nonceBytes = nonce.serializedBytes
        let leaf = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: leafKey ?? .init(deviceKey.publicKey),
            notValidBefore: Self.issued, notValidAfter: Self.issued.addingTimeInterval(3 * 86_400), issuer: leafIssuer ?? intermediateName,
            subject: try DistinguishedName { CommonName("Latchkey Test Device") },
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                if nonceExtension { Certificate.Extension(oid: [1, 2, 840, 113_635, 100, 8, 2], critical: false, value: ArraySlice(nonceBytes)) }
            },
            issuerPrivateKey: .init(leafSigner ?? intermediateKey))
        let statement = CBORValue.map([
            CBORMapEntry(.text("x5c"), .array([.bytes(try Self.der(leaf)), .bytes(try Self.der(intermediate))])),
            CBORMapEntry(.text("receipt"), .bytes(Array("a receipt".utf8))),
        ])
        return Self.encode(
            .map([
                CBORMapEntry(.text("fmt"), .text("apple-appattest")), CBORMapEntry(.text("attStmt"), statement), CBORMapEntry(.text("authData"), .bytes(data)),
            ]))
    }

    /// An assertion with `counter`, signed by `signer` (the device key unless a test says otherwise).
    func assertion(counter: UInt32, clientDataHash: [UInt8], signer: P256.Signing.PrivateKey? = nil, appID: String = Self.appID) throws -> [UInt8] {
        let data = Array(SHA256.hash(data: Array(appID.utf8))) + [0x00] + Self.bigEndian(counter)
        let signature = try (signer ?? deviceKey).signature(for: Array(SHA256.hash(data: data + clientDataHash)))
        return Self.encode(
            .map([CBORMapEntry(.text("signature"), .bytes(Array(signature.derRepresentation))), CBORMapEntry(.text("authenticatorData"), .bytes(data))]))
    }

    /// The key `verifyAttestation` returns for this device, with `counter`.
    func storedKey(counter: UInt32) -> AttestedAppKey {
        AttestedAppKey(
            keyID: keyID, publicKey: Array(deviceKey.publicKey.x963Representation), counter: counter, receipt: Array("a receipt".utf8),
            appID: Self.appID, environment: .development)
    }

    static func certificate(
        key: Certificate.PublicKey, subject: DistinguishedName, issuer: DistinguishedName, issuerKey: P256.Signing.PrivateKey, years: (Int, Int),
        extensions: Certificate.Extensions
    ) throws -> Certificate {
        let year = 365.0 * 86_400
        return try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: key, notValidBefore: issued.addingTimeInterval(Double(years.0) * year),
            notValidAfter: issued.addingTimeInterval(Double(years.1) * year), issuer: issuer, subject: subject, extensions: extensions,
            issuerPrivateKey: .init(issuerKey))
    }

    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> $0) } }

    /// CBOR's encoding (RFC 8949) of what these tests build: the verifier only reads CBOR, it never writes any.
    static func encode(_ value: CBORValue) -> [UInt8] {
        func head(_ major: UInt8, _ argument: UInt64) -> [UInt8] {
            switch argument {
            case 0..<24: [major << 5 | UInt8(argument)]
            case 24..<256: [major << 5 | 24, UInt8(argument)]
            case 256..<65_536: [major << 5 | 25, UInt8(argument >> 8), UInt8(argument & 0xFF)]
            default: [major << 5 | 26] + bigEndian(UInt32(argument))
            }
        }
        return switch value {
        case .unsigned(let n): head(0, n)
        case .negative(let n): head(1, n)
        case .bytes(let bytes): head(2, UInt64(bytes.count)) + bytes
        case .text(let text): head(3, UInt64(text.utf8.count)) + Array(text.utf8)
        case .array(let items): head(4, UInt64(items.count)) + items.flatMap(encode)
        case .map(let entries): head(5, UInt64(entries.count)) + entries.flatMap { encode($0.key) + encode($0.value) }
        case .bool(let flag): [flag ? 0xF5 : 0xF4]
        case .null: [0xF6]
        }
    }
}
