import Crypto
public import Foundation

/// A P-256 signing key in software, by its bytes: how the client SDK, which links no crypto library of its own, keeps
/// a DPoP device key where there is no Secure Enclave (the Simulator, app extensions sharing a key, Linux).
public struct SoftwareSigningKey: Sendable {
    private let key: P256.Signing.PrivateKey

    /// A new random key.
    public init() {
        key = P256.Signing.PrivateKey()
    }

    /// The key whose private scalar is `rawRepresentation` (32 bytes, as ``rawRepresentation`` gave it).
    public init(rawRepresentation: Data) throws {
        key = try P256.Signing.PrivateKey(rawRepresentation: rawRepresentation)
    }

    /// The private scalar, 32 bytes: a secret, kept only where the session is.
    public var rawRepresentation: Data { key.rawRepresentation }

    /// The public key, x ‖ y (64 bytes).
    public var rawPublicKey: Data { key.publicKey.rawRepresentation }

    /// An ES256 signature of `bytes` (ECDSA P-256 over their SHA-256), raw r ‖ s (64 bytes).
    public func signature(for bytes: Data) throws -> Data {
        try key.signature(for: bytes).rawRepresentation
    }
}

extension DPoPProofMaker {
    /// A maker for a key whose public half is `rawPublicKey` (x ‖ y, 64 bytes: CryptoKit's `rawRepresentation`) and
    /// that signs elsewhere: a Secure Enclave key seen through a module that does not link this one's crypto library.
    /// Throws when the bytes are not a point of P-256.
    public init(rawPublicKey: Data, sign: @escaping Sign) throws {
        self.init(publicKey: try P256.Signing.PublicKey(rawRepresentation: rawPublicKey), sign: sign)
    }
}

/// The client data an app's App Attest key signs at a Latchkey sign-in.
public enum AppAttestClientData {
    /// SHA-256 of the UTF-8 bytes of `challenge + "." + dpopThumbprint` (the RFC 7638 thumbprint of the DPoP key the
    /// sign-in's proof is made with), or of `challenge` alone when the client has no DPoP key: the `clientDataHash`
    /// given to `attestKey` and `generateAssertion`, and what the server computes to check them. The thumbprint ties
    /// the attestation to the key the session is bound to.
    public static func hash(challenge: String, dpopThumbprint: String?) -> Data {
        let text = dpopThumbprint.map { challenge + "." + $0 } ?? challenge
        return Data(SHA256.hash(data: Data(text.utf8)))
    }
}
