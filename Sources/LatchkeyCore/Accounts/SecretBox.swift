public import Crypto
import ExtrasBase64
import Foundation
public import LatchkeyJOSE

/// Seals secrets at rest (Apple refresh tokens, private keys) with AES-256-GCM.
///
/// The key comes from configuration as 32 bytes in base64; ``seal(_:)`` output is `v1.` followed by
/// base64url(nonce ‖ ciphertext ‖ tag), so keys can be rotated later by version.
public struct SecretBox: Sendable {
    private let key: SymmetricKey

    /// - Throws: `invalid_configuration` unless `base64Key` decodes to exactly 32 bytes.
    public init(base64Key: String) throws(LatchkeyError) {
        guard let data = Data(base64Encoded: base64Key.trimmingCharacters(in: .whitespacesAndNewlines)), data.count == 32 else {
            throw LatchkeyError(.invalidConfiguration, "the encryption key must be 32 random bytes in base64 (generate one with `openssl rand -base64 32`)")
        }
        key = SymmetricKey(data: data)
    }

    public init(key: SymmetricKey) { self.key = key }

    /// A fresh random key in base64, for development set-ups and `latchkey doctor`.
    public static func generateKey() -> String {
        SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
    }

    public func seal(_ plaintext: String) throws(LatchkeyError) -> String {
        do {
            let box = try AES.GCM.seal(Array(plaintext.utf8), using: key)
            guard let combined = box.combined else { throw LatchkeyError(.invalidKey, "sealing failed") }
            return "v1." + Base64.encodeToString(bytes: Array(combined), options: [.base64UrlAlphabet, .omitPaddingCharacter])
        } catch {
            throw LatchkeyError(.invalidKey, "sealing failed")
        }
    }

    public func open(_ sealed: String) throws(LatchkeyError) -> String {
        guard sealed.hasPrefix("v1."),
            let bytes = try? Base64.decode(bytes: Array(sealed.utf8.dropFirst(3)), options: [.base64UrlAlphabet, .omitPaddingCharacter]),
            let box = try? AES.GCM.SealedBox(combined: bytes),
            let plaintext = try? AES.GCM.open(box, using: key)
        else {
            throw LatchkeyError(.invalidKey, "a sealed value could not be opened: the encryption key changed or the value is corrupt")
        }
        return String(decoding: plaintext, as: UTF8.self)
    }

    /// A subkey for a purpose (HKDF-SHA256), so one configured secret never serves two uses.
    public func derivedKey(purpose: String) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: key, info: Array(purpose.utf8), outputByteCount: 32)
    }
}
