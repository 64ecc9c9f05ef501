import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Logging
import Synchronization
import Testing

/// What the app's backend hears: every lifecycle event of a real server, signed, retried while the backend is down.
@Suite("Server: the app's backend hears of users' lifecycle through webhooks")
struct WebhookEventTests {
    static let endpointURL = "https://backend.example/hooks/latchkey"

    /// A backend that answers 503 while `down`, and keeps what it was sent.
    final class Backend: Sendable {
        struct Attempt: Sendable {
            let id: String
            let timestamp: Int
            let signature: String
            let body: String
            let accepted: Bool
        }
        let down = Atomic<Bool>(true)
        let attempts = Mutex<[Attempt]>([])

        var send: WebhookDispatcher.Send {
            { [self] url, headers, body, _ in
                let header = { (name: String) in headers.first { $0.name == name }?.value ?? "" }
                let accepted = !down.load(ordering: .relaxed) && url == WebhookEventTests.endpointURL
                attempts.withLock {
                    $0.append(
                        Attempt(
                            id: header("webhook-id"), timestamp: Int(header("webhook-timestamp")) ?? 0, signature: header("webhook-signature"), body: body,
                            accepted: accepted))
                }
                return .answered(accepted ? 204 : 503)
            }
        }

        var accepted: [Attempt] { attempts.withLock { $0.filter(\.accepted) } }

        func events(_ type: String) -> [[String: Any]] {
            accepted.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body.utf8)) as? [String: Any] }.filter { $0["type"] as? String == type }
                .compactMap { $0["data"] as? [String: Any] }
        }
    }

    @Test(
        "sign-up, a linked Google, Apple's consent-revoked for an Apple-only user and a refresh-token replay each reach the backend, signed, after it comes back"
    )
    func lifecycle() async throws {
        let secret = WebhookEndpoint.generateSecret()
        let key = try WebhookSignature.key(fromSecret: secret).get()
        try await ServerHarness.with(configure: {
            $0.webhooks = [WebhookEndpoint(url: Self.endpointURL, secret: Secret(secret))]
            $0.session.reuseGraceWindow = 0
        }) { harness in
            // Jane signs up with Apple and links Google.
            let (_, jane) = try await harness.signedIn(email: "jane@example.com")
            let linked = try await harness.googleSignIn(email: "jane.g@example.com", path: "/v1/me/identities/google", bearer: jane.accessToken)
            #expect(linked.status == 200, "\(linked.text)")
            // Bob signs up with Apple only, then revokes the app at Apple: Apple's notification deletes him.
            let (bobSub, bob) = try await harness.signedIn(email: "bob@example.com")
            #expect(try await harness.emulator.send("POST", "/emulator/users/\(bobSub)/consent-revocation").status == 204)
            try await poll(until: "Apple's notification to delete Bob", within: .seconds(10)) { try await harness.store.user(id: bob.user.id) == nil }
            // Counted once the notification's answer is made, just after its effect.
            try await poll(until: "the notification to be counted", within: .seconds(10)) {
                harness.server.metrics.exposition().contains(#"latchkey_provider_notifications_total{provider="apple",type="consent-revoked""#)
            }
            // Jane's first refresh token comes back after its successor was used.
            let first = try await harness.refresh(jane.refreshToken).decode(TokenPairResponse.self)
            #expect(try await harness.refresh(first.refreshToken).status == 200)
            #expect(try await harness.refresh(jane.refreshToken).error == "invalid_grant")

            // The backend is down for the first attempt of each; the schedule brings them again 5 to 6 s later.
            let backend = Backend()
            let dispatcher = harness.server.webhookDispatcher(send: backend.send)
            let firstRound = try await dispatcher.deliverDue()
            #expect(firstRound == 6)
            #expect(backend.accepted.isEmpty)
            #expect(try await dispatcher.deliverDue() == 0)  // not due again yet
            backend.down.store(false, ordering: .relaxed)
            harness.clock.advance(7)
            #expect(try await dispatcher.deliverDue() == firstRound)

            let refused = Set(backend.attempts.withLock { $0.filter { !$0.accepted }.map(\.id) })
            #expect(refused.count == firstRound)
            #expect(Set(backend.accepted.map(\.id)) == refused)
            for attempt in backend.accepted {
                #expect(WebhookSignature.verify(messageID: attempt.id, timestamp: attempt.timestamp, body: attempt.body, header: attempt.signature, key: key))
                #expect(attempt.timestamp == Int(harness.clock.now.timeIntervalSince1970))
                for token in [jane.refreshToken, jane.accessToken, first.refreshToken, bob.refreshToken] { #expect(!attempt.body.contains(token)) }
            }
            #expect(Set(backend.events("user.created").compactMap { $0["userId"] as? String }) == [jane.user.id, bob.user.id])
            #expect(backend.events("identity.linked").map { [$0["userId"] as? String, $0["provider"] as? String] } == [[jane.user.id, "google"]])
            #expect(backend.events("identity.revoked").map { [$0["userId"] as? String, $0["provider"] as? String] } == [[bob.user.id, "apple"]])
            #expect(
                backend.events("user.deleted").map { [$0["userId"] as? String, $0["reason"] as? String] } == [[bob.user.id, "provider_consent_revoked"]])
            let reuse = try #require(backend.events("session.reuse_detected").first)
            #expect(reuse["userId"] as? String == jane.user.id)
            let revoked = try await harness.store.sessions(userID: jane.user.id).filter { $0.revocationReason == "refresh_token_reuse" }
            #expect(revoked.count == 1)
            #expect(reuse["sessionId"] as? String == revoked.first?.id)
            #expect(reuse["ip"] as? String == "127.0.0.1")
            let delivered = try await harness.store.webhookDeliveries(status: .delivered, limit: 100)
            #expect(delivered.count == firstRound)
            #expect(delivered.allSatisfy { $0.attempts == 2 && $0.lastError == nil })
            #expect(harness.server.metrics.exposition().contains(#"latchkey_webhook_deliveries_total{type="user.created",outcome="retry"} 2"#))
        }
    }

    /// The server's store, counting the deliveries each call records.
    final class CountingWebhookStore: WebhookStore {
        let store: any WebhookStore
        let recorded = Mutex<[Int]>([])
        init(_ store: any WebhookStore) { self.store = store }

        func enqueueWebhookDeliveries(_ deliveries: [WebhookDelivery]) async throws { try await store.enqueueWebhookDeliveries(deliveries) }
        func claimDueWebhookDeliveries(now: Date, limit: Int, leaseUntil: Date, endpoints: [String]) async throws -> [WebhookDelivery] {
            try await store.claimDueWebhookDeliveries(now: now, limit: limit, leaseUntil: leaseUntil, endpoints: endpoints)
        }
        func updateWebhookDeliveries(_ deliveries: [WebhookDelivery]) async throws {
            recorded.withLock { $0.append(deliveries.count) }
            try await store.updateWebhookDeliveries(deliveries)
        }
        func webhookDeliveries(status: WebhookDelivery.Status?, limit: Int) async throws -> [WebhookDelivery] {
            try await store.webhookDeliveries(status: status, limit: limit)
        }
        func webhookDeliveries(userID: String, limit: Int) async throws -> [WebhookDelivery] { try await store.webhookDeliveries(userID: userID, limit: limit) }
        func webhookDeliveryCounts() async throws -> [WebhookDeliveryCount] { try await store.webhookDeliveryCounts() }
        func webhookDelivery(id: String) async throws -> WebhookDelivery? { try await store.webhookDelivery(id: id) }
    }

    @Test("a round's outcomes are recorded eight at a time, each batch in one store call: 20 deliveries, three calls, all delivered")
    func outcomesRecordedInBatches() async throws {
        let endpoint = WebhookEndpoint(url: Self.endpointURL, secret: Secret(WebhookEndpoint.generateSecret()))
        try await ServerHarness.with(configure: { $0.webhooks = [endpoint] }) { harness in
            for index in 0..<20 { _ = try await harness.signedIn(email: "user\(index)@example.com") }
            let backend = Backend()
            backend.down.store(false, ordering: .relaxed)
            let store = CountingWebhookStore(harness.store)
            let dispatcher = WebhookDispatcher(store: store, endpoints: [endpoint], send: backend.send, timeSource: harness.clock.source)
            #expect(try await dispatcher.deliverDue() == 20)
            #expect(store.recorded.withLock { $0 } == [8, 8, 4])
            let delivered = try await harness.store.webhookDeliveries(status: .delivered, limit: 100)
            #expect(delivered.count == 20)
            #expect(delivered.allSatisfy { $0.attempts == 1 && $0.lastError == nil })
            #expect(try await dispatcher.deliverDue() == 0)
        }
    }

    @Test("an endpoint that never takes a delivery gets ten attempts over more than three days; then the delivery is failed, and retry sends it again")
    func givesUp() async throws {
        try await ServerHarness.with(configure: { $0.webhooks = [WebhookEndpoint(url: Self.endpointURL, secret: Secret(WebhookEndpoint.generateSecret()))] }) {
            harness in
            _ = try await harness.signedIn()
            let backend = Backend()
            let dispatcher = harness.server.webhookDispatcher(send: backend.send)
            let started = harness.clock.now
            var attempts = 0
            while attempts < 20, try await harness.store.webhookDeliveries(status: .failed, limit: 10).isEmpty {
                attempts += try await dispatcher.deliverDue()
                harness.clock.advance(3600)
            }
            #expect(attempts == 10)
            let failed = try #require(try await harness.store.webhookDeliveries(status: .failed, limit: 10).first)
            #expect(failed.lastError == "HTTP 503")
            #expect(failed.finishedAt!.timeIntervalSince(started) >= 72 * 3600)
            #expect(harness.server.metrics.exposition().contains(#"latchkey_webhook_deliveries_total{type="user.created",outcome="failed"} 1"#))

            backend.down.store(false, ordering: .relaxed)
            #expect(try await harness.store.retryWebhookDelivery(id: failed.id, at: harness.clock.now))
            #expect(try await dispatcher.deliverDue() == 1)
            #expect(backend.accepted.map(\.id) == [failed.messageID])
        }
    }

    @Test("a change that webhooks do not hear of writes no delivery; without endpoints nothing is written")
    func nothingWithoutEndpoints() async throws {
        try await ServerHarness.with { harness in
            _ = try await harness.signedIn()
            #expect(try await harness.store.webhookDeliveries(status: nil, limit: 10).isEmpty)
        }
    }
}

extension ConfigurationTests {
    @Test("webhooks: read from settings like clients; bad URLs, secrets and event names are refused at start-up with the setting's name")
    func webhooks() throws {
        let secret = WebhookEndpoint.generateSecret()
        let configuration = try read([
            "webhooks.0.url": "https://api.example.com/hooks", "webhooks.0.secret": secret, "webhooks.0.events": "user.deleted, identity.revoked",
            "webhooks.1.url": "http://127.0.0.1:9000/hooks", "webhooks.1.secret": secret, "webhookTimeout": "5",
        ])
        #expect(configuration.webhooks.map(\.url) == ["https://api.example.com/hooks", "http://127.0.0.1:9000/hooks"])
        #expect(configuration.webhooks[0].events == [.userDeleted, .identityRevoked])
        #expect(configuration.webhooks[1].events == nil)
        #expect(configuration.webhookTimeout == 5)
        try configuration.validate()
        #expect(!"\(configuration)".contains(secret.dropFirst(6)))

        let refusals: [([String: String], String)] = [
            (["webhooks.0.url": "http://api.example.com/hooks", "webhooks.0.secret": secret], "webhooks[0].url"),
            (["webhooks.0.url": "https://a.example/", "webhooks.0.secret": "hunter2"], "webhooks[0].secret"),
            (["webhooks.0.url": "https://a.example/", "webhooks.0.secret": "whsec_" + Data(count: 8).base64EncodedString()], "webhooks[0].secret"),
            (["webhooks.0.url": "https://a.example/"], "webhooks[0].secret"),
            (["webhooks.0.url": "https://a.example/", "webhooks.0.secret": secret, "webhooks.0.events": "user.created,user.updated"], "webhooks[0].events"),
            (["webhooks.0.url": "https://a.example/", "webhooks.0.secret": secret, "webhooks.0.events": "webhook.test"], "webhooks[0].events"),
            (
                ["webhooks.0.url": "https://a.example/", "webhooks.0.secret": secret, "webhooks.1.url": "https://a.example/", "webhooks.1.secret": secret],
                "webhooks[1].url"
            ),
            (["webhookTimeout": "0"], "webhookTimeout"),
        ]
        for (settings, name) in refusals {
            let error = #expect(throws: LatchkeyError.self) { try read(settings).validate() }
            #expect(error?.reason.contains(name) == true, "\(settings): \(error?.reason ?? "accepted")")
            #expect(error?.reason.contains("hunter2") == false)
        }
    }
}

extension WebhookEventTests {
    @Test("Apple's email-disabled and a grant refused at the daily validation reach the backend as user.email_changed and identity.revoked")
    func emailAndDailyValidation() async throws {
        try await ServerHarness.with(configure: {
            $0.webhooks = [WebhookEndpoint(url: Self.endpointURL, secret: Secret(WebhookEndpoint.generateSecret()))]
            $0.session.providerValidationWait = 60
        }) { harness in
            let (sub, jane) = try await harness.signedIn()
            #expect(try await harness.emulator.send("POST", "/emulator/users/\(sub)/email-forwarding", json: ["enabled": false]).status < 300)
            try await poll(until: "Apple's email-disabled notification", within: .seconds(10)) {
                try await !harness.store.webhookDeliveries(status: nil, limit: 100).filter { $0.kind == "user.email_changed" }.isEmpty
            }
            let changed = try #require(try await harness.store.webhookDeliveries(status: nil, limit: 100).first { $0.kind == "user.email_changed" })
            #expect(changed.payload.contains(#""emailForwardingEnabled":false"#))
            #expect(changed.userID == jane.user.id)

            // The user revokes the app; the notification is lost, so the daily validation finds out.
            await harness.emulator.emulator.setNotificationURL(nil, for: Fixtures.bundleID)
            #expect(try await harness.emulator.send("POST", "/emulator/users/\(sub)/consent-revocation").status == 204)
            harness.clock.advance(86_401)
            #expect(try await harness.refresh(jane.refreshToken).error == "invalid_grant")
            let revoked = try #require(try await harness.store.webhookDeliveries(status: nil, limit: 100).first { $0.kind == "identity.revoked" })
            #expect(revoked.payload.contains(#""reason":"invalid_grant""#))
            #expect(revoked.payload.contains(#""provider":"apple""#))
            #expect(revoked.userID == jane.user.id)
        }
    }
}

extension WebhookEventTests {
    @Test("an endpoint's 2xx counts whatever page comes with it (100 KB here); a refused connection is no answer")
    func largeAnswer() async throws {
        let router = Router()
        router.post("/hooks") { _, _ in String(repeating: "x", count: 100_000) }
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        var quiet = Logger(label: "latchkey.tests.endpoint")
        quiet.logLevel = .critical
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: quiet)
        let running = Task { try await application.runService() }
        defer { running.cancel() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        #expect(await WebhookDispatcher.httpSend("http://127.0.0.1:\(port)/hooks", [], "{}", .seconds(10)) == .answered(200))
        guard case .noAnswer = await WebhookDispatcher.httpSend("http://127.0.0.1:1/hooks", [], "{}", .seconds(10)) else {
            Issue.record("a refused connection was taken for an answer")
            return
        }
    }
}
