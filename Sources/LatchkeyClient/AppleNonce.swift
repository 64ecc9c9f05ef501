import Foundation
import LatchkeyModels

/// A fresh nonce for Sign in with Apple: put ``sha256`` in `ASAuthorizationAppleIDRequest.nonce`,
/// and send ``raw`` to the server with the identity token.
///
/// ```swift
/// let nonce = AppleNonce()
/// request.nonce = nonce.sha256  // request: the ASAuthorizationAppleIDRequest; send nonce.raw to Latchkey
/// ```
public struct AppleNonce: Sendable, Equatable {
    /// The nonce itself, 43 URL-safe characters from 32 random bytes.
    public let raw: String

    /// Makes a nonce from 32 secure random bytes (the same generator as a PKCE verifier).
    public init() {
        raw = PKCE.makeVerifier(byteCount: 32)
    }

    /// Uses a nonce made elsewhere.
    public init(raw: String) {
        self.raw = raw
    }

    /// Lowercase hex SHA-256 of ``raw``: what the identity token's `nonce` claim holds.
    public var sha256: String {
        // PKCE's S256 challenge is base64url(SHA-256(raw)); LatchkeyModels is this target's only hashing dependency.
        var base64 = PKCE.challenge(for: raw).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        let digest = Data(base64Encoded: base64) ?? Data()
        return digest.map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
    }

}
