import AsyncHTTPClient
import Foundation
import Hummingbird
import LatchkeyBenchReport
import LatchkeyEmulator
import Logging
import Synchronization

extension ServerBench {
    /// Durable rotations on a server exporting every span (`otel.sampleRatio` 1, to an OTLP/HTTP sink in this process)
    /// against a server without tracing, started alike and taking turns; and each server's CPU per rotation.
    func tracingRows(environment: [String: String], directory: String, emulator: RunningEmulator, http: HTTPClient) async throws -> [BenchRow] {
        let received = Mutex(0)
        let (port, receiving) = try await Self.receiver { router in
            router.post("/v1/traces") { request, _ -> HTTPResponse.Status in
                let body = try await request.body.collect(upTo: 64 << 20)
                received.withLock { $0 += body.readableBytes }
                return .ok
            }
        }
        defer { receiving.cancel() }

        let plain = try ChildServer(environment: environment.merging(["LATCHKEY_DATABASE_URL": directory + "/untraced.sqlite"]) { $1 })
        defer { plain.stop() }
        let traced = try ChildServer(
            environment: environment.merging([
                "LATCHKEY_DATABASE_URL": directory + "/traced.sqlite", "LATCHKEY_OTEL_ENDPOINT": "http://127.0.0.1:\(port)", "LATCHKEY_OTEL_SAMPLE_RATIO": "1",
            ]) { $1 })
        defer { traced.stop() }
        let plainSessions = try await signIn(try await mintSignIns(emulator: emulator, http: http, count: 64, provider: "google"), server: plain, http: http).1
        let tracedSessions = try await signIn(try await mintSignIns(emulator: emulator, http: http, count: 64, provider: "google"), server: traced, http: http)
            .1
        let (withTracing, without) = try await rotationTurns(traced, tracedSessions.map(\.refreshToken), plain, plainSessions.map(\.refreshToken), http: http)
        guard received.withLock({ $0 }) > 0 else { throw BenchError("the traced server exported no spans") }
        return [
            BenchRow(
                name: "refresh_rotation_traced_ratio_1", opsPerSecond: withTracing.rate, baselineName: "refresh_rotation_untraced_alongside",
                baselineOpsPerSecond: without.rate, unit: .operationsPerSecond),
            BenchRow(
                name: "server_cpu_us_per_traced_rotation", opsPerSecond: withTracing.cpu / Double(withTracing.count) * 1e6,
                baselineName: "server_cpu_us_per_untraced_rotation_alongside", baselineOpsPerSecond: without.cpu / Double(without.count) * 1e6,
                unit: .microseconds),
        ]
    }
}
