import Foundation

/// Real-time bounds in the tests, and how much longer than written they are on this machine.
public enum TestTime {
    /// `LATCHKEY_TEST_TIME_SCALE` (default 1), read once: every ``poll(until:within:every:_:)`` bound is multiplied by
    /// it. A bound only sets how fast a regression fails, never how fast a passing test is, so a loaded machine (CI
    /// beside other jobs) raises the scale instead of each test raising its own timeout.
    public static let scale: Double = parseScale(ProcessInfo.processInfo.environment["LATCHKEY_TEST_TIME_SCALE"])

    /// `text` as a scale: a positive finite number, else 1.
    static func parseScale(_ text: String?) -> Double {
        guard let text, let value = Double(text), value.isFinite, value > 0 else { return 1 }
        return value
    }

    /// `bound` multiplied by ``scale``.
    public static func scaled(_ bound: Duration) -> Duration { bound * scale }

    /// `duration` in seconds, for messages.
    static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return String(format: "%g s", Double(seconds) + Double(attoseconds) / 1e18)
    }
}

/// A condition that ``poll(until:within:every:_:)`` waited for did not hold in time.
public struct PollTimeout: Error, CustomStringConvertible {
    /// What the test waited for.
    public let what: String
    /// The bound as written at the call site, and as waited (times ``TestTime/scale``).
    public let bound: Duration
    public let waited: Duration
    public let file: String
    public let line: Int

    public var description: String {
        let scale = TestTime.scale == 1 ? "" : " (\(TestTime.seconds(bound)) × LATCHKEY_TEST_TIME_SCALE \(TestTime.scale))"
        return "\(file):\(line): waited \(TestTime.seconds(waited))\(scale) for \(what), and it did not happen"
    }
}

/// Polls `condition` every `interval` until it holds, for at most `bound` × ``TestTime/scale`` of real time; then
/// throws a ``PollTimeout`` that says what it waited for and how long (a test that throws records it as its failure).
/// The condition is tried once more at the deadline. `what` is evaluated only then, so it may describe the state seen.
public func poll(
    until what: @autoclosure () -> String,
    within bound: Duration,
    every interval: Duration = .milliseconds(10),
    file: String = #fileID,
    line: Int = #line,
    _ condition: () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let start = clock.now
    let deadline = start + TestTime.scaled(bound)
    while true {
        if try await condition() { return }
        guard clock.now < deadline else {
            throw PollTimeout(what: what(), bound: bound, waited: clock.now - start, file: file, line: line)
        }
        try await Task.sleep(for: min(interval, max(deadline - clock.now, .zero)))
    }
}
