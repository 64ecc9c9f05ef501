import AsyncHTTPClient
import Foundation
import LatchkeyBenchReport
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import NIOCore
import NIOHTTP1
import Synchronization

/// `latchkey-bench --soak MINUTES`: mixed traffic against a `latchkey serve` child on SQLite, sampled every 10 s.
struct SoakBench {
    let minutes: Double
    let workers = 16
    let interval: Duration = .seconds(10)

    struct Sample {
        var elapsed: Double
        var rss: Double
        var descriptors: Int
        var databaseMegabytes: Double
        var p99Milliseconds: Double
        var requests: Int
    }

    /// Latencies of the current interval, and what each kind of request answered.
    final class Recorder: Sendable {
        private let latencies = Mutex<[Double]>([])
        private let failures = Mutex(0)
        func record(_ seconds: Double) { latencies.withLock { $0.append(seconds) } }
        func fail() { failures.withLock { $0 += 1 } }
        var failed: Int { failures.withLock { $0 } }
        /// The interval's 99th percentile in milliseconds and its request count; starts the next interval.
        func drain() -> (p99: Double, count: Int) {
            let values = latencies.withLock { values in
                defer { values.removeAll(keepingCapacity: true) }
                return values.sorted()
            }
            guard !values.isEmpty else { return (0, 0) }
            return (values[min(values.count - 1, Int(Double(values.count) * 0.99))] * 1000, values.count)
        }
    }

    func rows(printSample: (String) -> Void) async throws -> [BenchRow] {
        let (logger, directory, team, emulatorConfiguration) = try BenchSetUp.quietEmulator(clientID: "com.example.app")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let emulator = try await Emulator.start(configuration: emulatorConfiguration, logger: logger)
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 32
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        defer { _ = http.shutdown() }
        let database = directory + "/soak.sqlite"
        let server = try ChildServer(environment: [
            "LATCHKEY_APPLE_TEAM_ID": team.teamID, "LATCHKEY_APPLE_KEY_ID": team.keyID, "LATCHKEY_APPLE_PRIVATE_KEY_FILE": team.keyFile,
            "LATCHKEY_APPLE_CLIENT_IDS": "com.example.app", "LATCHKEY_APPLE_BASE_URL": emulator.baseURL, "LATCHKEY_DATABASE_URL": database,
            "LATCHKEY_ENCRYPTION_KEY": SecretBox.generateKey(), "LATCHKEY_RATE_LIMIT_PER_IP": "100000000", "LATCHKEY_RATE_LIMIT_PER_SUBJECT": "100000000",
        ])
        defer { server.stop() }
        let bench = ServerBench(seconds: 1)
        let recorder = Recorder()
        let deadline = ContinuousClock.now + .milliseconds(Int64(minutes * 60_000))
        let start = ContinuousClock.now
        var samples: [Sample] = []
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<workers {
                group.addTask {
                    var random = SystemRandomNumberGenerator()
                    var session: ServerBench.Session?
                    var step = worker
                    while ContinuousClock.now < deadline {
                        step += 1
                        guard let current = session else {
                            let minted = try await bench.mintSignIns(emulator: emulator, http: http, count: 1)[0]
                            let answer = try await timed(recorder) { try await tokens(json(http, server.url + minted.path, minted.body)) }
                            guard let access = answer?["accessToken"] as? String, let refresh = answer?["refreshToken"] as? String else { continue }
                            session = ServerBench.Session(accessToken: access, refreshToken: refresh)
                            continue
                        }
                        switch Int.random(in: 0..<100, using: &random) {
                        case 0..<50:
                            _ = try await timed(recorder) { try await send(http, "GET", server.url + "/v1/me", bearer: current.accessToken) }
                        case 50..<95:
                            let answer = try await timed(recorder) {
                                try await tokens(json(http, server.url + "/v1/token", ["grant_type": "refresh_token", "refresh_token": current.refreshToken]))
                            }
                            if let access = answer?["accessToken"] as? String, let refresh = answer?["refreshToken"] as? String {
                                session = ServerBench.Session(accessToken: access, refreshToken: refresh)
                            }
                        default:
                            // Logout, and the next step signs in again.
                            _ = try await timed(recorder) { try await send(http, "POST", server.url + "/v1/logout", bearer: current.accessToken) }
                            session = nil
                        }
                    }
                }
            }
            group.addTask {}
            while ContinuousClock.now < deadline {
                try await Task.sleep(for: interval)
                let (p99, count) = recorder.drain()
                let sample = Sample(
                    elapsed: (ContinuousClock.now - start).seconds, rss: server.residentMegabytes, descriptors: server.openDescriptors,
                    databaseMegabytes: Self.megabytes(database) + Self.megabytes(database + "-wal"), p99Milliseconds: p99, requests: count)
                samples.append(sample)
                printSample(
                    String(
                        format: "soak %6.0f s  rss %5.1f MB  fds %4d  database %6.1f MB  p99 %6.1f ms  %6.0f req/s", sample.elapsed, sample.rss,
                        sample.descriptors, sample.databaseMegabytes, sample.p99Milliseconds, Double(sample.requests) / interval.seconds))
            }
            try await group.waitForAll()
        }
        await emulator.stop()
        guard let last = samples.last else { throw BenchError("the soak ran for less than one sample (10 s)") }
        let firstMinute = samples.last { $0.elapsed <= 65 } ?? samples[0]
        return [
            BenchRow(
                name: "soak_rss_megabytes_at_end", opsPerSecond: last.rss, baselineName: "soak_rss_megabytes_after_1_min",
                baselineOpsPerSecond: firstMinute.rss, unit: .megabytes),
            BenchRow(
                name: "soak_open_descriptors_at_end", opsPerSecond: Double(last.descriptors), baselineName: "soak_open_descriptors_after_1_min",
                baselineOpsPerSecond: Double(firstMinute.descriptors), unit: .descriptors),
            BenchRow(
                name: "soak_p99_ms_last_10_s", opsPerSecond: last.p99Milliseconds, baselineName: "soak_p99_ms_at_1_min",
                baselineOpsPerSecond: firstMinute.p99Milliseconds, unit: .milliseconds),
            BenchRow(
                name: "soak_requests_per_second_last_10_s", opsPerSecond: Double(last.requests) / interval.seconds,
                baselineName: "soak_requests_per_second_at_1_min", baselineOpsPerSecond: Double(firstMinute.requests) / interval.seconds,
                unit: .requestsPerSecond),
            BenchRow(
                name: "soak_failed_requests", opsPerSecond: Double(recorder.failed), baselineName: "soak_requests",
                baselineOpsPerSecond: Double(samples.reduce(0) { $0 + $1.requests }), unit: .requests),
            BenchRow(
                name: "soak_database_megabytes_at_end", opsPerSecond: last.databaseMegabytes, baselineName: "soak_database_megabytes_after_1_min",
                baselineOpsPerSecond: firstMinute.databaseMegabytes, unit: .megabytes),
        ]
    }

    static func megabytes(_ path: String) -> Double {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.doubleValue ?? 0) / 1_048_576
    }
}

/// Runs one request, recording its latency, or a failure (an error or a status other than 2xx: nil).
private func timed<T>(_ recorder: SoakBench.Recorder, _ body: () async throws -> T?) async throws -> T? {
    let start = ContinuousClock.now
    do {
        let value = try await body()
        recorder.record((ContinuousClock.now - start).seconds)
        if value == nil { recorder.fail() }
        return value
    } catch {
        recorder.fail()
        return nil
    }
}

/// A sign-in or refresh answer, nil unless it holds tokens.
private func tokens(_ answer: [String: Any]) -> [String: Any]? {
    answer["accessToken"] is String && answer["refreshToken"] is String ? answer : nil
}

/// A request without a body; nil unless it answered 2xx.
private func send(_ http: HTTPClient, _ method: String, _ url: String, bearer: String) async throws -> Int? {
    var request = HTTPClientRequest(url: url)
    request.method = HTTPMethod(rawValue: method)
    request.headers.add(name: "Authorization", value: "Bearer \(bearer)")
    let response = try await http.execute(request, timeout: .seconds(30))
    _ = try await response.body.collect(upTo: 1 << 16)
    return (200..<300).contains(response.status.code) ? Int(response.status.code) : nil
}
