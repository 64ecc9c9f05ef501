import LatchkeyCore
import LatchkeyJOSE
import Logging
import PostgresNIO
import SQLKit
import Synchronization

/// Runs write transactions, batching the ones that arrive together into one commit.
///
/// Each job runs inside its own savepoint, so one failing job does not undo the others, and every job's
/// caller resumes only after the shared COMMIT returned: what a caller has seen is durable. Under load this
/// turns N fsyncs into one, which is what lets refresh rotations keep up without `synchronous=OFF`.
final class WriteBatcher: Sendable {
    typealias Work = @Sendable (any SQLDatabase) async throws -> any Sendable

    private struct Job {
        let work: Work
        let continuation: CheckedContinuation<any Sendable, any Error>
    }

    private struct State {
        var queue: [Job] = []
        var drainers = 0
    }

    /// Runs a batch on the write connection: the closure receives the database inside BEGIN…COMMIT.
    typealias Runner = @Sendable (_ body: @escaping @Sendable (any SQLDatabase) async throws -> Void) async throws -> Void

    private let state = Mutex(State())
    private let writes = Mutex(0)

    /// Changes whenever a write transaction of this process has finished; caches compare it.
    var generation: Int { writes.withLock { $0 } }
    private let runner: Runner
    private let maximumBatch: Int
    private let beginStatement: String
    /// Batches committed at the same time: 1 for SQLite (one writer), more for PostgreSQL (a pool of connections).
    private let parallelBatches: Int

    init(beginStatement: String, maximumBatch: Int = 512, parallelBatches: Int = 1, runner: @escaping Runner) {
        self.beginStatement = beginStatement
        self.maximumBatch = maximumBatch
        self.parallelBatches = max(1, parallelBatches)
        self.runner = runner
    }

    func submit<T: Sendable>(_ work: @escaping @Sendable (any SQLDatabase) async throws -> T) async throws -> T {
        let result = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<any Sendable, any Error>) in
            let start = state.withLock { state in
                state.queue.append(Job(work: { try await work($0) }, continuation: continuation))
                guard state.drainers < parallelBatches else { return false }
                state.drainers += 1
                return true
            }
            if start { Task { await self.drain() } }
        }
        return result as! T
    }

    private func drain() async {
        while true {
            let batch: [Job] = state.withLock { state in
                // With several drainers, share the queue out so every connection commits something.
                let share = parallelBatches == 1 ? maximumBatch : min(maximumBatch, max(1, (state.queue.count + parallelBatches - 1) / parallelBatches))
                let batch = Array(state.queue.prefix(share))
                state.queue.removeFirst(batch.count)
                if batch.isEmpty { state.drainers -= 1 }
                return batch
            }
            if batch.isEmpty { return }
            await run(batch)
        }
    }

    private func run(_ batch: [Job]) async {
        if await runTogether(batch) { return }
        // The batch failed as a whole (a deadlock with another instance, a failed COMMIT) and was rolled back:
        // each job gets its own transaction, so one job's trouble never fails the others.
        for job in batch { _ = await runTogether([job]) }
    }

    /// Runs the jobs in one transaction; false (and no continuation resumed) when the transaction failed as a whole
    /// and there was more than one job to retry separately.
    private func runTogether(_ batch: [Job]) async -> Bool {
        let outcomes = Mutex<[Result<any Sendable, any Error>]>([])
        let begin = beginStatement
        do {
            try await runner { database in
                try await database.raw("\(unsafeRaw: begin)").run()
                if batch.count == 1 {
                    // Alone in its transaction, a job needs no savepoint: its failure rolls back the transaction.
                    do {
                        let value = try await Self.committing(database) { try await batch[0].work(database) }
                        outcomes.withLock { $0.append(.success(value)) }
                    } catch let jobError {
                        outcomes.withLock { $0.append(.failure(jobError)) }
                    }
                    return
                }
                try await Self.committing(database) {
                    for (index, job) in batch.enumerated() {
                        try await database.raw("SAVEPOINT job\(unsafeRaw: String(index))").run()
                        do {
                            let value = try await job.work(database)
                            try await database.raw("RELEASE SAVEPOINT job\(unsafeRaw: String(index))").run()
                            outcomes.withLock { $0.append(.success(value)) }
                        } catch let jobError {
                            do {
                                try await database.raw("ROLLBACK TO SAVEPOINT job\(unsafeRaw: String(index))").run()
                                try await database.raw("RELEASE SAVEPOINT job\(unsafeRaw: String(index))").run()
                            } catch {
                                // An I/O error or a full disk can have rolled back the whole transaction, savepoints and all:
                                // the job's error is what happened, not the missing savepoint.
                                throw jobError
                            }
                            outcomes.withLock { $0.append(.failure(jobError)) }
                        }
                    }
                }
            }
        } catch {
            // An unreachable or locked database fails every job alike; retrying them one by one would only wait longer.
            if batch.count > 1, !Self.isOutage(error) { return false }
            writes.withLock { $0 &+= 1 }
            for job in batch { job.continuation.resume(throwing: error) }
            return true
        }
        // Before any writer resumes: a read it makes next must not be answered from a cache of before its write.
        writes.withLock { $0 &+= 1 }
        let results = outcomes.withLock { $0 }
        for (job, outcome) in zip(batch, results) { job.continuation.resume(with: outcome) }
        return true
    }

    /// Runs `body` in the transaction begun on `database`, then commits; rolls back when `body` or the commit fails.
    static func committing<T>(_ database: any SQLDatabase, _ body: () async throws -> T) async throws -> T {
        do {
            let value = try await body()
            try await database.raw("COMMIT").run()
            return value
        } catch {
            try? await database.raw("ROLLBACK").run()
            throw error
        }
    }

    /// The database could not be reached or used at all: retrying job by job would only wait longer. A transaction
    /// PostgreSQL rolled back (class 40: a deadlock with another instance, a serialization failure) is no outage: its
    /// jobs are retried one by one.
    static func isOutage(_ error: any Error) -> Bool {
        if let error = error as? PSQLError, let state = error.serverInfo?[.sqlState], state.hasPrefix("40") { return false }
        if case AuthStoreError.unavailable = SQLAuthStore.translate(error) { return true }
        return false
    }
}
