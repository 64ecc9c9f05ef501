import Crypto
import Foundation

/// Standard Webhooks' signature: `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under the endpoint's key.
public enum WebhookSignature {
    /// The three headers of a delivery attempt at `timestamp` (Unix seconds).
    public static func headers(messageID: String, timestamp: Int, body: String, key: [UInt8]) -> [(name: String, value: String)] {
        [
            ("webhook-id", messageID), ("webhook-timestamp", String(timestamp)),
            ("webhook-signature", sign(messageID: messageID, timestamp: timestamp, body: body, key: key)),
        ]
    }

    public static func sign(messageID: String, timestamp: Int, body: String, key: [UInt8]) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(messageID).\(timestamp).\(body)".utf8), using: SymmetricKey(data: key))
        return "v1," + Data(mac).base64EncodedString()
    }

    /// Whether one of the space-separated `v1,` signatures in `header` is `body`'s, compared in constant time.
    public static func verify(messageID: String, timestamp: Int, body: String, header: String, key: [UInt8]) -> Bool {
        let signed = Data("\(messageID).\(timestamp).\(body)".utf8)
        // HMAC's own comparison is constant time; every candidate is checked.
        return header.split(separator: " ").reduce(false) { found, candidate in
            guard candidate.hasPrefix("v1,"), let given = Data(base64Encoded: String(candidate.dropFirst(3))) else { return found }
            return HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: signed, using: SymmetricKey(data: key)) || found
        }
    }

    /// The signing key of a `whsec_` secret, or what is wrong with it (never the secret itself).
    public static func key(fromSecret secret: String) -> Result<[UInt8], WebhookSecretProblem> {
        let text = secret.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix(secretPrefix) else { return .failure(.missingPrefix) }
        guard let key = Data(base64Encoded: String(text.dropFirst(secretPrefix.count))) else { return .failure(.notBase64) }
        guard key.count >= minimumKeyBytes else { return .failure(.tooShort(key.count)) }
        return .success(Array(key))
    }

    public static let secretPrefix = "whsec_"
    /// Standard Webhooks asks for 24 to 64 random bytes.
    public static let minimumKeyBytes = 24
}

/// Why a webhook secret cannot be used.
public enum WebhookSecretProblem: Error, Sendable, Equatable, CustomStringConvertible {
    case missingPrefix, notBase64
    case tooShort(Int)

    public var description: String {
        switch self {
        case .missingPrefix: "does not begin with whsec_ (make one with `latchkey webhooks secret`)"
        case .notBase64: "is not whsec_ followed by base64 (make one with `latchkey webhooks secret`)"
        case .tooShort(let count): "holds \(count) bytes; use at least \(WebhookSignature.minimumKeyBytes) random bytes (`latchkey webhooks secret`)"
        }
    }
}
