import Foundation

/// Waiting for a system sheet (the web sheet's `ASWebAuthenticationSession`, the passkey sheet's
/// `ASAuthorizationController`), kept out of the Apple-only shells so it is tested everywhere: the wait ends once, with
/// whichever comes first of the sheet's answer, its refusal to start, and the cancellation of the waiting task; and a
/// cancellation closes the sheet.
enum SystemSheet {
    /// Shows a sheet and waits for its result.
    ///
    /// - Parameters:
    ///   - start: shows the sheet, on the caller's actor, and has every answer of the sheet go to the box it is given
    ///     (the first one counts). Not called when the task is cancelled already.
    ///   - close: closes the sheet; called (once, from a new task) when the waiting task is cancelled while the sheet
    ///     is up, after `start` has returned.
    /// - Throws: `CancellationError` when the task is cancelled before the sheet answers, or the sheet's error.
    static func run<Value: Sendable>(
        isolation: isolated (any Actor)? = #isolation, start: (ResumeOnce<Value>) -> Void, close: @escaping @Sendable () async -> Void
    ) async throws -> Value {
        let once = ResumeOnce<Value>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation(isolation: isolation) { continuation in
                if once.attach(continuation) { start(once) }
            }
        } onCancel: {
            if once.cancel() { Task { await close() } }
        }
    }

    /// Delivers the sheet's result once, however often (and on whatever thread) the platform reports: the web sheet's
    /// completion handler can run again on dismissal, `start()` returning false must end the wait too, and a cancelled
    /// sheet still reports its own end.
    final class ResumeOnce<Value: Sendable>: @unchecked Sendable {
        // @unchecked: `state` and `ignored` are only read and written while holding `lock`.
        private let lock = NSLock()
        private var state = State.notStarted
        private var ignored = 0

        private enum State {
            case notStarted
            case cancelledBeforeStart
            case waiting(CheckedContinuation<Value, any Error>)
            case finished
        }

        /// Takes the continuation to resume. False when the task was cancelled before: the continuation is then resumed
        /// with `CancellationError` at once, and the sheet must not be shown.
        func attach(_ continuation: CheckedContinuation<Value, any Error>) -> Bool {
            let cancelled = lock.withLock { () -> Bool in
                guard case .cancelledBeforeStart = state else {
                    state = .waiting(continuation)
                    return false
                }
                state = .finished
                return true
            }
            if cancelled { continuation.resume(throwing: CancellationError()) }
            return !cancelled
        }

        /// Resumes with `result` if nothing did before; returns whether this call did (a later one is counted in
        /// ``ignoredCalls``).
        @discardableResult
        func resume(_ result: Result<Value, LatchkeyClientError>) -> Bool {
            guard let continuation = take(countingIgnored: true) else { return false }
            continuation.resume(with: result.mapError { $0 as any Error })
            return true
        }

        /// The waiting task was cancelled: resumes with `CancellationError` if nothing did before. Returns whether a
        /// sheet is up (or being shown) that must now be closed; false when it answered first or was never shown.
        func cancel() -> Bool {
            let continuation = lock.withLock { () -> CheckedContinuation<Value, any Error>? in
                guard case .notStarted = state else { return takeLocked(countingIgnored: false) }
                state = .cancelledBeforeStart
                return nil
            }
            continuation?.resume(throwing: CancellationError())
            return continuation != nil
        }

        /// How many answers came after the first (and were dropped).
        var ignoredCalls: Int { lock.withLock { ignored } }

        private func take(countingIgnored: Bool) -> CheckedContinuation<Value, any Error>? {
            lock.withLock { takeLocked(countingIgnored: countingIgnored) }
        }

        /// The continuation if the wait is still on (ending it); the caller holds `lock`.
        private func takeLocked(countingIgnored: Bool) -> CheckedContinuation<Value, any Error>? {
            guard case .waiting(let continuation) = state else {
                if countingIgnored { ignored += 1 }
                return nil
            }
            state = .finished
            return continuation
        }
    }
}
