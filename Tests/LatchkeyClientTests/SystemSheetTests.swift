import Foundation
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

/// The wait for a system sheet, decided here for the Apple-only shells (the web sheet's `ASWebAuthenticationSession`,
/// the passkey sheet's `ASAuthorizationController`), which only translate: one result, the first, whoever reports it
/// and from whatever thread; and the cancellation of the waiting task ends the wait and closes the sheet.
@Suite("Client: waiting for a system sheet (the web sheet, the passkey sheet)")
struct SystemSheetTests {
    static let url = URL(string: "com.example.app:/cb?code=c&state=s")!

    @Test("cancelling the waiting task ends the wait with CancellationError and closes the sheet once; its own end after that is ignored")
    func cancelWhileShown() async throws {
        let sheet = FakeSheet()
        let task = Task { try await sheet.wait() }
        defer { sheet.once?.resume(.failure(.webSheetUnavailable("the test is over"))) }
        try await poll(until: "the sheet is shown", within: .seconds(10)) { sheet.shown == 1 }
        task.cancel()
        // Ignoring the cancellation, the wait would go on until the sheet answers: the poll fails first.
        try await poll(until: "the wait ends", within: .seconds(10)) { sheet.outcome != nil }
        #expect(sheet.outcome?.error is CancellationError)
        try await poll(until: "the sheet is closed", within: .seconds(10)) { sheet.closed == 1 }
        // The cancelled sheet reports its end (ASWebAuthenticationSession: canceledLogin; ASAuthorizationController:
        // an error to its delegate), and a completion handler may run twice: neither resumes again.
        let once = try #require(sheet.once)
        #expect(!once.resume(.failure(.cancelled)))
        #expect(!once.resume(.success(Self.url)))
        #expect(once.ignoredCalls == 2)
        #expect(!once.cancel(), "a second cancellation closes nothing")
        #expect(sheet.closed == 1 && sheet.shown == 1)
    }

    @Test("a task cancelled before the sheet is shown never shows it, and ends with CancellationError")
    func cancelledBeforeShown() async throws {
        let sheet = FakeSheet()
        Task {
            withUnsafeCurrentTask { $0?.cancel() }
            _ = try await sheet.wait()
        }
        defer { sheet.once?.resume(.failure(.webSheetUnavailable("the test is over"))) }
        try await poll(until: "the wait ends", within: .seconds(10)) { sheet.outcome != nil }
        #expect(sheet.outcome?.error is CancellationError)
        #expect(sheet.shown == 0)
        #expect(sheet.closed == 0)
    }

    @Test("an answer before the cancellation wins, and the cancellation then closes nothing")
    func answerThenCancel() async throws {
        let sheet = FakeSheet()
        let task = Task { try await sheet.wait() }
        try await poll(until: "the sheet is shown", within: .seconds(10)) { sheet.shown == 1 }
        let once = try #require(sheet.once)
        #expect(once.resume(.success(Self.url)))
        #expect(try await task.value == Self.url)
        task.cancel()
        #expect(!once.cancel())
        #expect(sheet.closed == 0)
    }

    @Test("the sheet's answer from eight threads at once, one of them the task's cancellation, then start()'s refusal: one resume, the first")
    func resumesOnce() async {
        let counted = Counter()
        let ignored = Counter()
        do {
            let result: URL = try await withCheckedThrowingContinuation { continuation in
                let once = SystemSheet.ResumeOnce<URL>()
                #expect(once.attach(continuation))
                DispatchQueue.concurrentPerform(iterations: 8) { index in
                    let won = index == 3 ? once.cancel() : once.resume(index == 0 ? .success(Self.url) : .failure(.cancelled))
                    if won { counted.add() }
                }
                if once.resume(.failure(.webSheetUnavailable("start() refused"))) { counted.add() }
                for _ in 0..<once.ignoredCalls { ignored.add() }
            }
            #expect(result == Self.url)
            #expect(ignored.value == 7, "the other six answers and start()'s refusal")
        } catch is CancellationError {
            #expect(ignored.value == 8, "the seven answers and start()'s refusal")
        } catch {
            #expect(error as? LatchkeyClientError == .cancelled)
            #expect(ignored.value == 7)
        }
        #expect(counted.value == 1)
    }
}

/// A sheet as a shell drives one: `wait()` shows it through `SystemSheet.run`, and the test answers through `once`.
private final class FakeSheet: @unchecked Sendable {
    // @unchecked: every stored property is only used while holding `lock`.
    private let lock = NSLock()
    private var box: SystemSheet.ResumeOnce<URL>?
    private var shownCount = 0
    private var closedCount = 0
    private var result: Result<URL, any Error>?

    var once: SystemSheet.ResumeOnce<URL>? { lock.withLock { box } }
    var shown: Int { lock.withLock { shownCount } }
    var closed: Int { lock.withLock { closedCount } }
    var outcome: Result<URL, any Error>? { lock.withLock { result } }

    func wait() async throws -> URL {
        do {
            let url = try await SystemSheet.run { once in
                self.lock.withLock {
                    self.box = once
                    self.shownCount += 1
                }
            } close: {
                self.lock.withLock { self.closedCount += 1 }
            }
            lock.withLock { result = .success(url) }
            return url
        } catch {
            lock.withLock { result = .failure(error) }
            throw error
        }
    }
}

extension Result {
    fileprivate var error: Failure? {
        guard case .failure(let error) = self else { return nil }
        return error
    }
}
