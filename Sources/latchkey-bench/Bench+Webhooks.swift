import AsyncHTTPClient
import Foundation
import Hummingbird
import LatchkeyBenchReport
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import Logging
import Synchronization

extension ServerBench {
    /// Google sign-ins on a server with one webhook endpoint against the same on `plain` (none), taking turns, and
    /// the hooked server's CPU per delivery: its CPU for the sign-ins and for delivering every `user.created` they
    /// caused, less the plain server's for as many sign-ins, per delivery.
    func webhookRows(plain: ChildServer, environment: [String: String], emulator: RunningEmulator, http: HTTPClient) async throws -> [BenchRow] {
        let (receiver, settings, receiving) = try await Self.countingEndpoint()
        defer { receiving.cancel() }
        let hooked = try ChildServer(environment: environment.merging(settings) { $1 })
        defer { hooked.stop() }

        let count = max(800, Int(400 * seconds))
        let plainSignIns = try await mintSignIns(emulator: emulator, http: http, count: count, provider: "google")
        let hookedSignIns = try await mintSignIns(emulator: emulator, http: http, count: count, provider: "google")
        var (plainSeconds, plainCPU, hookedSeconds, hookedCPU) = (0.0, 0.0, 0.0, 0.0)
        for round in 0..<Self.rounds {
            let (_, cpu, wall) = try await plain.metered { try await signIn(Self.share(plainSignIns, round), server: plain, http: http) }
            (plainSeconds, plainCPU) = (plainSeconds + wall, plainCPU + cpu)
            let (_, hookedRoundCPU, hookedWall) = try await hooked.metered { try await signIn(Self.share(hookedSignIns, round), server: hooked, http: http) }
            (hookedSeconds, hookedCPU) = (hookedSeconds + hookedWall, hookedCPU + hookedRoundCPU)
        }
        // The deliveries still owed, then the CPU they took.
        let (_, drainCPU, _) = try await hooked.metered {
            let deadline = ContinuousClock.now + .seconds(120)
            while receiver.total < count {
                guard ContinuousClock.now < deadline else { throw BenchError("only \(receiver.total) of \(count) webhook deliveries arrived") }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        return [
            BenchRow(
                name: "google_sign_in_with_one_webhook_endpoint", opsPerSecond: Double(count) / hookedSeconds, baselineName: "google_sign_in_without_webhooks",
                baselineOpsPerSecond: Double(count) / plainSeconds, unit: .operationsPerSecond),
            BenchRow(
                name: "server_cpu_us_per_webhook_delivery", opsPerSecond: max(0, hookedCPU + drainCPU - plainCPU) / Double(receiver.total) * 1e6,
                baselineName: "server_cpu_us_per_google_sign_in_without_webhooks", baselineOpsPerSecond: plainCPU / Double(count) * 1e6, unit: .microseconds),
        ]
    }
}

extension ServerBench {
    /// A webhook endpoint in this process that counts the deliveries it gets, and the settings that point a server at it.
    static func countingEndpoint() async throws -> (counter: DeliveryCounter, settings: [String: String], task: Task<Void, any Error>) {
        let counter = DeliveryCounter()
        let (port, task) = try await receiver { router in
            router.post("/hooks") { [counter] _, _ -> HTTPResponse.Status in
                counter.count()
                return .noContent
            }
        }
        let settings = ["LATCHKEY_WEBHOOKS_0_URL": "http://127.0.0.1:\(port)/hooks", "LATCHKEY_WEBHOOKS_0_SECRET": WebhookEndpoint.generateSecret()]
        return (counter, settings, task)
    }
}

/// Counts the deliveries a receiver got.
final class DeliveryCounter: Sendable {
    private let received = Atomic<Int>(0)
    func count() { received.add(1, ordering: .relaxed) }
    var total: Int { received.load(ordering: .relaxed) }
}

extension ServerBench {
    /// An HTTP server in this process on a free loopback port, with the routes `routes` adds: the bench's stand-in for
    /// what a server under test calls (a webhook endpoint, an OTLP collector). Cancel the task to stop it.
    static func receiver(_ routes: (Router<BasicRequestContext>) -> Void) async throws -> (port: Int, task: Task<Void, any Error>) {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let router = Router()
        routes(router)
        var quiet = Logger(label: "latchkey.bench.receiver")
        quiet.logLevel = .critical
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) },
            logger: quiet)
        let task = Task { try await application.runService() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw BenchError("a receiver of the bench did not start")
        }
        return (port, task)
    }
}
