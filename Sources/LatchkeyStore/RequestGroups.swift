import LatchkeyCore
import LatchkeyJOSE
import SQLKit
import Synchronization

/// Gathers requests of one kind that arrive while earlier ones are being handled into one group, which the database
/// handles as a set: a few statements for the whole group instead of a few for each request.
///
/// Writes run as one job of the batcher (each caller resumes after the commit of the transaction that held its
/// group, as with a job of its own); reads as one read. When a group fails as a whole (a deadlock, say), its
/// requests run again one by one, so one request's trouble does not fail the others; when the database is
/// unreachable, they all fail at once.
final class RequestGroups<Request: Sendable, Answer: Sendable>: Sendable {
    /// Handles a group: one answer per request, in order.
    typealias Process = @Sendable ([Request], any SQLDatabase) async throws -> [Answer]
    /// Runs a group's work on the database: a write job of the batcher, or a read.
    typealias Runner = @Sendable (_ work: @escaping @Sendable (any SQLDatabase) async throws -> [Answer]) async throws -> [Answer]

    private struct Waiting: Sendable {
        let request: Request
        let continuation: CheckedContinuation<Answer, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        /// A job is queued and has not yet taken its group.
        var jobQueued = false
        /// Jobs started and not yet finished.
        var jobs = 0

        /// Starts a job when requests wait, none is queued for them, and fewer than `maximum` jobs run.
        mutating func shouldStartJob(maximum: Int) -> Bool {
            guard !waiting.isEmpty, !jobQueued, jobs < maximum else { return false }
            jobQueued = true
            jobs += 1
            return true
        }
    }

    /// The group a job took when it first ran; a job the batcher runs again (alone) handles the same group again.
    private final class Taken: Sendable {
        let group = Mutex<[Waiting]?>(nil)
    }

    private let state = Mutex(State())
    private let largest = Atomic(0)
    private let handled = Atomic(0)
    /// How many requests jobs have handled so far (for tests).
    var handledRequests: Int { handled.load(ordering: .relaxed) }
    /// The most requests one job has handled so far (for tests and figures).
    var largestGroup: Int { largest.load(ordering: .relaxed) }
    private let runner: Runner
    private let limit: Int
    private let maximumJobs: Int
    private let process: Process

    /// - Parameters:
    ///   - limit: the most requests in one group.
    ///   - maximumJobs: how many groups may be under way at once. Fewer groups are larger: while one is handled,
    ///     the next gathers.
    init(limit: Int, maximumJobs: Int, runner: @escaping Runner, process: @escaping Process) {
        self.runner = runner
        self.limit = max(1, limit)
        self.maximumJobs = max(1, maximumJobs)
        self.process = process
    }

    func submit(_ request: Request) async throws -> Answer {
        try await withCheckedThrowingContinuation { continuation in
            let start = state.withLock { state in
                state.waiting.append(Waiting(request: request, continuation: continuation))
                return state.shouldStartJob(maximum: maximumJobs)
            }
            if start { Task { await self.runGroup() } }
        }
    }

    private func runGroup() async {
        let taken = Taken()
        let process = process
        defer {
            let another = state.withLock { state in
                state.jobs -= 1
                return state.shouldStartJob(maximum: maximumJobs)
            }
            if another { Task { await self.runGroup() } }
        }
        do {
            let answers = try await runner { database in
                let group = self.take(into: taken)
                return try await process(group.map(\.request), database)
            }
            let group = take(into: taken)
            guard answers.count == group.count else {
                throw AuthStoreError.unavailable("internal: \(answers.count) answers for \(group.count) requests")
            }
            for (waiting, answer) in zip(group, answers) { waiting.continuation.resume(returning: answer) }
        } catch {
            let group = take(into: taken)
            if group.count == 1 || WriteBatcher.isOutage(error) {
                for waiting in group { waiting.continuation.resume(throwing: error) }
                return
            }
            for waiting in group {
                Task {
                    do {
                        let answers = try await runner { database in try await process([waiting.request], database) }
                        waiting.continuation.resume(returning: answers[0])
                    } catch {
                        waiting.continuation.resume(throwing: error)
                    }
                }
            }
        }
    }

    /// The job's group: taken from the waiting requests the first time, the same afterwards.
    private func take(into taken: Taken) -> [Waiting] {
        taken.group.withLock { taken in
            if let taken { return taken }
            let (group, another) = state.withLock { state in
                let group = Array(state.waiting.prefix(limit))
                state.waiting.removeFirst(group.count)
                state.jobQueued = false
                return (group, state.shouldStartJob(maximum: maximumJobs))
            }
            if another { Task { await self.runGroup() } }
            largest.max(group.count, ordering: .relaxed)
            handled.add(group.count, ordering: .relaxed)
            taken = group
            return group
        }
    }
}
