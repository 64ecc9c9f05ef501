import Crypto
import CryptoExtras
import Foundation
import LatchkeyClient
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyWebAuthn

/// A CBOR writer for tests: shortest heads, definite lengths, map entries in the order given.
public enum TestCBOR {
    public static func head(_ major: UInt8, _ value: UInt64) -> [UInt8] {
        switch value {
        case 0..<24: [major << 5 | UInt8(value)]
        case 24..<256: [major << 5 | 24, UInt8(value)]
        case 256..<65_536: [major << 5 | 25] + bigEndian(value, 2)
        case 65_536..<4_294_967_296: [major << 5 | 26] + bigEndian(value, 4)
        default: [major << 5 | 27] + bigEndian(value, 8)
        }
    }

    public static func bigEndian(_ value: UInt64, _ width: Int) -> [UInt8] { (0..<width).reversed().map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }

    public static func encode(_ value: CBORValue) -> [UInt8] {
        switch value {
        case .unsigned(let n): head(0, n)
        case .negative(let n): head(1, n)
        case .bytes(let b): head(2, UInt64(b.count)) + b
        case .text(let t): head(3, UInt64(t.utf8.count)) + Array(t.utf8)
        case .array(let items): head(4, UInt64(items.count)) + items.flatMap(encode)
        case .map(let entries): head(5, UInt64(entries.count)) + entries.flatMap { encode($0.key) + encode($0.value) }
        case .bool(let b): [b ? 0xF5 : 0xF4]
        case .null: [0xF6]
        }
    }

    public static func int(_ value: Int) -> CBORValue { value >= 0 ? .unsigned(UInt64(value)) : .negative(UInt64(-1 - value)) }

    /// A COSE_Key map with integer labels.
    public static func key(_ entries: [(Int, CBORValue)]) -> CBORValue { .map(entries.map { CBORMapEntry(int($0.0), $0.1) }) }
    /// An RSA public key's modulus (without leading zeroes) and exponent, from its PKCS #1 DER.
    public static func modulusAndExponent(_ key: _RSA.Signing.PublicKey) throws -> ([UInt8], [UInt8]) {
        var der = Array(key.pkcs1DERRepresentation)[...]
        func element() -> ArraySlice<UInt8> {
            der.removeFirst()  // tag
            var length = Int(der.removeFirst())
            if length & 0x80 != 0 {
                let width = length & 0x7F
                length = der.prefix(width).reduce(0) { $0 << 8 | Int($1) }
                der.removeFirst(width)
            }
            defer { der.removeFirst(length) }
            return der.prefix(length)
        }
        der = element()
        let n = Array(element().drop { $0 == 0 })
        let e = Array(element())
        return (n, e)
    }
}

public func hexBytes(_ hex: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        bytes.append(UInt8(hex[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

/// A software authenticator: makes credentials and assertions the way a platform authenticator does, with knobs for
/// everything a relying party must refuse.
public struct SoftwareAuthenticator {
    public enum Key {
        case p256(P256.Signing.PrivateKey)
        case ed25519(Curve25519.Signing.PrivateKey)
        case rsa(_RSA.Signing.PrivateKey)
    }

    public struct Ceremony: Sendable {
        public var rpID = "example.com"
        public var origin = "https://example.com"
        public var flags: UInt8 = 0x01 | 0x04 | 0x08 | 0x10  // UP, UV, BE, BS
        public var crossOrigin = false
        public var type: String?
        public init(
            rpID: String = "example.com", origin: String = "https://example.com", flags: UInt8 = 0x01 | 0x04 | 0x08 | 0x10,
            crossOrigin: Bool = false, type: String? = nil
        ) {
            self.rpID = rpID
            self.origin = origin
            self.flags = flags
            self.crossOrigin = crossOrigin
            self.type = type
        }
    }

    public let key: Key
    /// 16 random bytes; tests of the id's bounds set another.
    public var credentialID = (0..<16).map { _ in UInt8.random(in: 0...255) }
    public var signCount: UInt32 = 0

    public init(_ key: Key = .p256(P256.Signing.PrivateKey())) { self.key = key }

    public var coseKey: CBORValue {
        switch key {
        case .p256(let key):
            let point = Array(key.publicKey.x963Representation)
            return TestCBOR.key([
                (1, .unsigned(2)), (3, TestCBOR.int(-7)), (-1, .unsigned(1)), (-2, .bytes(Array(point[1...32]))), (-3, .bytes(Array(point[33...]))),
            ])
        case .ed25519(let key):
            return TestCBOR.key([(1, .unsigned(1)), (3, TestCBOR.int(-8)), (-1, .unsigned(6)), (-2, .bytes(Array(key.publicKey.rawRepresentation)))])
        case .rsa(let key):
            let (n, e) = try! TestCBOR.modulusAndExponent(key.publicKey)
            return TestCBOR.key([(1, .unsigned(3)), (3, TestCBOR.int(-257)), (-1, .bytes(n)), (-2, .bytes(e))])
        }
    }

    /// The client data as a browser writes it (tests of its strict reading write their own).
    public static func clientData(_ type: String, _ challenge: [UInt8], _ ceremony: Ceremony) -> [UInt8] {
        Array(
            #"{"type":"\#(ceremony.type ?? type)","challenge":"\#(base64URL(challenge))","origin":"\#(ceremony.origin)","crossOrigin":\#(ceremony.crossOrigin)}"#
                .utf8)
    }

    public func authenticatorData(_ ceremony: Ceremony, attested: Bool) -> [UInt8] {
        var data = Array(SHA256.hash(data: Array(ceremony.rpID.utf8))) + [ceremony.flags | (attested ? 0x40 : 0)]
        data += TestCBOR.bigEndian(UInt64(signCount), 4)
        if attested { data += Array(repeating: 0, count: 16) + TestCBOR.bigEndian(UInt64(credentialID.count), 2) + credentialID + TestCBOR.encode(coseKey) }
        return data
    }

    public func register(challenge: [UInt8], _ ceremony: Ceremony = Ceremony()) -> RegistrationResponseJSON {
        let attestation = CBORValue.map([
            CBORMapEntry(.text("fmt"), .text("none")), CBORMapEntry(.text("attStmt"), .map([])),
            CBORMapEntry(.text("authData"), .bytes(authenticatorData(ceremony, attested: true))),
        ])
        return RegistrationResponseJSON(
            id: base64URL(credentialID), rawId: base64URL(credentialID),
            response: .init(
                clientDataJSON: base64URL(Self.clientData("webauthn.create", challenge, ceremony)), attestationObject: base64URL(TestCBOR.encode(attestation)),
                transports: ["internal", "hybrid"]))
    }

    public mutating func assert(challenge: [UInt8], userHandle: [UInt8] = [9, 9], _ ceremony: Ceremony = Ceremony(), counting: Bool = true)
        -> AuthenticationResponseJSON
    {
        if counting { signCount += 1 }
        let data = authenticatorData(ceremony, attested: false)
        let clientData = Self.clientData("webauthn.get", challenge, ceremony)
        let signed = data + Array(SHA256.hash(data: clientData))
        let signature: [UInt8] =
            switch key {
            case .p256(let key): Array(try! key.signature(for: signed).derRepresentation)
            case .ed25519(let key): Array(try! key.signature(for: signed))
            case .rsa(let key): Array(try! key.signature(for: signed, padding: .insecurePKCS1v1_5).rawRepresentation)
            }
        return AuthenticationResponseJSON(
            id: base64URL(credentialID), rawId: base64URL(credentialID),
            response: .init(
                clientDataJSON: base64URL(clientData), authenticatorData: base64URL(data), signature: base64URL(signature), userHandle: base64URL(userHandle)))
    }
}

/// ``SoftwareAuthenticator`` behind LatchkeyClient's `PasskeyAuthenticator`: it answers the server's options as a
/// platform authenticator on `origin` does, remembering the user handle of the passkey it made.
public actor SoftwarePasskeyAuthenticator: PasskeyAuthenticator {
    public private(set) var authenticator: SoftwareAuthenticator
    private let origin: String
    private var userHandle: [UInt8] = []

    public init(origin: String = "https://example.com", _ authenticator: SoftwareAuthenticator = SoftwareAuthenticator()) {
        self.origin = origin
        self.authenticator = authenticator
    }

    public func createPasskey(_ options: PublicKeyCredentialCreationOptionsJSON) throws -> RegistrationResponseJSON {
        userHandle = Array(try Self.bytes(options.user.id))
        return authenticator.register(challenge: Array(try Self.bytes(options.challenge)), .init(rpID: options.rp.id, origin: origin))
    }

    public func assertPasskey(_ options: PublicKeyCredentialRequestOptionsJSON) throws -> AuthenticationResponseJSON {
        authenticator.assert(challenge: Array(try Self.bytes(options.challenge)), userHandle: userHandle, .init(rpID: options.rpId, origin: origin))
    }

    static func bytes(_ text: String) throws -> Data {
        guard let data = PasskeyWire.data(text) else { throw HarnessError("not base64url: \(text)") }
        return data
    }
}
