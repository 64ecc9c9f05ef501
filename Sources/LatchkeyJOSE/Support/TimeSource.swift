public import Foundation

/// Where Latchkey reads the current time. Inject ``fixed(_:)`` in tests so they never depend on the wall clock.
public struct TimeSource: Sendable {
    private let read: @Sendable () -> Date

    public init(_ read: @escaping @Sendable () -> Date) { self.read = read }

    /// The current time.
    public var now: Date { read() }

    /// The system clock.
    public static let system = TimeSource { Date() }

    /// Always answers `date`.
    public static func fixed(_ date: Date) -> TimeSource { TimeSource { date } }
}

extension Date {
    /// Milliseconds since 1970, as the stores keep times (and compare a token's expiry).
    package var millis: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }
    package init(millis: Int64) { self.init(timeIntervalSince1970: TimeInterval(millis) / 1000) }
}
