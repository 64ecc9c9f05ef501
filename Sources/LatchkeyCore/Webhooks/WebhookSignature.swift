import Crypto
public import Foundation

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
}

/// When a delivery that failed is tried again: Standard Webhooks' schedule, stretched past three days.
public enum WebhookRetrySchedule {
    /// The waits after each failed attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h — ten attempts over
    /// 75 h 35 min; each wait is lengthened by up to a fifth at random, so endpoints back from an outage are not hit at once.
    public static let waits: [TimeInterval] = [5, 300, 1800, 7200, 18_000, 36_000, 50_400, 72_000, 86_400]

    /// When to try again after the `attempts`-th attempt failed at `now`; nil when it was the last one.
    public static func nextAttempt(after attempts: Int, at now: Date, jitter: Double = Double.random(in: 0...0.2)) -> Date? {
        guard attempts >= 1, attempts <= waits.count else { return nil }
        return now.addingTimeInterval(waits[attempts - 1] * (1 + min(max(jitter, 0), 0.2)))
    }
}
