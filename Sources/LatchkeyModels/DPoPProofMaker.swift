public import Crypto
import ExtrasBase64
public import Foundation

/// Makes DPoP proofs (RFC 9449 §4.2) with a P-256 key: ES256, `typ` `dpop+jwt`, the public key as `jwk`. The client
/// SDK makes one per request; tests make them the same way.
public struct DPoPProofMaker: Sendable {
    /// Signs the proof's bytes (`BASE64URL(header).BASE64URL(claims)`) with the device key, raw `r‖s` out: a Secure
    /// Enclave key signs behind this, a software key is ``init(privateKey:)``.
    public typealias Sign = @Sendable ([UInt8]) throws -> [UInt8]

    /// The public half, whose RFC 7638 ``thumbprint`` sessions are bound to.
    public let publicKey: P256.Signing.PublicKey
    /// The RFC 7638 SHA-256 thumbprint of ``publicKey``, base64url (`cnf.jkt`, `dpop_jkt`).
    public let thumbprint: String
    private let sign: Sign
    private let header: String

    /// A maker for a key that signs elsewhere (the Secure Enclave).
    public init(publicKey: P256.Signing.PublicKey, sign: @escaping Sign) {
        self.publicKey = publicKey
        self.sign = sign
        let raw = Array(publicKey.rawRepresentation)
        let jwk = JWK(kty: "EC", crv: "P-256", x: Self.base64URL(Array(raw.prefix(32))), y: Self.base64URL(Array(raw.suffix(32))))
        // RFC 7638: the required members, in lexical order, no white space; sorted keys give exactly that.
        thumbprint = Self.base64URL(Array(SHA256.hash(data: Self.json(jwk))))
        header = Self.base64URL(Self.json(Header(alg: "ES256", jwk: jwk, typ: "dpop+jwt")))
    }

    /// A maker for a software key.
    public init(privateKey: P256.Signing.PrivateKey) {
        self.init(publicKey: privateKey.publicKey) { Array(try privateKey.signature(for: $0).rawRepresentation) }
    }

    /// A proof for one request: its method, its URL (query and fragment are left out, as `htu` requires), the access
    /// token it goes with (`ath`), and the server's nonce if it asked for one.
    public func proof(method: String, url: URL, accessToken: String? = nil, nonce: String? = nil, at time: Date = Date()) throws -> String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.query = nil
        components?.fragment = nil
        let claims = Claims(
            ath: accessToken.map { Self.base64URL(Array(SHA256.hash(data: Array($0.utf8)))) }, htm: method, htu: components?.string ?? url.absoluteString,
            iat: Int(time.timeIntervalSince1970), jti: UUID().uuidString, nonce: nonce)
        let signingInput = header + "." + Self.base64URL(Self.json(claims))
        return signingInput + "." + Self.base64URL(try sign(Array(signingInput.utf8)))
    }

    private struct JWK: Encodable {
        let kty, crv, x, y: String
    }

    private struct Header: Encodable {
        let alg: String
        let jwk: JWK
        let typ: String
    }

    private struct Claims: Encodable {
        let ath: String?
        let htm: String
        let htu: String
        let iat: Int
        let jti: String
        let nonce: String?
    }

    private static func json(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Strings, integers and optionals only: encoding cannot fail.
        return Array((try? encoder.encode(value)) ?? Data())
    }

    private static func base64URL(_ bytes: [UInt8]) -> String {
        Base64.encodeToString(bytes: bytes, options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }
}
