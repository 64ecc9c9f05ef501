import Foundation
import Testing

@testable import LatchkeyCore
@testable import LatchkeyJOSE

@Suite("Webhooks: Standard Webhooks signatures, secrets, URLs, bodies and the retry schedule")
struct WebhookSigningTests {
    /// The example of the Standard Webhooks specification and its reference libraries' tests.
    static let specSecret: Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    @Test("the specification's example signs to its published signature, and verifies")
    func specificationVector() throws {
        let key = try WebhookSignature.key(fromSecret: Self.specSecret.revealed).get()
        let body = #"{"test": 2432232314}"#
        let signature = WebhookSignature.sign(messageID: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, key: key)
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(WebhookSignature.verify(messageID: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, header: signature, key: key))
        // One of several signatures (a secret being rotated), with unknown versions beside it.
        #expect(
            WebhookSignature.verify(
                messageID: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, header: "v2,abc v1,AAAA \(signature)", key: key))
        for (id, timestamp, changed) in [
            ("msg_other", 1_614_265_330, body), ("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_331, body),
            ("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body + " "),
        ] {
            #expect(!WebhookSignature.verify(messageID: id, timestamp: timestamp, body: changed, header: signature, key: key))
        }
        let headers = WebhookSignature.headers(messageID: "msg_1", timestamp: 5, body: "{}", key: key)
        #expect(headers.map(\.name) == ["webhook-id", "webhook-timestamp", "webhook-signature"])
        #expect(headers.map(\.value)[0...1] == ["msg_1", "5"])
    }

    @Test("secrets: whsec_ and at least 24 bytes of base64; a new one is 32 random bytes; the problem never repeats the secret")
    func secrets() throws {
        let fresh = WebhookEndpoint.generateSecret()
        #expect(try WebhookSignature.key(fromSecret: fresh).get().count == 32)
        #expect(fresh != WebhookEndpoint.generateSecret())
        let short = "whsec_" + Data(repeating: 7, count: 23).base64EncodedString()
        for (secret, problem) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", WebhookSecretProblem.missingPrefix), ("whsec_not base64!", .notBase64), (short, .tooShort(23)),
            ("", .missingPrefix),
        ] {
            #expect(throws: problem) { try WebhookSignature.key(fromSecret: secret).get() }
            #expect(!"\(problem)".contains(secret.dropFirst(6).prefix(8)) || secret.count < 8)
        }
    }

    @Test(
        "endpoint URLs: https anywhere, http only to loopback, nothing else",
        arguments: [
            ("https://api.example.com/hooks/latchkey", true), ("http://127.0.0.1:9000/hooks", true), ("http://[::1]:9000/", true),
            ("http://localhost/hooks", true), ("http://api.example.com/hooks", false), ("http://10.0.0.8/hooks", false), ("ftp://example.com/", false),
            ("https://user:pass@example.com/", false), ("https://example.com/#x", false), ("/relative/hooks", false), ("https://", false),
            ("http://127.0.0.1.nip.io/", false),
        ])
    func urls(url: String, accepted: Bool) {
        #expect((WebhookEndpoint.problem(url: url) == nil) == accepted, "\(url): \(WebhookEndpoint.problem(url: url) ?? "accepted")")
    }

    @Test("a body is {type, timestamp, data} with data.userId, and the same bytes every time")
    func body() throws {
        let at = Date(timeIntervalSince1970: 1_767_225_600.5)
        let event = LifecycleEvent.userDeleted("user-1", reason: .providerConsentRevoked, at: at)
        #expect(
            event.body() == #"{"data":{"reason":"provider_consent_revoked","userId":"user-1"},"timestamp":"2026-01-01T00:00:00.500Z","type":"user.deleted"}"#)
        #expect(event.body() == event.body())
        #expect(event.id.hasPrefix("msg_"))
        let family = SessionFamily(
            id: "s", userID: "u", identityID: nil, clientID: "com.example.app", createdAt: at, lastUsedAt: at, absoluteExpiresAt: at, userAgent: nil)
        let reuse = LifecycleEvent.reuseDetected(family, ip: nil, userAgent: String(repeating: "x", count: 1000), at: at)
        let data = try #require(try JSONSerialization.jsonObject(with: Data(reuse.body().utf8)) as? [String: Any])["data"] as? [String: Any]
        #expect(data?["ip"] is NSNull)
        #expect((data?["userAgent"] as? String)?.count == 256)
        #expect(data?["sessionId"] as? String == "s")
    }

    @Test("each event goes to the endpoints that take its type, with one webhook-id; webhook.test to every endpoint")
    func fanOut() {
        let all = WebhookEndpoint(url: "https://a.example/", secret: "whsec_x")
        let deletions = WebhookEndpoint(url: "https://b.example/", secret: "whsec_y", events: [.userDeleted])
        let endpoints = WebhookEndpoints([all, deletions])
        let now = Date()
        let created = LifecycleEvent.userCreated("u", provider: "apple", at: now)
        let deleted = LifecycleEvent.userDeleted("u", reason: .admin, at: now)
        let deliveries = endpoints.deliveries(created, deleted, LifecycleEvent(kind: .webhookTest, at: now, userID: "test"))
        #expect(deliveries.map(\.endpoint) == ["https://a.example/", "https://a.example/", "https://b.example/", "https://a.example/", "https://b.example/"])
        #expect(Set(deliveries.filter { $0.kind == "user.deleted" }.map(\.messageID)) == [deleted.id])
        #expect(Set(deliveries.map(\.id)).count == deliveries.count)
        #expect(deliveries.allSatisfy { $0.status == .pending && $0.attempts == 0 && $0.nextAttemptAt == now })
        #expect(WebhookEndpoints().deliveries(created).isEmpty)
    }

    @Test("the retry schedule spans more than three days at the least jitter, and ends after ten attempts")
    func schedule() throws {
        let start = Date(timeIntervalSince1970: 0)
        var at = start
        var attempts = 1
        while let next = WebhookRetrySchedule.nextAttempt(after: attempts, at: at, jitter: 0) {
            #expect(next > at)
            at = next
            attempts += 1
        }
        #expect(attempts == 10)
        #expect(at.timeIntervalSince(start) >= 72 * 3600)
        #expect(WebhookRetrySchedule.nextAttempt(after: 1, at: start, jitter: 5) == start.addingTimeInterval(6))  // jitter at most a fifth
        #expect(WebhookRetrySchedule.nextAttempt(after: 0, at: start) == nil)
    }
}
