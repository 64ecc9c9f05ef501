public import Crypto
import ExtrasBase64
import Foundation

/// Signs compact JWS tokens. Signatures are raw `r‖s` (RFC 7518 §3.4), never DER.
public enum JWSSigner {
    /// Signs `claims` with ES256 under `keyID`, header `{"alg":"ES256","kid":…,"typ":…}`.
    public static func es256(_ claims: some Encodable, keyID: String, key: P256.Signing.PrivateKey, type: String? = nil) throws(LatchkeyError) -> String {
        try es256(claims, header: es256Header(keyID: keyID, type: type), key: key)
    }

    /// The encoded header segment of `es256(_:keyID:key:type:)`, for a signer that signs many tokens under one key.
    package static func es256Header(keyID: String, type: String?) throws(LatchkeyError) -> String {
        try encodeSegment(Header(alg: "ES256", kid: keyID, typ: type))
    }

    /// Signs `claims` with ES256 under an encoded header segment from `es256Header(keyID:type:)`.
    package static func es256(_ claims: some Encodable, header: String, key: P256.Signing.PrivateKey) throws(LatchkeyError) -> String {
        let signingInput = try header + "." + encodeSegment(claims)
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try key.signature(for: Array(signingInput.utf8))
        } catch {
            throw LatchkeyError(.invalidKey, "the P-256 key could not sign")
        }
        return signingInput + "." + base64URL(Array(signature.rawRepresentation))
    }

    private struct Header: Encodable {
        let alg: String
        let kid: String
        let typ: String?
    }

    private static func encodeSegment(_ value: some Encodable) throws(LatchkeyError) -> String {
        do {
            return base64URL(try LeanJSONEncoder().encode(value))
        } catch {
            throw LatchkeyError(.invalidClaim, "the claims could not be encoded as JSON")
        }
    }
}

/// Unpadded base64url, as JOSE uses it.
public func base64URL(_ bytes: [UInt8]) -> String {
    Base64.encodeToString(bytes: bytes, options: [.base64UrlAlphabet, .omitPaddingCharacter])
}
