public import Crypto
import ExtrasBase64
import LatchkeyJOSE
import LatchkeyModels

/// Latchkey's opaque refresh tokens: `lkr_` and 256 bits in base64url, stored only as SHA-256 hashes.
///
/// The successor of a token is HMAC-SHA256(key, token): unpredictable without both, and the same each time
/// the same token is rotated, so a client retrying a refresh within the grace window gets the same successor
/// without the server ever storing a token in the clear.
public struct RefreshTokens: Sendable {
    static let prefix = "lkr_"
    private let rotationKey: SymmetricKey

    public init(rotationKey: SymmetricKey) { self.rotationKey = rotationKey }

    /// A new random token.
    public func generate() -> String {
        Self.prefix + Self.encode(systemRandomBytes(32))
    }

    /// The successor `token` rotates to.
    public func successor(of token: String) -> String {
        Self.prefix + Self.encode(Array(HMAC<SHA256>.authenticationCode(for: Array(token.utf8), using: rotationKey)))
    }

    /// Lowercase hex SHA-256, the only form in which tokens are stored.
    public static func hash(_ token: String) -> String {
        lowercaseHex(SHA256.hash(data: Array(token.utf8)))
    }

    /// Whether `token` has the shape of a Latchkey refresh token (cheap check before any lookup).
    public static func isWellFormed(_ token: String) -> Bool {
        token.hasPrefix(prefix) && token.utf8.count == prefix.utf8.count + 43
            && token.utf8.dropFirst(4).allSatisfy {
                ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x5F
            }
    }

    private static func encode(_ bytes: [UInt8]) -> String {
        Base64.encodeToString(bytes: bytes, options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }
}
