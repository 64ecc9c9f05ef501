public import Foundation
import Synchronization

/// Holds one value until it expires; when it must be made anew, concurrent callers wait for a single maker.
public final class SingleFlightCache<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var renewAt: Date = .distantPast
        var inflight: Task<(Value, Date), any Error>?
    }

    private enum Plan { case cached(Value), wait(Task<(Value, Date), any Error>) }
    private let state = Mutex(State())

    public init() {}

    /// The cached value if `now` is before its renewal time; otherwise `make`'s, shared with concurrent callers.
    public func value(now: Date, make: @escaping @Sendable () async throws(LatchkeyError) -> (Value, renewAt: Date)) async throws(LatchkeyError) -> Value {
        let plan: Plan = state.withLock { state in
            if let value = state.value, now < state.renewAt { return .cached(value) }
            if let inflight = state.inflight { return .wait(inflight) }
            let task = Task<(Value, Date), any Error> { try await make() }
            state.inflight = task
            return .wait(task)
        }
        guard case .wait(let task) = plan else {
            if case .cached(let value) = plan { return value }
            preconditionFailure()
        }
        do {
            let (value, renewAt) = try await task.value
            state.withLock {
                if $0.renewAt < renewAt {
                    $0.value = value
                    $0.renewAt = renewAt
                }
                $0.inflight = nil
            }
            return value
        } catch {
            state.withLock { $0.inflight = nil }
            throw (error as? LatchkeyError) ?? LatchkeyError(.invalidConfiguration, "\(error)")
        }
    }

    /// The cached value, if any, without renewing it.
    public var cached: Value? { state.withLock { $0.value } }
}
