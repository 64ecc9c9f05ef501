import Foundation
import Hummingbird
import LatchkeyTestSupport
import Logging
import Synchronization
import Testing

/// `kill -9` after a change committed and before its webhook went out: the event is delivered after the restart.
@Suite("Faults: kill -9 between a change and its webhook", .serialized, .enabled(if: loadTestsEnabled, "a load suite: LATCHKEY_LOAD_TESTS=1"))
struct WebhookCrashTests {
    /// A backend on loopback that keeps every delivery's webhook-id and body once it is `open`, and answers 503 before.
    /// It listens from the start, on a port the kernel chose, so no other process can take its port in between.
    final class Backend: Sendable {
        let received = Mutex<[(id: String, body: String)]>([])
        let isOpen = Atomic<Bool>(false)
        let port = Mutex<Int?>(nil)

        func run() async throws {
            let router = Router()
            router.post("/hooks") { [self] request, _ -> HTTPResponse.Status in
                let body = try await request.body.collect(upTo: 1 << 20)
                guard isOpen.load(ordering: .acquiring) else { return .serviceUnavailable }
                let id = request.headers.first { $0.name.canonicalName == "webhook-id" }?.value ?? ""
                received.withLock { $0.append((id, String(buffer: body))) }
                return .noContent
            }
            var quiet = Logger(label: "latchkey.tests.backend")
            quiet.logLevel = .critical
            try await Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { [self] channel in port.withLock { $0 = channel.localAddress?.port } }, logger: quiet
            ).runService(gracefulShutdownSignals: [])
        }

        func createdUsers() -> Set<String> {
            Set(
                received.withLock { $0 }.compactMap { item -> String? in
                    guard let event = try? JSONSerialization.jsonObject(with: Data(item.body.utf8)) as? [String: Any],
                        event["type"] as? String == "user.created"
                    else { return nil }
                    return (event["data"] as? [String: Any])?["userId"] as? String
                })
        }
    }

    static func scenario(sqlite: Bool) async throws {
        let backend = Backend()
        let running = Task { try await backend.run() }
        defer { running.cancel() }
        try await poll(until: "the backend to listen", within: .seconds(10)) { backend.port.withLock { $0 } != nil }
        // Until the kill, the backend answers 503: attempts made before it fail and are retried on the schedule.
        // A 2 s attempt timeout keeps the lease on deliveries claimed when the process dies at 8 × 2 s + 50 s.
        let fleet = try await Fleet(
            instances: 1,
            environment: [
                "LATCHKEY_WEBHOOKS_0_URL": "http://127.0.0.1:\(backend.port.withLock { $0 }!)/hooks",
                "LATCHKEY_WEBHOOKS_0_SECRET": "whsec_" + Data(repeating: 7, count: 32).base64EncodedString(),
                "LATCHKEY_WEBHOOK_TIMEOUT": "2",
            ], sqlite: sqlite)
        defer { fleet.stop() }
        var users: Set<String> = []
        for _ in 0..<5 {
            let session = try await fleet.signIn(at: 0)
            let me = try await fleet.get(0, "/v1/me", bearer: session.access)
            users.insert(try #require(me.json["id"] as? String))
        }
        fleet.kill(0)
        #expect(backend.createdUsers().isEmpty)
        backend.isOpen.store(true, ordering: .releasing)
        try await fleet.start(0)
        // A delivery claimed when the process died waits for its lease (66 s); one refused before waits for its retry.
        try await poll(
            until: "every user.created after the restart (received: \(backend.createdUsers().count))", within: .seconds(150), every: .milliseconds(200)
        ) {
            backend.createdUsers().isSuperset(of: users)
        }
        let ids = backend.received.withLock { $0.map(\.id) }
        print("webhooks after kill -9 (\(sqlite ? "SQLite" : "PostgreSQL")): \(users.count) user.created delivered, \(ids.count) deliveries received")
        #expect(ids.allSatisfy { $0.hasPrefix("msg_") })
    }

    @Test("SQLite: user.created events committed before kill -9 are delivered after the restart")
    func sqlite() async throws { try await Self.scenario(sqlite: true) }

    @Test(
        "PostgreSQL: user.created events committed before kill -9 are delivered after the restart",
        .enabled(if: Fleet.databaseURL != nil, "needs LATCHKEY_TEST_DATABASE_URL"))
    func postgres() async throws { try await Self.scenario(sqlite: false) }
}
