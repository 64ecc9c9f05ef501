import Foundation
import JWTKit

/// A public key that verifies signatures of exactly one JWS algorithm (RFC 8725 §3.1).
public struct VerificationKey: Sendable {
    /// The key id from the JWKS.
    public let keyID: String
    /// The only `alg` this key verifies, such as `RS256`.
    public let algorithm: String
    let verifier: any JWTAlgorithm

    /// An ES256 key from a PEM public key.
    public static func es256(keyID: String, publicKeyPEM: String) async throws(LatchkeyError) -> VerificationKey {
        do {
            let collection = JWTKeyCollection()
            let kid = JWKIdentifier(string: keyID)
            await collection.add(ecdsa: try ES256PublicKey(pem: publicKeyPEM), kid: kid)
            return VerificationKey(keyID: keyID, algorithm: "ES256", verifier: try await collection.getKey(for: kid, alg: "ES256"))
        } catch {
            throw LatchkeyError(.invalidKey, "signing key \(keyID) has an unreadable public key")
        }
    }

    /// An HS256 key: a secret the provider and this server share (LINE's channel secret signs its web logins' ID
    /// tokens). Only a resolver that offers ``VerificationKeyResolver/sharedSecretAlgorithms`` hands one out. A secret
    /// shorter than the hash (32 bytes) is refused (RFC 7518 §3.2).
    public static func hs256(keyID: String, secret: String) async throws(LatchkeyError) -> VerificationKey {
        guard secret.utf8.count >= 32 else { throw LatchkeyError(.invalidKey, "an HS256 secret must be at least 32 bytes (RFC 7518 §3.2)") }
        let collection = JWTKeyCollection()
        let kid = JWKIdentifier(string: keyID)
        await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: kid)
        // An HMAC key was just added under this id, so it is there.
        return VerificationKey(keyID: keyID, algorithm: "HS256", verifier: try! await collection.getKey(for: kid, alg: "HS256"))
    }

    /// Whether `signature` is this key's signature of `input`.
    public func isValidSignature(_ signature: [UInt8], for input: ArraySlice<UInt8>) -> Bool {
        (try? verifier.verify(signature, signs: input)) ?? false
    }
}

/// An immutable set of verification keys indexed by key id, usually one provider's JWKS.
///
/// ```swift
/// let keys = try await VerificationKeySet(jwksJSON: Array(data))
/// let key = keys["W6WcOKB"]
/// ```
public struct VerificationKeySet: Sendable {
    /// Algorithms a key without an `alg` member is assumed to use, by key type (Microsoft's keys have none).
    private static let defaultAlgorithmByKeyType: [String: String] = ["RSA": "RS256", "EC": "ES256"]

    private let keys: [String: VerificationKey]

    /// The key ids in this set, sorted.
    public var keyIDs: [String] { keys.keys.sorted() }
    public var isEmpty: Bool { keys.isEmpty }

    public subscript(keyID: String) -> VerificationKey? { keys[keyID] }

    public init(_ keys: [VerificationKey] = []) {
        self.keys = Dictionary(keys.map { ($0.keyID, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Parses a JWKS document (`{"keys": [...]}`). Keys without a `kid`, private keys and keys that are not
    /// for signatures are skipped; a document with no usable key is an error.
    public init(jwksJSON json: [UInt8]) async throws(LatchkeyError) {
        let document: LenientJWKS
        do {
            document = try sharedJSONDecoder.decode(LenientJWKS.self, from: Data(json))
        } catch {
            throw LatchkeyError(.keysUnavailable, "the key set is not a JWKS document ({\"keys\": [...]})")
        }
        var keys: [VerificationKey] = []
        for jwk in document.keys.compactMap(\.jwk) {
            if let key = await Self.makeKey(jwk) { keys.append(key) }
        }
        guard !keys.isEmpty else {
            throw LatchkeyError(.keysUnavailable, "the key set holds no usable public signing key with a kid")
        }
        self.init(keys)
    }

    private static func makeKey(_ jwk: JWK) async -> VerificationKey? {
        guard let kid = jwk.keyIdentifier?.string, jwk.privateExponent == nil else { return nil }
        let algorithm = jwk.algorithm?.rawValue ?? defaultAlgorithmByKeyType[jwk.keyType.rawValue]
        guard let algorithm else { return nil }
        let collection = JWTKeyCollection()
        do {
            try await collection.add(jwk: jwk)
            let verifier = try await collection.getKey(for: jwk.keyIdentifier, alg: algorithm)
            guard verifier.name == algorithm else { return nil }
            return VerificationKey(keyID: kid, algorithm: algorithm, verifier: verifier)
        } catch {
            return nil
        }
    }
}

/// A JWKS whose keys jwt-kit cannot read (unknown `kty`, symmetric keys) are skipped instead of failing the whole set.
private struct LenientJWKS: Decodable {
    struct Entry: Decodable {
        let jwk: JWK?
        init(from decoder: any Decoder) throws { jwk = try? JWK(from: decoder) }
    }
    let keys: [Entry]
}

/// Resolves the key a token names. A provider's JWKS cache is the usual implementation.
public protocol VerificationKeyResolver: Sendable {
    /// The key with id `keyID`, fetching fresh keys if the resolver supports it.
    /// Throws `unknown_key_id` when no such key exists and `keys_unavailable` when none can be had.
    func key(forKeyID keyID: String) async throws(LatchkeyError) -> VerificationKey
    /// HMAC algorithms whose key is a secret this resolver holds, for tokens without a `kid` (LINE's web logins are
    /// HS256 with the channel secret). Empty for every public-key resolver: HMAC is then refused whatever a policy allows.
    var sharedSecretAlgorithms: Set<String> { get }
    /// The shared-secret key for a token of `algorithm` that names no key.
    func sharedSecretKey(algorithm: String) async throws(LatchkeyError) -> VerificationKey
}

extension VerificationKeyResolver {
    public var sharedSecretAlgorithms: Set<String> { [] }

    public func sharedSecretKey(algorithm: String) async throws(LatchkeyError) -> VerificationKey {
        throw LatchkeyError(.malformedToken, "the header has no \"kid\", so no key can be chosen")
    }
}

/// A fixed set of keys; useful offline and in tests.
public struct StaticKeyResolver: VerificationKeyResolver {
    public let keys: VerificationKeySet
    public init(_ keys: VerificationKeySet) { self.keys = keys }

    public func key(forKeyID keyID: String) async throws(LatchkeyError) -> VerificationKey {
        guard let key = keys[keyID] else { throw unknownKeyID(keyID, known: keys.keyIDs) }
        return key
    }
}

/// The `unknown_key_id` error, listing the ids that are known.
public func unknownKeyID(_ keyID: String, known: [String]) -> LatchkeyError {
    LatchkeyError(
        .unknownKeyID,
        "no key with kid \"\(keyID.prefix(64))\" in the provider's key set (known: \(known.joined(separator: ", "))); "
            + "the token was signed by another issuer or with a key the provider no longer publishes"
    )
}
