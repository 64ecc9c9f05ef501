import Crypto
import Foundation
public import LatchkeyJOSE
import _CryptoExtras

/// A passkey's public key, read from its COSE_Key (RFC 9052 §7, RFC 9053): ES256 on P-256, RS256 (2048 bits or more)
/// or EdDSA on Ed25519, the algorithms a relying party that accepts passkeys from any platform must take. Signatures
/// are checked by swift-crypto.
public struct COSEKey: Sendable {
    /// The COSE algorithm: -7 ES256, -257 RS256, -8 EdDSA.
    public enum Algorithm: Int, Sendable, CaseIterable {
        case es256 = -7
        case rs256 = -257
        case edDSA = -8

        /// The name WebAuthn's `pubKeyCredParams` and Latchkey's records use.
        public var name: String {
            switch self {
            case .es256: "ES256"
            case .rs256: "RS256"
            case .edDSA: "EdDSA"
            }
        }
    }

    private enum Backing: Sendable {
        case p256(P256.Signing.PublicKey)
        case rsa(_RSA.Signing.PublicKey)
        case ed25519(Curve25519.Signing.PublicKey)
    }

    public let algorithm: Algorithm
    private let backing: Backing

    /// Reads a COSE_Key map. Refuses (`LatchkeyError(.malformedRequest)`) a key type, curve or algorithm outside the
    /// three, a missing or wrong-sized coordinate, an RSA key under 2048 bits, and a point not on its curve.
    public init(_ key: CBORValue) throws(LatchkeyError) {
        guard case .map = key, let kty = key[1]?.integer, let alg = key[3]?.integer else {
            throw Self.refusal("a COSE key needs kty (1) and alg (3)")
        }
        guard let algorithm = Algorithm(rawValue: alg) else { throw Self.refusal("algorithm \(alg) is not ES256 (-7), RS256 (-257) or EdDSA (-8)") }
        self.algorithm = algorithm
        switch (algorithm, kty) {
        case (.es256, 2):
            guard key[-1]?.integer == 1 else { throw Self.refusal("an ES256 key must be on P-256 (crv 1)") }
            guard let x = key[-2]?.bytes, let y = key[-3]?.bytes, x.count == 32, y.count == 32 else {
                throw Self.refusal("an ES256 key needs 32-byte x (-2) and y (-3)")
            }
            do {
                backing = .p256(try P256.Signing.PublicKey(x963Representation: [0x04] + x + y))
            } catch {
                throw Self.refusal("the ES256 key is not a point on P-256")
            }
        case (.rs256, 3):
            guard let n = key[-1]?.bytes, let e = key[-2]?.bytes, !n.isEmpty, !e.isEmpty, e.count <= 8 else {
                throw Self.refusal("an RS256 key needs n (-1) and e (-2)")
            }
            do {
                backing = .rsa(try _RSA.Signing.PublicKey(n: n, e: e))
            } catch {
                throw Self.refusal("the RS256 key is not an RSA key of 2048 bits or more")
            }
        case (.edDSA, 1):
            guard key[-1]?.integer == 6 else { throw Self.refusal("an EdDSA key must be on Ed25519 (crv 6)") }
            guard let x = key[-2]?.bytes, x.count == 32 else { throw Self.refusal("an EdDSA key needs a 32-byte x (-2)") }
            do {
                backing = .ed25519(try Curve25519.Signing.PublicKey(rawRepresentation: x))
            } catch {
                throw Self.refusal("the EdDSA key is not an Ed25519 key")
            }
        default:
            throw Self.refusal("key type \(kty) does not go with \(algorithm.name)")
        }
    }

    /// Whether `signature` (WebAuthn's form: DER for ES256, PKCS #1 v1.5 for RS256, 64 raw bytes for EdDSA) signs `data`.
    public func isValidSignature(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        switch backing {
        case .p256(let key):
            guard let parsed = try? P256.Signing.ECDSASignature(derRepresentation: signature) else { return false }
            return key.isValidSignature(parsed, for: data)
        case .rsa(let key):
            return key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: data, padding: .insecurePKCS1v1_5)
        case .ed25519(let key):
            return key.isValidSignature(signature, for: data)
        }
    }

    private static func refusal(_ reason: String) -> LatchkeyError {
        LatchkeyError(.malformedRequest, "invalid credential public key: \(reason)")
    }
}
