public import Foundation
import LatchkeyJOSE

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
