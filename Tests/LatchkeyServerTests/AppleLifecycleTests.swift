import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@Suite("Server: the Apple link and account lifecycle", .timeLimit(.minutes(2)))
struct AppleLifecycleTests {
    func validations(_ harness: ServerHarness) async throws -> Int {
        try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/token" && $0["grantType"] as? String == "refresh_token" }.count
    }

    @Test("Apple's refresh token is validated at most once per 24 h, and then only once for concurrent refreshes")
    func dailyValidation() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            var current = try await harness.refresh(tokens.refreshToken).decode(TokenPairResponse.self)
            harness.clock.advance(3600)
            current = try await harness.refresh(current.refreshToken).decode(TokenPairResponse.self)
            #expect(try await validations(harness) == 0)
            harness.clock.advance(86_400)
            let token = current.refreshToken
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 { group.addTask { try await harness.refresh(token).status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(answers.allSatisfy { $0 == 200 })
            #expect(try await validations(harness) == 1)
            current = try await harness.refresh(try await harness.refresh(token).decode(TokenPairResponse.self).refreshToken).decode(TokenPairResponse.self)
            #expect(try await validations(harness) == 1)
            harness.clock.advance(86_401)
            _ = try await harness.refresh(current.refreshToken).decode(TokenPairResponse.self)
            #expect(try await validations(harness) == 2)
        }
    }

    @Test("when Apple refuses the refresh token, every session of that Apple ID ends with a clear invalid_grant")
    func appleRefuses() async throws {
        // The refresh waits for Apple's verdict however slowly a loaded machine brings it (the wait itself is tested below).
        try await ServerHarness.with(configure: { $0.session.providerValidationWait = 60 }) { harness in
            let (sub, tokens) = try await harness.signedIn()
            let other = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            // The user revokes the app; the notification is lost (no URL), so only the daily check can notice.
            await harness.emulator.emulator.setNotificationURL(nil, for: Fixtures.bundleID)
            #expect(try await harness.emulator.send("POST", "/emulator/users/\(sub)/consent-revocation").status == 204)
            harness.clock.advance(86_401)
            let answer = try await harness.refresh(tokens.refreshToken)
            #expect(answer.status == 400)
            #expect(answer.error == "invalid_grant")
            #expect((answer.json["error_description"] as? String)?.contains("Apple authorization was revoked") == true)
            #expect(try await harness.refresh(other.refreshToken).error == "invalid_grant")
            #expect(try await harness.send("GET", "/v1/me", bearer: other.accessToken).status == 401)
        }
    }

    @Test(
        "a slow Apple holds a refresh only for apple.validationWait while within the grace period; its late refusal still ends the sessions, and past the grace period the refresh waits for it"
    )
    func slowValidation() async throws {
        try await ServerHarness.with(configure: { $0.session.providerValidationWait = 0.3 }) { harness in
            let (sub, tokens) = try await harness.signedIn()
            // A second user, signed in now (the emulator's tokens carry real time), refreshes past the grace period below.
            let (lateSub, lateTokens) = try await harness.signedIn(email: "late@example.com")
            await harness.emulator.emulator.setNotificationURL(nil, for: Fixtures.bundleID)
            for user in [sub, lateSub] {
                #expect(try await harness.emulator.send("POST", "/emulator/users/\(user)/consent-revocation").status == 204)
            }
            // Apple answers after 8 s: far above the 0.3 s wait, so that a loaded machine's slow requests do not count, and
            // within the 10 s HTTP timeout, so that the answer still arrives.
            let verySlow: [String: any Sendable] = ["endpoint": "/auth/token", "kind": "latency", "latencyMilliseconds": 8000, "count": 1]
            #expect(try await harness.emulator.send("POST", "/emulator/faults", json: verySlow).status == 201)
            harness.clock.advance(86_401)
            let started = ContinuousClock.now
            let answer = try await harness.refresh(tokens.refreshToken)
            let waited = ContinuousClock.now - started
            #expect(answer.status == 200, "\(answer.text)")
            #expect(waited < .seconds(7), "the refresh waited for Apple's answer: \(waited)")
            let successor = try answer.decode(TokenPairResponse.self)
            // Apple's refusal, when it comes, ends the session the refresh went on with.
            try await poll(until: "Apple's late refusal to end the session", within: .seconds(20), every: .milliseconds(20)) {
                try await harness.send("GET", "/v1/me", bearer: successor.accessToken).status == 401
            }
            let refused = try await harness.refresh(successor.refreshToken)
            #expect(refused.error == "invalid_grant")
            #expect((refused.json["error_description"] as? String)?.contains("Apple authorization was revoked") == true, "\(refused.text)")
            #expect(try await validations(harness) == 1)

            // Past apple.unreachableGrace the refresh waits for the answer and gets it.
            let slow: [String: any Sendable] = ["endpoint": "/auth/token", "kind": "latency", "latencyMilliseconds": 3000, "count": 1]
            #expect(try await harness.emulator.send("POST", "/emulator/faults", json: slow).status == 201)
            harness.clock.advance(3 * 86_400)
            let lateStart = ContinuousClock.now
            let late = try await harness.refresh(lateTokens.refreshToken)
            #expect(ContinuousClock.now - lateStart >= .milliseconds(3000))
            #expect(late.error == "invalid_grant")
            #expect((late.json["error_description"] as? String)?.contains("Apple authorization was revoked") == true, "\(late.text)")
        }
    }

    @Test("while Apple is unreachable sessions keep refreshing for 72 h, then refuse with 503")
    func appleUnreachable() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            _ = try await harness.emulator.send("POST", "/emulator/faults", json: ["endpoint": "/auth/token", "kind": "status", "status": 503])
            harness.clock.advance(86_401)
            var current = try await harness.refresh(tokens.refreshToken)
            #expect(current.status == 200, "\(current.text)")
            harness.clock.advance(2 * 86_400)
            let stillValid = try current.decode(TokenPairResponse.self).refreshToken
            current = try await harness.refresh(stillValid)
            #expect(current.status == 503)
            #expect(current.error == "temporarily_unavailable")
            #expect(current.headers["retry-after"] != nil)
            // While Apple fails, it is asked again at most once an hour (faulted calls are logged without a grant type).
            func tokenCalls() async throws -> Int { try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/token" }.count }
            let asked = try await tokenCalls()
            #expect(asked >= 2)
            for _ in 0..<5 { #expect(try await harness.refresh(stillValid).status == 503) }
            #expect(try await tokenCalls() == asked)
            harness.clock.advance(3601)
            #expect(try await harness.refresh(stillValid).status == 503)
            #expect(try await tokenCalls() > asked)
        }
    }

    @Test("consent revocation and account deletion notifications end sessions and delete the user")
    func notifications() async throws {
        try await ServerHarness.with { harness in
            let (sub, tokens) = try await harness.signedIn()
            let identity = try #require(try await harness.store.identity(provider: "apple", subject: sub))
            #expect(try await harness.emulator.send("POST", "/emulator/users/\(sub)/consent-revocation").status == 204)
            try await poll(until: "the consent revocation to end the session", within: .seconds(5), every: .milliseconds(20)) {
                try await harness.refresh(tokens.refreshToken).error == "invalid_grant"
            }
            // The Apple identity was the user's only one: identity, grant and user are gone.
            try await poll(until: "the user to be deleted with their only identity", within: .seconds(5), every: .milliseconds(20)) {
                try await harness.store.user(id: identity.userID) == nil
            }
            #expect(try await harness.store.providerGrant(identityID: identity.id) == nil)
            #expect(try await harness.store.identity(provider: "apple", subject: sub) == nil)

            let (other, _) = try await harness.signedIn(email: "gone@example.com")
            let userID = try #require(try await harness.store.identity(provider: "apple", subject: other)?.userID)
            #expect(try await harness.emulator.send("DELETE", "/emulator/users/\(other)").status == 204)
            try await poll(until: "the account-delete notification to delete the user", within: .seconds(5), every: .milliseconds(20)) {
                try await harness.store.user(id: userID) == nil
            }
        }
    }

    @Test("a consent revocation that arrives after the user signed in again ends only the sessions begun before it")
    func lateConsentRevocation() async throws {
        let capture = try await NotificationCapture.start()
        defer { capture.stop() }
        let port = capture.port

        try await ServerHarness.with { harness in
            let (sub, first) = try await harness.signedIn()
            await harness.emulator.emulator.setNotificationURL("http://127.0.0.1:\(port)/capture", for: Fixtures.bundleID)
            #expect(try await harness.emulator.send("POST", "/emulator/users/\(sub)/consent-revocation").status == 204)
            try await poll(until: "a notification at the capture", within: .seconds(5), every: .milliseconds(20)) { await !capture.bodies().isEmpty }
            let late = try #require(await capture.bodies().first)
            harness.clock.advance(60)
            let again = try await harness.signIn(sub: sub)
            #expect(again.status == 200, "\(again.text)")
            let second = try again.decode(SignInResponse.self)

            let answer = try await harness.send("POST", "/v1/apple/notifications", body: late)
            #expect(answer.json["status"] as? String == "processed", "\(answer.text)")
            #expect(try await harness.refresh(first.refreshToken).error == "invalid_grant")
            #expect(try await harness.refresh(second.refreshToken).status == 200)
            let identity = try #require(try await harness.store.identity(provider: "apple", subject: sub))
            #expect(try await harness.store.user(id: identity.userID) != nil)
            let audit = try await harness.store.auditEvents(userID: identity.userID, limit: 50).filter { $0.kind == "apple_consent_revoked" }
            #expect(audit.count == 1)
        }
    }

    @Test("a notification replayed twice is processed once; a forged one is refused")
    func replay() async throws {
        let capture = try await NotificationCapture.start()
        defer { capture.stop() }
        let port = capture.port

        try await ServerHarness.with { harness in
            let (sub, _) = try await harness.signedIn()
            await harness.emulator.emulator.setNotificationURL("http://127.0.0.1:\(port)/capture", for: Fixtures.bundleID)
            _ = try await harness.emulator.send("POST", "/emulator/users/\(sub)/email-forwarding", json: ["enabled": false])
            try await poll(until: "a notification at the capture", within: .seconds(5), every: .milliseconds(20)) { await !capture.bodies().isEmpty }
            let body = try #require(await capture.bodies().first)
            let first = try await harness.send("POST", "/v1/apple/notifications", body: body)
            #expect(first.json["status"] as? String == "processed")
            let second = try await harness.send("POST", "/v1/apple/notifications", body: body)
            #expect(second.status == 200)
            #expect(second.json["status"] as? String == "duplicate")
            let identity = try #require(try await harness.store.identity(provider: "apple", subject: sub))
            #expect(identity.emailForwardingEnabled == false)
            let events = try await harness.store.auditEvents(userID: identity.userID, limit: 50).filter { $0.kind == "apple_email_disabled" }
            #expect(events.count == 1)
            let forged = try await harness.post(
                "/v1/apple/notifications", json: ["payload": Fixtures.attackerKey.sign(claims: ["iss": "https://appleid.apple.com"])])
            #expect(forged.status == 401)
            #expect(try await harness.send("POST", "/v1/apple/notifications", body: "{}").status == 400)
        }
    }

    @Test("account deletion revokes the Apple token, then deletes everything")
    func deletion() async throws {
        try await ServerHarness.with { harness in
            let (sub, tokens) = try await harness.signedIn()
            let answer = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(answer.status == 200)
            #expect(answer.json["appleTokensRevoked"] as? Int == 1)
            let revokes = try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/revoke" }
            #expect(revokes.map { $0["status"] as? Int } == [200])
            #expect(try await harness.store.identity(provider: "apple", subject: sub) == nil)
            #expect(try await harness.refresh(tokens.refreshToken).error == "invalid_grant")
            #expect(try await harness.send("GET", "/v1/me", bearer: tokens.accessToken).status == 401)
        }
    }

    @Test("deletion while Apple answers 5xx still deletes, and the outbox retries the revocation later")
    func deletionWhileAppleIsDown() async throws {
        try await ServerHarness.with { harness in
            let (sub, tokens) = try await harness.signedIn()
            _ = try await harness.emulator.send("POST", "/emulator/faults", json: ["endpoint": "/auth/revoke", "kind": "status", "status": 500])
            let answer = try await harness.send("DELETE", "/v1/me", bearer: tokens.accessToken)
            #expect(answer.status == 200)
            #expect(answer.json["appleRevocationsPending"] as? Int == 1)
            #expect(try await harness.store.identity(provider: "apple", subject: sub) == nil)
            #expect(try await harness.server.sessions.grants.processOutbox() == 0)  // not due yet
            harness.clock.advance(31)
            #expect(try await harness.server.sessions.grants.processOutbox() == 0)  // Apple still down
            _ = try await harness.emulator.send("DELETE", "/emulator/faults")
            harness.clock.advance(3600)
            #expect(try await harness.server.sessions.grants.processOutbox() == 1)
            #expect(try await harness.store.outboxItems().allSatisfy { $0.completedAt != nil })
            let statuses = try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/revoke" }.compactMap { $0["status"] as? Int }
            #expect(statuses.last == 200)
        }
    }
}
