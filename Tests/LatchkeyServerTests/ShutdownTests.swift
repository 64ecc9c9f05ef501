import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import LatchkeyTestSupport
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@Suite("Graceful shutdown")
struct ShutdownTests {
    /// A provider whose revocations never answer until they are cancelled; counts them. Anything else gets a 503.
    final class HangingTransport: HTTPTransport {
        let revocationsBegun = Mutex(0)

        func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
            guard request.url.hasSuffix("/auth/revoke") else { return OutboundResponse(status: 503) }
            revocationsBegun.withLock { $0 += 1 }
            try? await Task.sleep(for: .seconds(3600))
            throw LatchkeyError(.providerUnavailable, "no answer")
        }
    }

    @Test("while an owed revocation hangs at an unresponsive provider, a graceful shutdown ends within seconds and the call stays owed")
    func shutdownWhileProviderHangs() async throws {
        let path = NSTemporaryDirectory() + "latchkey-shutdown-\(UUID().uuidString).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var quiet = Logger(label: "latchkey.test")
        quiet.logLevel = .critical
        let store = try await SQLAuthStore.open(.sqlite(path: path), logger: quiet)
        try await store.migrate()
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.apple = .init(
            teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8, clientIDs: [Fixtures.bundleID], baseURL: "http://127.0.0.1:9")
        let encryptionKey = SecretBox.generateKey()
        let transport = HangingTransport()
        let server = try await LatchkeyServer.make(
            configuration: configuration, store: store, encryptionKey: encryptionKey, transport: transport, logger: quiet)
        let now = Date()
        try await store.enqueue(
            OutboxItem(
                id: newIdentifier(), kind: OutboxItem.revocation, provider: "apple", clientID: Fixtures.bundleID,
                sealedPayload: try SecretBox(base64Key: encryptionKey).seal("r-owed"), nextAttemptAt: now, createdAt: now))

        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let group = ServiceGroup(
            services: server.services(with: server.makeApplication { continuation.yield($0) }), gracefulShutdownSignals: [], logger: quiet)
        let running = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        _ = try #require(await iterator.next())
        try await poll(until: "the outbox to begin a revocation", within: .seconds(10), every: .milliseconds(25)) {
            transport.revocationsBegun.withLock { $0 } > 0
        }
        #expect(transport.revocationsBegun.withLock { $0 } == 1)

        await group.triggerGracefulShutdown()
        let stopped = await withTaskGroup(of: Bool.self) { race in
            race.addTask {
                _ = try? await running.value
                return true
            }
            race.addTask {
                try? await Task.sleep(for: .seconds(10))
                return false
            }
            let first = await race.next() ?? false
            if !first { running.cancel() }  // so that the test ends either way
            race.cancelAll()
            return first
        }
        #expect(stopped, "the server was still running 10 s after a graceful shutdown began")
        let owed = try await store.outboxItems()
        #expect(owed.count == 1)
        #expect(owed.first?.completedAt == nil)
        #expect(owed.first?.attempts == 0, "a call cut short by the shutdown counted as the provider's failure")
        await store.close()
    }

    @Test("the HTTP server comes last in the group's services, so a graceful shutdown stops it first")
    func applicationLast() async throws {
        try await ServerHarness.with { harness in
            let services = harness.server.services(with: harness.server.makeApplication())
            #expect(services.count == harness.server.services.count + 1)
            #expect(String(describing: type(of: services.last!)).contains("Application"))
        }
    }
}
