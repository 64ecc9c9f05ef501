import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Apple server-to-server notifications")
struct AppleNotificationTests {
    let verifier: AppleNotificationVerifier

    init() async throws {
        let keys = try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        verifier = AppleNotificationVerifier(keys: StaticKeyResolver(keys), audiences: [Fixtures.bundleID], timeSource: .fixed(Fixtures.now))
    }

    func body(events: any Sendable, extra: [String: any Sendable] = [:], key: RSAKey = Fixtures.appleKey) -> [UInt8] {
        var claims: [String: any Sendable] = [
            "iss": "https://appleid.apple.com", "aud": Fixtures.bundleID, "iat": Int(Fixtures.now.timeIntervalSince1970),
            "jti": "jti-1", "events": events,
        ]
        for (name, value) in extra { claims[name] = value }
        return Array(json(["payload": key.sign(claims: claims)]).utf8)
    }

    static let consentRevoked: [String: any Sendable] = ["type": "consent-revoked", "sub": "000123.abc.0456", "event_time": 1_767_225_000]

    @Test("events as an object or as a JSON string; event_time in seconds or milliseconds")
    func eventShapes() async throws {
        let object = try await verifier.verify(body: body(events: Self.consentRevoked))
        #expect(object.event.type == .consentRevoked)
        #expect(object.event.subject == "000123.abc.0456")
        #expect(object.id == "jti-1")
        #expect(object.event.eventTime == Date(timeIntervalSince1970: 1_767_225_000))
        let string = try await verifier.verify(
            body: body(events: json(["type": "consent-revoked", "sub": "000123.abc.0456", "event_time": 1_767_225_000_123])))
        #expect(string.event.type == .consentRevoked)
        #expect(string.event.eventTime == Date(timeIntervalSince1970: 1_767_225_000.123))
    }

    @Test(
        "every event type, both spellings of account deletion",
        arguments: [
            ("email-disabled", AppleNotificationEventType.emailDisabled), ("email-enabled", .emailEnabled), ("consent-revoked", .consentRevoked),
            ("account-delete", .accountDeleted), ("account-deleted", .accountDeleted), ("future-thing", .other("future-thing")),
        ])
    func types(wire: String, type: AppleNotificationEventType) async throws {
        let events: [String: any Sendable] = ["type": wire, "sub": "s", "event_time": 1, "email": "x@privaterelay.appleid.com", "is_private_email": "true"]
        let notification = try await verifier.verify(body: body(events: json(events)))
        #expect(notification.event.type == type)
        #expect(notification.event.isPrivateEmail == true)
        #expect(notification.event.email == "x@privaterelay.appleid.com")
    }

    @Test("bodies that are not {payload: JWT} are refused", arguments: ["", "{}", #"{"payload":1}"#, "[1]"])
    func badBody(text: String) async {
        await #expect(throws: LatchkeyError(.invalidNotification, "")) { _ = try await verifier.verify(body: Array(text.utf8)) }
    }

    @Test("an oversized body is refused unread")
    func oversized() async {
        await #expect(throws: LatchkeyError(.invalidNotification, "")) { _ = try await verifier.verify(body: Array(repeating: 0x20, count: 70_000)) }
    }

    @Test("forged, foreign, wrong-audience and incomplete notifications are refused")
    func refusals() async {
        await #expect(throws: LatchkeyError(.invalidSignature, "")) {
            _ = try await verifier.verify(body: body(events: Self.consentRevoked, key: Fixtures.attackerKey))
        }
        await #expect(throws: LatchkeyError(.unexpectedIssuer, "")) {
            _ = try await verifier.verify(body: body(events: Self.consentRevoked, extra: ["iss": "https://evil.example"]))
        }
        await #expect(throws: LatchkeyError(.unexpectedAudience, "")) {
            _ = try await verifier.verify(body: body(events: Self.consentRevoked, extra: ["aud": "com.other"]))
        }
        await #expect(throws: LatchkeyError(.tokenExpired, "")) {
            _ = try await verifier.verify(body: body(events: Self.consentRevoked, extra: ["exp": Int(Fixtures.now.timeIntervalSince1970) - 3600]))
        }
        await #expect(throws: LatchkeyError(.issuedInFuture, "")) {
            _ = try await verifier.verify(body: body(events: Self.consentRevoked, extra: ["iat": Int(Fixtures.now.timeIntervalSince1970) + 3600]))
        }
        await #expect(throws: LatchkeyError(.missingClaim, "")) { _ = try await verifier.verify(body: body(events: Self.consentRevoked, extra: ["jti": ""])) }
        await #expect(throws: LatchkeyError(.missingClaim, "")) { _ = try await verifier.verify(body: body(events: ["sub": "s"])) }
        await #expect(throws: LatchkeyError(.missingClaim, "")) { _ = try await verifier.verify(body: body(events: ["type": "consent-revoked"])) }
        await #expect(throws: LatchkeyError(.invalidClaim, "")) { _ = try await verifier.verify(body: body(events: "not json")) }
    }
}

@Suite("Hostile input: seeded mutations of Apple notification payloads")
struct NotificationPayloadFuzzTests {
    /// Claims as Apple sends them, and shapes that broke parsers elsewhere.
    static let corpus: [String] = [
        #"{"iss":"https://appleid.apple.com","aud":"com.example.app","iat":1767225600,"jti":"j1","events":"{\"type\":\"consent-revoked\",\"sub\":\"000123.abc.0456\",\"event_time\":1767225000123}"}"#,
        #"{"iss":"https://appleid.apple.com","aud":["com.example.app"],"iat":1767225600,"jti":"j2","events":{"type":"email-disabled","sub":"000123.abc.0456","email":"x@privaterelay.appleid.com","is_private_email":"true","event_time":1767225000}}"#,
        #"{"iss":"https://appleid.apple.com","aud":"com.example.app","iat":1767225600,"jti":"j3","events":"{\"type\":\"account-delete\",\"sub\":\"s\"}"}"#,
        #"{"iss":"https://appleid.apple.com","aud":"com.example.app","iat":1.7e9,"exp":1e99,"jti":"","events":"\"\""}"#,
    ]

    @Test("signed payloads with mutated claims are accepted or refused with a LatchkeyError, never a crash")
    func payloads() async throws {
        let keys = try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        let verifier = AppleNotificationVerifier(keys: StaticKeyResolver(keys), audiences: [Fixtures.bundleID], timeSource: .fixed(Fixtures.now))
        var kinds: Set<String> = []
        // Each input is signed, so the claims parser sees it; RSA signing makes this target the slowest, hence fewer runs.
        let result = await Mutations.run(Self.corpus.map { Array($0.utf8) }, standard: 1000) { claims in
            let payload = Fixtures.appleKey.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: String(decoding: claims, as: UTF8.self))
            do {
                _ = try await verifier.verify(payload: payload)
                return true
            } catch {
                kinds.insert((error as? LatchkeyError)?.errorCode ?? "untyped \(type(of: error))")
                return false
            }
        }
        // The body wrapper too: mutations of {"payload": …} around a real one.
        let body = Array(json(["payload": Fixtures.appleKey.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: Self.corpus[0])]).utf8)
        let wrapped = await Mutations.run([body]) { (try? await verifier.verify(body: $0)) != nil }
        #expect(result.accepted >= 2, "the well-formed corpus is accepted")
        #expect(result.accepted < result.total && wrapped.accepted < wrapped.total, "mutations are refused too")
        #expect(kinds.contains("missing_claim") && !kinds.contains { $0.hasPrefix("untyped") }, "\(kinds)")
    }
}
