import LatchkeyCore
import SQLKit
import Synchronization

/// Gathers requests of one kind that arrive while the batcher is busy into one job of the batcher, which handles
/// them as a set: a few statements for the whole group instead of a few for each request.
///
/// Each caller resumes after the commit of the transaction that held its group, as with a job of its own. When a
/// group fails as a whole (a deadlock, say), its requests run again one by one, so one request's trouble does not
/// fail the others; when the database is unreachable, they all fail at once.
final class WriteGroups<Request: Sendable, Answer: Sendable>: Sendable {
    /// Handles a group inside the batcher's transaction: one answer per request, in order.
    typealias Process = @Sendable ([Request], any SQLDatabase) async throws -> [Answer]

    private struct Waiting: Sendable {
        let request: Request
        let continuation: CheckedContinuation<Answer, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        /// A job is in the batcher's queue and has not yet taken its group.
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

    /// The group a job took when it first ran; a job the batcher retries on its own handles the same group again.
    private final class Taken: Sendable {
        let group = Mutex<[Waiting]?>(nil)
    }

    private let state = Mutex(State())
    private let largest = Atomic(0)
    /// The most requests one job has handled so far (for tests and figures).
    var largestGroup: Int { largest.load(ordering: .relaxed) }
    private let batcher: WriteBatcher
    private let limit: Int
    private let maximumJobs: Int
    private let process: Process

    /// - Parameters:
    ///   - limit: the most requests in one group.
    ///   - maximumJobs: how many groups may be in the batcher at once. Fewer groups are larger: while one commits,
    ///     the next gathers.
    init(batcher: WriteBatcher, limit: Int, maximumJobs: Int, process: @escaping Process) {
        self.batcher = batcher
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
            let answers = try await batcher.submit { database in
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
                        let answers = try await batcher.submit { database in try await process([waiting.request], database) }
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
            taken = group
            return group
        }
    }
}
