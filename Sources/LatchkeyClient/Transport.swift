public import Foundation

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// Sends one HTTP request: how ``LatchkeyClient`` reaches the server and your backend.
///
/// The default, ``URLSessionTransport``, wraps `URLSession`; tests pass a fake server.
public protocol LatchkeyTransport: Sendable {
    /// Sends `request` and returns the body and response, whatever the status; throws only when no answer came.
    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse)
}

/// ``LatchkeyTransport`` over a `URLSession`.
public struct URLSessionTransport: LatchkeyTransport {
    let session: URLSession

    /// Sends through `session` (`URLSession.shared` by default).
    public init(session: URLSession = .shared) {
        self.session = session
    }

    public func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        return (data, http)
    }
}

/// Wall-clock time and waiting, injectable so tests control expiry and backoff.
public protocol LatchkeyClock: Sendable {
    /// The current time.
    var now: Date { get }
    /// Returns at `deadline` (at once when it has passed); throws `CancellationError` when the task is cancelled.
    func sleep(until deadline: Date) async throws
}

/// The system clock.
struct SystemClock: LatchkeyClock {
    var now: Date { Date() }

    func sleep(until deadline: Date) async throws {
        let seconds = deadline.timeIntervalSinceNow
        if seconds > 0 { try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000)) }
    }
}
