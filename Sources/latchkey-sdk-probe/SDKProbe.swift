import ArgumentParser
import Crypto
import Foundation
import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `latchkey-sdk-probe`: `LatchkeyClient` in a process of its own, for the SDK's two-process test and the SDK rows of
/// `latchkey-bench`. It is a separate executable so that `latchkey serve` does not load URLSession's networking
/// stack (libcurl and the TLS and Kerberos libraries behind it, about 6 MB resident) that only the SDK needs.
@main
struct SDKProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latchkey-sdk-probe", abstract: "Runs the Latchkey client SDK against a server, for tests and benchmarks.",
        subcommands: [Refresh.self, Burst.self])
}

/// `latchkey-sdk-probe refresh`: refreshes `--refreshes` times on a shared ``FileTokenStore``, each time as if its
/// access token had expired, and prints `presented <SHA-256 of the refresh token>` for every refresh token it sends
/// (never the token itself). With `--die-after-answer` it exits as soon as the server has answered, as an app killed
/// mid-refresh would.
///
/// With `--barrier DIR`, shared by `--parties` probes on one file, the probes race in every round: each round starts
/// when all of them have reached it (so their clocks, moved an hour per round, agree), a probe that claims the refresh
/// holds its request until another probe has seen its claim in the file (or 10 s have passed), and each probe prints
/// `claim seen <round>` when it saw another's claim and `token <round> <SHA-256 of the access token>` at the end of
/// each round.
struct Refresh: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refreshes on a shared token file, printing the hash of each refresh token sent.")

    @Option var baseUrl: String
    @Option var store: String
    @Option var refreshes = 5
    /// Exit (status 3) as soon as the server has answered a refresh, before the client can save the answer.
    @Flag var dieAfterAnswer = false
    @Option(help: "A directory the racing probes share; each round starts when --parties probes have reached it.")
    var barrier: String?
    @Option var parties = 2

    /// Prints the hash of each refresh token sent to `/v1/token`; in a race, holds it until another probe saw the claim.
    struct ReportingTransport: LatchkeyTransport {
        let inner = URLSessionTransport()
        let dieAfterAnswer: Bool
        let race: Race?
        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            if request.url?.path == "/v1/token", let body = request.httpBody,
                let token = String(decoding: body, as: UTF8.self).split(separator: "&").first(where: { $0.hasPrefix("refresh_token=") })
            {
                print("presented \(hash(token.dropFirst("refresh_token=".count)))")
                fflush(nil)
                try await race?.waitUntilClaimSeen()
            }
            let answer = try await inner.send(request)
            if dieAfterAnswer, request.url?.path == "/v1/token" { Foundation.exit(3) }
            return answer
        }
    }

    /// The file store, telling the race when it reads another process's refresh claim.
    struct ReportingStore: TokenStore {
        let inner: FileTokenStore
        let race: Race

        func load() throws -> StoredSession? {
            let session = try inner.load()
            if let marker = session?.pendingRefresh, marker.processID != getpid() { race.sawClaim() }
            return session
        }

        func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
            try inner.compareAndSwap(expected: expected, new: new)
        }
    }

    func run() async throws {
        guard let url = URL(string: baseUrl) else { throw ValidationError("--base-url is not a URL") }
        let clock = SkippingClock()
        let race = barrier.map { Race(directory: $0, parties: parties) }
        let file = FileTokenStore(url: URL(fileURLWithPath: store))
        let client = LatchkeyClient(
            baseURL: url, tokenStore: race.map { ReportingStore(inner: file, race: $0) } ?? file,
            transport: ReportingTransport(dieAfterAnswer: dieAfterAnswer, race: race), clock: clock)
        for round in 0..<refreshes {
            try await race?.start(round: round)
            clock.skip(3600)
            let token = try await client.validAccessToken()
            if race != nil { print("token \(round) \(hash(token))") }
        }
    }
}

/// Racing probes' shared state, in files of one directory: `ready-<round>-<pid>` when a probe reached a round,
/// `seen-<round>` when one saw another's claim.
final class Race: @unchecked Sendable {
    // @unchecked: `round` and `reported` are only used while holding `lock`; the rest are constants.
    private let lock = NSLock()
    private let directory: String
    private let parties: Int
    private var round = 0
    private var reported = -1

    init(directory: String, parties: Int) {
        self.directory = directory
        self.parties = parties
    }

    /// Returns when `parties` probes have reached `round`.
    func start(round: Int) async throws {
        lock.withLock { self.round = round }
        _ = FileManager.default.createFile(atPath: "\(directory)/ready-\(round)-\(getpid())", contents: nil)
        let deadline = Date().addingTimeInterval(60)
        while try FileManager.default.contentsOfDirectory(atPath: directory).filter({ $0.hasPrefix("ready-\(round)-") }).count < parties {
            guard Date() < deadline else { throw ValidationError("round \(round): the other probes never came") }
            try await Task.sleep(nanoseconds: 1_000_000)
        }
    }

    /// Another probe's claim was read in the current round.
    func sawClaim() {
        let round: Int? = lock.withLock {
            guard reported != self.round else { return nil }
            reported = self.round
            return self.round
        }
        guard let round else { return }
        print("claim seen \(round)")
        fflush(nil)
        _ = FileManager.default.createFile(atPath: "\(directory)/seen-\(round)", contents: nil)
    }

    /// Returns once another probe has seen this round's claim, or after 10 s (the test then finds no `claim seen`).
    func waitUntilClaimSeen() async throws {
        let path = "\(directory)/seen-\(lock.withLock { round })"
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: path), Date() < deadline { try await Task.sleep(nanoseconds: 1_000_000) }
    }
}

/// The SHA-256 of a token, in hex: what the probe prints instead of the token.
func hash(_ token: some StringProtocol) -> String {
    SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
}

/// `latchkey-sdk-probe burst`: signs in with the Apple sign-in read as JSON from standard input
/// (`identityToken`, `authorizationCode`, `rawNonce`), then sends 1,000 concurrent `GET /v1/me` with a fixed bearer
/// header, and 1,000 concurrent `data(for:)` calls just after the access token expired. Prints one JSON object:
/// `fixedPerSecond`, `sdkPerSecond`, and `refreshCalls` (the `POST /v1/token` calls the second burst caused).
struct Burst: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Times 1,000 concurrent requests with a fixed bearer and through the SDK.")

    @Option var baseUrl: String

    /// URLSession, counting `POST /v1/token`.
    final class CountingTransport: LatchkeyTransport, @unchecked Sendable {
        // @unchecked: `count` is only used while holding `lock`.
        private let inner = URLSessionTransport()
        private let lock = NSLock()
        private var count = 0
        var refreshes: Int { lock.withLock { count } }

        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            if request.url?.path == "/v1/token" { lock.withLock { count += 1 } }
            return try await inner.send(request)
        }
    }

    func run() async throws {
        guard let url = URL(string: baseUrl) else { throw ValidationError("--base-url is not a URL") }
        let input = FileHandle.standardInput.readDataToEndOfFile()
        guard let signIn = try? JSONSerialization.jsonObject(with: input) as? [String: String], let identityToken = signIn["identityToken"],
            let rawNonce = signIn["rawNonce"]
        else { throw ValidationError("standard input must be a JSON object with identityToken, authorizationCode and rawNonce") }

        let transport = CountingTransport()
        let clock = SkippingClock()
        let client = LatchkeyClient(baseURL: url, tokenStore: InMemoryTokenStore(), transport: transport, clock: clock)
        try await client.signInWithApple(identityToken: identityToken, authorizationCode: signIn["authorizationCode"], rawNonce: rawNonce)
        let token = try await client.validAccessToken()
        let request = URLRequest(url: url.appendingPathComponent("v1/me"))
        let fixed = try await Self.burst {
            var authorized = request
            authorized.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            return try await transport.send(authorized).1.statusCode == 200
        }
        let refreshesBefore = transport.refreshes
        clock.skip(3600)
        let sdk = try await Self.burst { try await (client.data(for: request).1 as? HTTPURLResponse)?.statusCode == 200 }
        let result: [String: Double] = ["fixedPerSecond": fixed, "sdkPerSecond": sdk, "refreshCalls": Double(transport.refreshes - refreshesBefore)]
        print(String(decoding: try JSONSerialization.data(withJSONObject: result, options: .sortedKeys), as: UTF8.self))
    }

    /// 1,000 concurrent calls of `send`, all of which must succeed; returns their rate.
    private static func burst(_ send: @escaping @Sendable () async throws -> Bool) async throws -> Double {
        let start = ContinuousClock.now
        let ok = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<1000 { group.addTask { try await send() ? 1 : 0 } }
            return try await group.reduce(0, +)
        }
        guard ok == 1000 else { throw ValidationError("only \(ok) of 1000 requests answered 200") }
        return 1000 / ((ContinuousClock.now - start) / .seconds(1))
    }
}

/// System time plus an offset the probe moves forward to make its access token due.
final class SkippingClock: LatchkeyClock, @unchecked Sendable {
    // @unchecked: `offset` is only used while holding `lock`.
    private let lock = NSLock()
    private var offset: TimeInterval = 0
    var now: Date { lock.withLock { Date().addingTimeInterval(offset) } }
    func skip(_ seconds: TimeInterval) { lock.withLock { offset += seconds } }
    func sleep(until deadline: Date) async throws {
        let wait = deadline.timeIntervalSince(now)
        if wait > 0 { try await Task.sleep(nanoseconds: UInt64(min(wait, 3600) * 1e9)) }
    }
}
