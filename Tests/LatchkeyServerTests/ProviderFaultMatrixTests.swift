import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Synchronization
import Testing

/// Apple down, slow, answering 5xx, 429 or garbage at each stage it takes part in: sign-in (its keys and the code
/// exchange), the daily validation of its refresh token, and revocation. The documented behaviour is the table in
/// docs/apple-errors.md ("When Apple is down, slow or garbled"); each row is checked here or where listed below.
///
/// Covered elsewhere, so not repeated here:
/// - code exchange × 5xx: `SignInHardeningTests.releasedAfterFailure` (503, and the same token and code sign in afterwards)
/// - daily validation × 5xx: `AppleLifecycleTests.appleUnreachable` (200 within 72 h, then 503 with Retry-After; Apple
///   asked at most once an hour)
/// - revocation × 5xx: `AppleLifecycleTests.deletionWhileAppleIsDown` (deleted at once, retried from the outbox until Apple
///   answers); across a fleet, `FleetTests.outboxOnce` and `FleetTests.outboxSurvivesKill`
/// - Apple's client alone: `AppleClientTests.retries` (5xx and 429 retried for safe calls, never for the code exchange),
///   `.unreachable` (connection refused), `.unreadable` (garbage); `ControlAndFaultTests.statusFault` and `.otherFaults`
///   (each emulator fault reaches the client as its typed error)
/// - the key cache alone: `JWKSCacheTests.staleWhileUnreachable`, `.unavailable`, `.badAnswers`
///
/// The server's provider timeout (10 s) has no setting, so the server talks to Apple through a ``ProviderLine``:
/// AsyncHTTPClient as in production, but calls to the faulted endpoint get a short timeout, and go to a port nothing
/// listens on when Apple is down.
@Suite("Server: Apple down, slow, 5xx, 429 or garbled at sign-in, validation, revocation and key fetch", .timeLimit(.minutes(2)))
struct ProviderFaultMatrixTests {
    /// Stands in for the provider timeout in the faulted calls.
    static let timeout: Duration = .milliseconds(250)
    /// How late a slow Apple answers: well past ``timeout``.
    static let latencyMilliseconds = 1000

    enum Fault: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Connection refused.
        case down
        /// No answer within the timeout.
        case slow
        case serverError = "5xx"
        case rateLimited = "429"
        /// 200 with a body that is not JSON.
        case garbage
        var testDescription: String { rawValue }

        /// The error Apple's client reports, which an owed revocation keeps as its last error.
        var code: String {
            switch self {
            case .down, .slow, .serverError: "provider_unavailable"
            case .rateLimited: "provider_rate_limited"
            case .garbage: "invalid_provider_response"
            }
        }

        /// Calls to Apple for a safe call (validation, revocation): transient faults are retried, 3 attempts in all.
        var attempts: Int { self == .garbage ? 1 : 3 }
    }

    /// How long a request may take when it waits for `attempts` timed-out calls: never a hang. Generous, because the
    /// whole test suite shares two cores.
    static func bound(attempts: Int) -> Duration { timeout * attempts + .seconds(30) }

    // MARK: Sign-in: the code exchange

    @Test(
        "sign-in: Apple failing the code exchange answers 503 temporarily_unavailable (garbage: 502 invalid_provider_response), creates nothing, and the sign-in can be sent again",
        arguments: [Fault.down, .slow, .rateLimited, .garbage])
    func codeExchange(fault: Fault) async throws {
        try await FaultRig.with { rig in
            let sub = try await rig.harness.emulator.createUser()
            let body = try await rig.appleSignIn(sub: sub)
            try await rig.arm(fault, at: "/auth/token")
            let (answer, elapsed) = try await rig.timed { try await rig.harness.post("/v1/auth/apple", json: body) }
            if fault == .garbage {
                #expect(answer.status == 502, "\(answer.text)")
                #expect(answer.error == "invalid_provider_response")
            } else {
                #expect(answer.status == 503, "\(answer.text)")
                #expect(answer.error == "temporarily_unavailable")
                #expect(answer.headers["retry-after"] != nil)
            }
            #expect(rig.line.calls(to: "/auth/token") == 1)  // a code is single-use: never retried
            #expect(elapsed < Self.bound(attempts: 1))
            #expect(try await rig.harness.store.identity(provider: "apple", subject: sub) == nil)

            try await rig.heal()
            // A slow Apple may still redeem the code after the server gave up (the emulator does once its delay is over):
            // the code is then spent, and the app signs in with Apple again.
            var spent = false
            if fault == .slow {
                do {
                    try await poll(until: "the slow Apple to redeem the code", within: .seconds(5), every: .milliseconds(20)) {
                        try await rig.codeRedemptions() == 1
                    }
                    spent = true
                } catch is PollTimeout {}  // not redeemed: the code is still good
            }
            let again = try await rig.harness.post("/v1/auth/apple", json: body)
            if spent {
                #expect(again.status == 400, "\(again.text)")
                #expect(again.error == "invalid_grant")
                let fresh = try await rig.harness.post("/v1/auth/apple", json: try await rig.appleSignIn(sub: sub))
                #expect(fresh.status == 200, "\(fresh.text)")
            } else {
                #expect(again.status == 200, "\(again.text)")
                #expect(try again.decode(SignInResponse.self).isNewUser)
            }
        }
    }

    // MARK: The daily validation

    @Test(
        "daily validation: while Apple fails, refreshes go on (no session ends, Apple asked at most once an hour) until 72 h, then 503; afterwards the same token refreshes",
        arguments: [Fault.down, .slow, .rateLimited, .garbage])
    func dailyValidation(fault: Fault) async throws {
        try await FaultRig.with { rig in
            let harness = rig.harness
            let (sub, tokens) = try await harness.signedIn()
            let identity = try #require(try await harness.store.identity(provider: "apple", subject: sub))
            let grant = try #require(try await harness.store.providerGrant(identityID: identity.id))
            func sessionsAlive() async throws -> Bool {
                let sessions = try await harness.store.sessions(userID: identity.userID)
                return !sessions.isEmpty && sessions.allSatisfy { !$0.isRevoked }
            }
            harness.clock.advance(86_401)
            // Calls to Apple's token endpoint from here on: the sign-in made its code exchange through the same line.
            let signInCalls = rig.line.calls(to: "/auth/token")
            func tokenCalls() -> Int { rig.line.calls(to: "/auth/token") - signInCalls }
            try await rig.arm(fault, at: "/auth/token")
            let (first, elapsed) = try await rig.timed { try await rig.harness.refresh(tokens.refreshToken) }
            #expect(first.status == 200, "\(first.text)")
            #expect(tokenCalls() == fault.attempts)
            #expect(elapsed < Self.bound(attempts: fault.attempts))
            // Nothing is lost: the grant stays, unconfirmed, and no session ends.
            #expect(try await harness.store.providerGrant(identityID: identity.id)?.lastValidatedAt == grant.lastValidatedAt)
            #expect(try await sessionsAlive())
            // Apple is not asked again within the hour.
            var current = try first.decode(TokenPairResponse.self).refreshToken
            let second = try await rig.harness.refresh(current)
            #expect(second.status == 200, "\(second.text)")
            current = try second.decode(TokenPairResponse.self).refreshToken
            #expect(tokenCalls() == fault.attempts)

            // 72 h after the last confirmation (apple.unreachableGrace), refreshes wait for Apple: 503, the token stays good.
            harness.clock.advance(2 * 86_400)
            let refused = try await rig.harness.refresh(current)
            #expect(refused.status == 503, "\(refused.text)")
            #expect(refused.error == "temporarily_unavailable")
            #expect(refused.headers["retry-after"] != nil)
            #expect(tokenCalls() == 2 * fault.attempts)
            #expect(try await sessionsAlive())

            try await rig.heal()
            harness.clock.advance(3601)
            let recovered = try await rig.harness.refresh(current)
            #expect(recovered.status == 200, "\(recovered.text)")
            let confirmed = try #require(try await harness.store.providerGrant(identityID: identity.id))
            #expect(abs(confirmed.lastValidatedAt.timeIntervalSince(harness.clock.now)) < 1)
        }
    }

    // MARK: Revocation

    @Test(
        "revocation: deleting the account while Apple fails still deletes at once; the revocation is owed in the outbox, retried with backoff and made once Apple answers (a garbled 200 is a revocation)",
        arguments: [Fault.down, .slow, .rateLimited, .garbage])
    func revocation(fault: Fault) async throws {
        try await FaultRig.with { rig in
            let harness = rig.harness
            let (sub, tokens) = try await harness.signedIn()
            try await rig.arm(fault, at: "/auth/revoke")
            let (answer, elapsed) = try await rig.timed { try await rig.harness.send("DELETE", "/v1/me", bearer: tokens.accessToken) }
            #expect(answer.status == 200, "\(answer.text)")
            #expect(rig.line.calls(to: "/auth/revoke") == fault.attempts)
            #expect(elapsed < Self.bound(attempts: fault.attempts))
            #expect(try await harness.store.identity(provider: "apple", subject: sub) == nil)
            #expect(try await rig.harness.refresh(tokens.refreshToken).error == "invalid_grant")
            if fault == .garbage {
                // Apple answers a revocation with an empty 200; its body is never read.
                #expect(answer.json["tokensRevoked"] as? Int == 1)
                #expect(answer.json["revocationsPending"] as? Int == 0)
                #expect(try await harness.store.outboxItems().isEmpty)
                return
            }
            #expect(answer.json["tokensRevoked"] as? Int == 0)
            #expect(answer.json["revocationsPending"] as? Int == 1)
            var item = try #require(try await harness.store.outboxItems().first)
            #expect(item.provider == "apple")
            #expect(item.lastError == fault.code)
            #expect(item.attempts == 0)
            #expect(abs(item.nextAttemptAt.timeIntervalSince(harness.clock.now) - 30) < 1)

            // Due, and Apple still fails: one more attempt, the next one twice as far off.
            harness.clock.advance(31)
            #expect(try await rig.harness.server.sessions.grants.processOutbox() == 0)
            #expect(rig.line.calls(to: "/auth/revoke") == 2 * fault.attempts)
            item = try #require(try await harness.store.outboxItems().first)
            #expect(item.attempts == 1)
            #expect(item.lastError == fault.code)
            #expect(item.completedAt == nil)
            #expect(abs(item.nextAttemptAt.timeIntervalSince(harness.clock.now) - 60) < 1)

            try await rig.heal()
            harness.clock.advance(61)
            #expect(try await rig.harness.server.sessions.grants.processOutbox() == 1)
            item = try #require(try await harness.store.outboxItems().first)
            #expect(item.completedAt != nil)
            #expect(item.lastError == nil)
        }
    }

    // MARK: Apple's keys

    @Test(
        "Apple's keys: with none cached, a sign-in answers 503 temporarily_unavailable and the same token signs in once Apple answers; stale cached keys keep signing in",
        arguments: Fault.allCases)
    func keys(fault: Fault) async throws {
        try await FaultRig.with { rig in
            let harness = rig.harness
            let sub = try await harness.emulator.createUser()
            // The server has signed nobody in: no keys cached.
            let body = try await rig.appleSignIn(sub: sub, withCode: false)
            try await rig.arm(fault, at: "/auth/keys")
            let (cold, elapsed) = try await rig.timed { try await rig.harness.post("/v1/auth/apple", json: body) }
            #expect(cold.status == 503, "\(cold.text)")
            #expect(cold.error == "temporarily_unavailable")
            #expect(cold.headers["retry-after"] != nil)
            #expect(rig.line.calls(to: "/auth/keys") == 1)  // never retried within a request
            #expect(elapsed < Self.bound(attempts: 1))
            #expect(try await harness.store.identity(provider: "apple", subject: sub) == nil)
            try await rig.heal()
            let signedIn = try await rig.harness.post("/v1/auth/apple", json: body)
            #expect(signedIn.status == 200, "\(signedIn.text)")

            // An hour on, the keys are past Apple's max-age (3600 s) and Apple fails again: the cached keys serve.
            harness.clock.advance(3601)
            _ = try await harness.emulator.send("POST", "/emulator/clock", json: ["offsetSeconds": 3601])
            let later = try await rig.appleSignIn(sub: sub, withCode: false)
            try await rig.arm(fault, at: "/auth/keys")
            let (stale, staleElapsed) = try await rig.timed { try await rig.harness.post("/v1/auth/apple", json: later) }
            #expect(stale.status == 200, "\(stale.text)")
            #expect(rig.line.calls(to: "/auth/keys") == 3)  // the cold failure, the fetch after it, the stale refresh
            #expect(staleElapsed < Self.bound(attempts: 1))
        }
    }

    /// Every fault becomes `keys_unavailable` inside the cache, so one stands for all.
    @Test(
        "Apple's keys: a token signed with a key Apple has just rotated in, while its keys cannot be fetched, gets 503 temporarily_unavailable (whether the key exists is unknown), also once the fetch budget is spent"
    )
    func rotatedKeyWhileKeysFail() async throws {
        try await FaultRig.with { rig in
            let harness = rig.harness
            let sub = try await harness.emulator.createUser()
            let first = try await rig.harness.post("/v1/auth/apple", json: try await rig.appleSignIn(sub: sub, withCode: false))
            #expect(first.status == 200, "\(first.text)")
            _ = try await harness.emulator.send("POST", "/emulator/keys/rotate")
            let body = try await rig.appleSignIn(sub: sub, withCode: false)
            try await rig.arm(.serverError, at: "/auth/keys")
            let fetchesBefore = rig.line.calls(to: "/auth/keys")
            for _ in 0..<5 {
                let refused = try await rig.harness.post("/v1/auth/apple", json: body)
                #expect(refused.status == 503, "\(refused.text)")
                #expect(refused.error == "temporarily_unavailable")
                #expect(refused.headers["retry-after"] != nil)
            }
            // Within the refetch budget (3 back to back, then one per 2 s; the first sign-in's fetch spent one).
            #expect((1...3).contains(rig.line.calls(to: "/auth/keys") - fetchesBefore))
            try await rig.heal()
            harness.clock.advance(2)
            let again = try await rig.harness.post("/v1/auth/apple", json: body)
            #expect(again.status == 200, "\(again.text)")
        }
    }
}

// MARK: - The way to Apple

/// The server's way to Apple: AsyncHTTPClient as in production, except for the one endpoint a test cuts: its calls get
/// the short timeout and, when Apple is down, go to a port nothing listens on. Counts the calls made to each path.
final class ProviderLine: HTTPTransport {
    private struct Cut {
        var path: String
        var refused: Bool
    }

    private let network = AsyncHTTPClientTransport()
    private let current = Mutex<Cut?>(nil)
    private let counts = Mutex<[String: Int]>([:])
    let timeout: Duration

    init(timeout: Duration) { self.timeout = timeout }

    func cut(_ path: String, refused: Bool) { current.withLock { $0 = Cut(path: path, refused: refused) } }
    func restore() { current.withLock { $0 = nil } }
    func calls(to path: String) -> Int { counts.withLock { $0[path] ?? 0 } }

    func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
        var request = request
        let path = URLComponents(string: request.url)?.path ?? request.url
        counts.withLock { $0[path, default: 0] += 1 }
        if let cut = current.withLock({ $0 }), cut.path == path {
            request.timeout = timeout
            if cut.refused { request.url = "http://127.0.0.1:1" + path }
        }
        return try await network.send(request)
    }
}

/// A ``ServerHarness`` whose server reaches Apple (the emulator) through a ``ProviderLine``.
struct FaultRig: Sendable {
    typealias Fault = ProviderFaultMatrixTests.Fault

    let harness: ServerHarness
    let line: ProviderLine

    static func with(_ body: (FaultRig) async throws -> Void) async throws {
        let line = ProviderLine(timeout: ProviderFaultMatrixTests.timeout)
        // A refresh waits for a due validation to the end (every attempt), however slowly the shared cores run it:
        // the tests count the attempts it made.
        try await ServerHarness.with(configure: { $0.session.providerValidationWait = 60 }, transport: line) { harness in
            try await body(FaultRig(harness: harness, line: line))
        }
    }

    // MARK: Faults

    /// Makes Apple fail at `endpoint` as `fault` says, until ``heal()``.
    func arm(_ fault: Fault, at endpoint: String) async throws {
        var spec: [String: any Sendable] = ["endpoint": endpoint]
        switch fault {
        case .down:
            line.cut(endpoint, refused: true)
            return
        case .slow:
            line.cut(endpoint, refused: false)
            spec["kind"] = "latency"
            spec["latencyMilliseconds"] = ProviderFaultMatrixTests.latencyMilliseconds
        case .serverError:
            spec["kind"] = "status"
            spec["status"] = 503
        case .rateLimited:
            spec["kind"] = "rate_limit"
        case .garbage:
            spec["kind"] = "malformed_json"
        }
        let answer = try await harness.emulator.send("POST", "/emulator/faults", json: spec)
        guard answer.status == 201 else { throw HarnessError("setting the fault answered \(answer.status): \(answer.text)") }
    }

    /// Apple answers normally again.
    func heal() async throws {
        line.restore()
        _ = try await harness.emulator.send("DELETE", "/emulator/faults")
    }

    /// Authorization codes the emulator redeemed.
    func codeRedemptions() async throws -> Int {
        try await harness.emulator.requestLog().filter {
            $0["endpoint"] as? String == "/auth/token" && $0["grantType"] as? String == "authorization_code" && $0["status"] as? Int == 200
        }.count
    }

    // MARK: Sign-ins

    /// A native sign-in minted at the emulator, as the app sends it to `POST /v1/auth/apple`.
    func appleSignIn(sub: String, withCode: Bool = true) async throws -> [String: any Sendable] {
        let nonce = "nonce-\(UUID().uuidString)"
        let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
        var body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": nonce]
        if withCode { body["authorizationCode"] = apple.code }
        return body
    }

    /// `work`'s result and how long it took.
    func timed<T>(_ work: () async throws -> T) async throws -> (T, Duration) {
        let start = ContinuousClock.now
        let value = try await work()
        return (value, ContinuousClock.now - start)
    }
}
