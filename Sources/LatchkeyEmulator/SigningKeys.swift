import Crypto
import CryptoExtras
import ExtrasBase64
import Foundation
import JWTKit

/// A JSON value in a claim set the emulator signs.
enum Claim: Sendable, Encodable {
    case string(String)
    case int(Int)
    case bool(Bool)
    case object([String: Claim])
    case array([Claim])
    /// JSON's null: GitHub writes `"email": null` for a user who keeps their address private.
    case null

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .null: try container.encodeNil()
        }
    }
}

/// An ordered claim set; jwt-kit signs it as the payload.
struct ClaimSet: JWTPayload {
    var claims: [(String, Claim)] = []

    subscript(name: String) -> Claim? {
        get { claims.first { $0.0 == name }?.1 }
        set {
            claims.removeAll { $0.0 == name }
            if let newValue { claims.append((name, newValue)) }
        }
    }

    init(_ claims: [(String, Claim)] = []) { self.claims = claims }

    init(from decoder: any Decoder) throws {
        throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "the emulator only signs claim sets"))
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: DynamicKey.self)
        for (name, value) in claims { try container.encode(value, forKey: DynamicKey(name)) }
    }

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

struct DynamicKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// RS256 signing keys of one emulated provider. Rotation keeps the previous key published for an overlap.
struct SigningKeyRing: Sendable {
    struct Key: Sendable {
        let keyID: String
        let rsa: _RSA.Signing.PrivateKey
        let privateKey: JWTKit.Insecure.RSA.PrivateKey

        func verifies(signature: [UInt8], input: [UInt8]) -> Bool {
            rsa.publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5)
        }
    }

    private(set) var keys: [Key]
    private let makeKeyID: @Sendable () -> String
    /// How many keys stay published: the active one and the previous ones still overlapping.
    let published = 2

    init(makeKeyID: @escaping @Sendable () -> String) throws {
        self.makeKeyID = makeKeyID
        keys = [try Self.generate(keyID: makeKeyID())]
    }

    var active: Key { keys[keys.count - 1] }

    mutating func rotate() throws {
        keys.append(try Self.generate(keyID: makeKeyID()))
        if keys.count > published { keys.removeFirst(keys.count - published) }
    }

    private static func generate(keyID: String) throws -> Key {
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        return Key(keyID: keyID, rsa: rsa, privateKey: try JWTKit.Insecure.RSA.PrivateKey(backing: rsa))
    }

    /// The JWKS document, every published key, with `alg` only when `algorithm` is given (Microsoft's keys have none) and `extra`
    /// members on every key (Microsoft's per-key `issuer`).
    func jwks(algorithm: String?, extra: [String: String] = [:]) -> [String: [[String: String]]] {
        [
            "keys": keys.map { key in
                let primitives = try! key.privateKey.publicKey.getKeyPrimitives()
                var jwk = ["kty": "RSA", "kid": key.keyID, "use": "sig", "n": base64URL(primitives.modulus), "e": base64URL(primitives.publicExponent)]
                if let algorithm { jwk["alg"] = algorithm }
                return jwk.merging(extra) { current, _ in current }
            }
        ]
    }

    /// Signs `claims` with the active key.
    func sign(_ claims: ClaimSet) async throws -> String {
        // As the providers write their tokens: "https://accounts.google.com", not Foundation's default "https:\/\/…".
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        encoder.dateEncodingStrategy = .secondsSince1970
        let collection = JWTKeyCollection()
        let key = active
        await collection.add(
            rsa: key.privateKey, digestAlgorithm: .sha256, kid: JWKIdentifier(string: key.keyID), serializer: DefaultJWTSerializer(jsonEncoder: encoder))
        return try await collection.sign(claims, kid: JWKIdentifier(string: key.keyID))
    }
}

func base64URL(_ data: some Collection<UInt8>) -> String {
    Base64.encodeToString(bytes: data, options: [.base64UrlAlphabet, .omitPaddingCharacter])
}

func base64URLDecode(_ text: some StringProtocol) -> [UInt8]? {
    try? Base64.decode(bytes: Array(text.utf8), options: [.base64UrlAlphabet, .omitPaddingCharacter])
}
