import Crypto
import ExtrasBase64

/// Proof Key for Code Exchange (RFC 7636).
///
/// ```swift
/// let verifier = PKCE.makeVerifier()
/// let challenge = PKCE.challenge(for: verifier)  // send with the authorization request
/// let ok = PKCE.verify(verifier: verifier, challenge: challenge, method: .s256)
/// ```
public enum PKCE {
    /// How a `code_challenge` was derived from the verifier (RFC 7636 §4.2).
    public enum Method: String, Sendable, Codable, CaseIterable {
        case s256 = "S256"
        case plain = "plain"
    }

    /// Shortest and longest verifier RFC 7636 §4.1 allows.
    public static let verifierLengths = 43...128

    /// Makes a verifier from `byteCount` random bytes, base64url-encoded without padding.
    ///
    /// 32 bytes (the default) give a 43-character verifier; 96 bytes give 128.
    public static func makeVerifier(byteCount: Int = 32) -> String {
        precondition((32...96).contains(byteCount), "a PKCE verifier needs 32 to 96 random bytes")
        let key = SymmetricKey(size: SymmetricKeySize(bitCount: byteCount * 8))
        return key.withUnsafeBytes { Base64.encodeToString(bytes: $0, options: [.base64UrlAlphabet, .omitPaddingCharacter]) }
    }

    /// Whether `verifier` has the length and characters RFC 7636 §4.1 requires.
    public static func isValidVerifier(_ verifier: String) -> Bool {
        let bytes = verifier.utf8
        guard verifierLengths.contains(bytes.count) else { return false }
        return bytes.allSatisfy(isUnreserved)
    }

    /// The S256 challenge: `BASE64URL(SHA256(ASCII(verifier)))`.
    public static func challenge(for verifier: String) -> String {
        let digest = SHA256.hash(data: Array(verifier.utf8))
        return Base64.encodeToString(bytes: Array(digest), options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }

    /// Checks a presented verifier against the stored challenge in constant time.
    ///
    /// `plain` is honoured only when `allowPlain` is true: RFC 7636 §4.2 says a client able to use S256 must.
    public static func verify(verifier: String, challenge: String, method: Method, allowPlain: Bool = false) -> Bool {
        guard isValidVerifier(verifier) else { return false }
        switch method {
        case .s256:
            return constantTimeEquals(Self.challenge(for: verifier), challenge)
        case .plain:
            return allowPlain && constantTimeEquals(verifier, challenge)
        }
    }

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}

/// Compares two strings without stopping at the first difference, so timing reveals nothing but the lengths.
public func constantTimeEquals(_ lhs: String, _ rhs: String) -> Bool {
    constantTimeEquals(Array(lhs.utf8), Array(rhs.utf8))
}

/// Compares two byte sequences without stopping at the first difference.
public func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
    guard lhs.count == rhs.count else { return false }
    var difference: UInt8 = 0
    for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
    return difference == 0
}
