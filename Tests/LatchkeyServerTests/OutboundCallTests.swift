import Configuration
import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization
import Testing

@testable import LatchkeyServer

/// Calls out of the server (webhooks, providers) end within their deadline, head and body, and no configured URL can
/// crash the process when it is used.
@Suite("Server: outbound calls end within their deadline, and no URL crashes the process")
struct OutboundCallTests {
    /// A loopback receiver: `/drip` answers 200 at once, then one byte every 100 ms for a minute; `/endless` answers 200
    /// with a body that never ends, as fast as it is read; `/ok` answers 204 and counts what it got.
    final class Receiver: Sendable {
        let received = Mutex<[String]>([])
        let dripsStarted = Atomic<Int>(0)

        func run(_ body: (String) async throws -> Void) async throws {
            let router = Router()
            router.post("/drip") { [self] _, _ -> Response in
                dripsStarted.add(1, ordering: .relaxed)
                return Response(
                    status: .ok,
                    body: ResponseBody { writer in
                        for _ in 0..<600 {
                            try await Task.sleep(for: .milliseconds(100))
                            try await writer.write(ByteBuffer(string: " "))
                        }
                        try await writer.finish(nil)
                    })
            }
            router.post("/endless") { _, _ -> Response in
                Response(
                    status: .ok,
                    body: ResponseBody { writer in
                        let chunk = ByteBuffer(repeating: UInt8(ascii: "x"), count: 4096)
                        while true { try await writer.write(chunk) }
                    })
            }
            router.post("/ok") { [self] request, _ -> Response in
                let body = try await request.body.collect(upTo: 1 << 20)
                received.withLock { $0.append(String(buffer: body)) }
                return Response(status: .noContent)
            }
            let port = Mutex<Int?>(nil)
            var quiet = Logger(label: "latchkey.test.receiver")
            quiet.logLevel = .critical
            let app = Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } }, logger: quiet)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await app.runService(gracefulShutdownSignals: []) }
                defer { group.cancelAll() }
                try await poll(until: "the receiver to listen", within: .seconds(60)) { port.withLock { $0 } != nil }
                try await body("http://127.0.0.1:\(port.withLock { $0 }!)")
            }
        }
    }

    @Test("an endpoint that sends its head at once and drips its body fails at the timeout, not when the body ends")
    func drippingEndpointTimesOut() async throws {
        try await Receiver().run { base in
            let transport = AsyncHTTPClientTransport(client: AsyncHTTPClientTransport.webhookClient, maximumResponseBytes: 64 * 1024)
            let started = ContinuousClock.now
            await #expect(throws: LatchkeyError.self) {
                _ = try await transport.status(of: OutboundRequest(method: "POST", url: base + "/drip", body: [], timeout: .seconds(1)))
            }
            // Without a whole-call deadline the attempt lasts the minute of the drip; with it, the second it is given
            // (the bound leaves room for a machine busy with other builds).
            #expect(ContinuousClock.now - started < .seconds(30))

            let providerStarted = ContinuousClock.now
            await #expect(throws: LatchkeyError.self) {
                _ = try await AsyncHTTPClientTransport().send(OutboundRequest(method: "POST", url: base + "/drip", timeout: .seconds(1)))
            }
            #expect(ContinuousClock.now - providerStarted < .seconds(30))
        }
    }

    @Test("while one endpoint drips its answers, deliveries to another endpoint go out at once")
    func slowEndpointDelaysNoOther() async throws {
        let receiver = Receiver()
        try await receiver.run { base in
            let secret = Secret(WebhookEndpoint.generateSecret())
            try await ServerHarness.with(configure: {
                $0.webhooks = [WebhookEndpoint(url: base + "/drip", secret: secret), WebhookEndpoint(url: base + "/ok", secret: secret)]
                $0.webhookTimeout = 20
            }) { harness in
                let service = WebhookDeliveryService(dispatcher: harness.server.webhookDispatcher(), logger: Logger(label: "latchkey.test.webhooks"))
                let delivered = { receiver.received.withLock { $0.count } }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await service.run() }
                    defer { group.cancelAll() }
                    _ = try await harness.signedIn(email: "first@example.com")
                    try await poll(until: "the first user.created at the healthy endpoint", within: .seconds(10)) { delivered() >= 1 }
                    try await poll(until: "the dripping endpoint to be attempted", within: .seconds(10)) {
                        receiver.dripsStarted.load(ordering: .relaxed) >= 1
                    }
                    // The dripping endpoint now holds its attempt open for up to 20 s; the next event must not wait for it.
                    _ = try await harness.signedIn(email: "second@example.com")
                    let signedIn = ContinuousClock.now
                    try await poll(until: "the second user.created at the healthy endpoint", within: .seconds(15)) { delivered() >= 2 }
                    #expect(ContinuousClock.now - signedIn < .seconds(5))
                }
            }
        }
    }

    @Test("a webhook endpoint whose answer never ends is read up to 64 KiB: its status counts, long before the timeout")
    func answerReadUpToLimit() async throws {
        try await Receiver().run { base in
            // Reading the whole answer would last until the deadline and fail; reading 64 KiB of it ends at once.
            let outcome = await WebhookDispatcher.httpSend(base + "/endless", [], "{}", .seconds(120))
            #expect(outcome == .answered(200))
        }
    }

    @Test("a port above 65535 on an IP-literal host is refused where it is configured, and fails without a crash where it is used")
    func impossiblePort() async throws {
        var configuration = ServerConfiguration()
        configuration.webhooks = [WebhookEndpoint(url: "http://127.0.0.1:99999/hooks", secret: Secret(WebhookEndpoint.generateSecret()))]
        #expect(throws: LatchkeyError.self) { try configuration.validate() }
        #expect(WebhookEndpoint.problem(url: "http://127.0.0.1:99999/hooks") != nil)

        for (key, value) in [
            ("google.discoveryUrl", "http://127.0.0.1:99999/.well-known/openid-configuration"), ("dropbox.apiUrl", "http://127.0.0.1:70000"),
            ("facebook.graphUrl", "http://[::1]:65536"), ("oidc.corp.issuer", "https://127.0.0.1:0"), ("publicUrl", "http://127.0.0.1:99999"),
        ] {
            var values: [AbsoluteConfigKey: ConfigValue] = [
                "google.clientIds": "a.apps.googleusercontent.com", "facebook.appId": "1", "dropbox.appKey": "k", "oidc.providers": "corp",
                "oidc.corp.issuer": "https://corp.example",
                "oidc.corp.clientIds": "corp-app",
            ]
            values[AbsoluteConfigKey(key.split(separator: ".").map(String.init))] = ConfigValue(.string(value), isSecret: false)
            let error = #expect(throws: LatchkeyError.self, "\(key) = \(value)") {
                let read = try ServerConfiguration(reading: ConfigReader(provider: InMemoryProvider(values: values)))
                try read.validate()
            }
            #expect(error?.reason.contains(key) == true, "\(error?.reason ?? "")")
        }

        // A URL made at run time (a discovery document names the token endpoint) never reaches the client unchecked.
        let error = await #expect(throws: LatchkeyError.self) {
            _ = try await AsyncHTTPClientTransport().send(OutboundRequest(url: "http://127.0.0.1:99999/token", timeout: .seconds(2)))
        }
        #expect(error?.reason.contains("port") == true, "\(error?.reason ?? "")")
    }
}
