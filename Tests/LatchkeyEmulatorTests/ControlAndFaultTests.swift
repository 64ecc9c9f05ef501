import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Synchronization
import Testing

@Suite("Emulator: control API, faults, transfers and notifications")
struct ControlAndFaultTests {
    @Test("control requests with bad bodies or unknown users are 4xx with an error body")
    func controlErrors() async throws {
        try await EmulatorHarness.with { harness in
            let notJSON = try await harness.send("POST", "/emulator/users", form: [("a", "b")])
            #expect(notJSON.status == 400)
            #expect(try await harness.send("POST", "/emulator/users", json: ["realUserStatus": 7]).status == 400)
            let unknown = try await harness.send("POST", "/emulator/authorizations", json: ["sub": "000000.0.0000", "clientId": Fixtures.bundleID])
            #expect(unknown.status == 404)
            #expect(unknown.json["error"] as? String == "not_found")
            let sub = try await harness.createUser()
            #expect(try await harness.send("POST", "/emulator/authorizations", json: ["sub": sub, "clientId": "com.unknown"]).status == 400)
            #expect(
                try await harness.send("POST", "/emulator/authorizations", json: ["sub": sub, "clientId": Fixtures.bundleID, "scopes": ["phone"]]).status == 400
            )
            #expect(try await harness.send("POST", "/emulator/users/nobody/consent-revocation").status == 404)
            #expect(try await harness.send("POST", "/emulator/users/\(sub)/email-forwarding", json: ["nope": 1]).status == 400)
            #expect(try await harness.send("POST", "/emulator/faults", json: ["endpoint": "/auth/token", "kind": "bogus"]).status == 400)
            #expect(try await harness.send("POST", "/emulator/clock", json: [:]).status == 400)
        }
    }

    @Test("a 5xx fault is retried through by safe calls; faults can be cleared")
    func statusFault() async throws {
        try await EmulatorHarness.with { harness in
            let tokens = try await harness.apple.exchangeCode(
                try await harness.nativeSignIn(sub: try await harness.createUser()).code, clientID: Fixtures.bundleID)
            #expect(
                try await harness.send("POST", "/emulator/faults", json: ["endpoint": "/auth/token", "kind": "status", "status": 503, "count": 1]).status == 201
            )
            _ = try await harness.apple.validateRefreshToken(tokens.refreshToken!, clientID: Fixtures.bundleID)
            let attempts = try await harness.requestLog().filter { $0["endpoint"] as? String == "/auth/token" }.count
            #expect(attempts == 3)  // the code exchange, the refused attempt, the retry
            _ = try await harness.send("POST", "/emulator/faults", json: ["endpoint": "/auth/token", "kind": "status", "status": 500])
            await #expect(throws: LatchkeyError(.providerUnavailable, "")) {
                _ = try await harness.apple.validateRefreshToken(tokens.refreshToken!, clientID: Fixtures.bundleID)
            }
            #expect(try await harness.send("DELETE", "/emulator/faults").status == 204)
            _ = try await harness.apple.validateRefreshToken(tokens.refreshToken!, clientID: Fixtures.bundleID)
        }
    }

    @Test(
        "429, malformed JSON, dropped connections and latency reach the client as typed errors",
        arguments: [
            ("rate_limit", LatchkeyError.Code.providerRateLimited), ("malformed_json", .invalidProviderResponse), ("drop_connection", .providerUnavailable),
        ])
    func otherFaults(kind: String, code: LatchkeyError.Code) async throws {
        try await EmulatorHarness.with { harness in
            _ = try await harness.send("POST", "/emulator/faults", json: ["endpoint": "/auth/token", "kind": kind])
            await #expect(throws: LatchkeyError(code, "")) { _ = try await harness.apple.validateRefreshToken("r", clientID: Fixtures.bundleID) }
        }
    }

    @Test("latency is injected before the normal answer")
    func latency() async throws {
        try await EmulatorHarness.with { harness in
            _ = try await harness.send("POST", "/emulator/faults", json: ["endpoint": "/auth/keys", "kind": "latency", "latencyMilliseconds": 300, "count": 1])
            let start = ContinuousClock.now
            #expect(try await harness.send("GET", "/auth/keys").status == 200)
            #expect(ContinuousClock.now - start >= .milliseconds(300))
        }
    }

    @Test("an app transfer moves a user to another team within 60 days")
    func transfer() async throws {
        var configuration = EmulatorHarness.configuration()
        configuration.addTeam(teamID: "TEAMB12345", keyID: Fixtures.keyID, publicKeyPEM: Fixtures.p8PublicKey)
        configuration.addApp(clientID: "com.teamb.app", teamID: "TEAMB12345")
        try await EmulatorHarness.with(configuration) { harness in
            let sub = try await harness.createUser(hideMyEmail: true)
            _ = try await harness.nativeSignIn(sub: sub)
            let transferSub = try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: "TEAMB12345", clientID: Fixtures.bundleID)
            let credentials = try AppleSigningCredentials(teamID: "TEAMB12345", keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
            let teamB = try AppleClient(
                configuration: AppleConfiguration(credentials: credentials, clientIDs: ["com.teamb.app"], baseURL: harness.emulator.baseURL, retry: .never))
            let migrated = try await teamB.exchangeTransferSubject(transferSub, clientID: "com.teamb.app")
            #expect(migrated.sub != sub)
            #expect(migrated.isPrivateEmail == true)
            #expect(migrated.email?.hasSuffix("@privaterelay.appleid.com") == true)
            let signIn = try await harness.nativeSignIn(sub: migrated.sub, clientID: "com.teamb.app")
            let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.teamb.app"]), keys: harness.keys)
            #expect(try await verifier.verify(signIn.identityToken).transferSubject == transferSub)
            // The migration endpoint needs a team token as Bearer.
            let noBearer = try await harness.send("POST", "/auth/usermigrationinfo", form: try harness.tokenForm([("transfer_sub", transferSub)]))
            #expect(noBearer.json["error"] as? String == "invalid_request")
            // Team A cannot redeem a transfer meant for team B.
            await #expect(throws: LatchkeyError(.invalidRequest, "")) {
                _ = try await harness.apple.exchangeTransferSubject(transferSub, clientID: Fixtures.bundleID)
            }

            let later: TimeInterval = 61 * 86_400
            _ = try await harness.send("POST", "/emulator/clock", json: ["offsetSeconds": later])
            let teamBLater = try AppleClient(
                configuration: AppleConfiguration(credentials: credentials, clientIDs: ["com.teamb.app"], baseURL: harness.emulator.baseURL, retry: .never),
                timeSource: TimeSource { Date().addingTimeInterval(later) }
            )
            await #expect(throws: LatchkeyError(.invalidRequest, "")) {
                _ = try await teamBLater.exchangeTransferSubject(transferSub, clientID: "com.teamb.app")
            }
        }
    }

    /// Receives notifications on loopback; answers 500 to the first `failures` POSTs.
    actor Receiver {
        var bodies: [[UInt8]] = []
        var failures: Int
        init(failures: Int) { self.failures = failures }
        func receive(_ body: [UInt8]) -> Bool {
            bodies.append(body)
            if failures > 0 {
                failures -= 1
                return false
            }
            return true
        }
    }

    @Test("account events notify the app, signed with Apple's keys, events as a JSON string, retried until 200")
    func notifications() async throws {
        let receiver = Receiver(failures: 1)
        let router = Router()
        router.post("/apple/notifications") { request, _ -> HTTPResponse.Status in
            let body = try await request.body.collect(upTo: 1 << 16)
            return await receiver.receive(Array(buffer: body)) ? .ok : .internalServerError
        }
        let ports = AsyncStream<Int>.makeStream()
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { ports.continuation.yield($0.localAddress!.port!) })
        let server = Task { try await app.runService(gracefulShutdownSignals: []) }
        defer { server.cancel() }
        var iterator = ports.stream.makeAsyncIterator()
        let port = try #require(await iterator.next())

        try await EmulatorHarness.with(EmulatorHarness.configuration(notificationURL: "http://127.0.0.1:\(port)/apple/notifications")) { harness in
            let sub = try await harness.createUser(hideMyEmail: true)
            _ = try await harness.apple.exchangeCode(try await harness.nativeSignIn(sub: sub).code, clientID: Fixtures.bundleID)
            _ = try await harness.send("POST", "/emulator/users/\(sub)/email-forwarding", json: ["enabled": false])
            _ = try await harness.send("POST", "/emulator/users/\(sub)/consent-revocation")
            _ = try await harness.send("DELETE", "/emulator/users/\(sub)")
            var records: [[String: Any]] = []
            for _ in 0..<200 {
                records = try await harness.send("GET", "/emulator/notifications").array
                if records.count == 3, records.allSatisfy({ $0["delivered"] as? Bool == true }) { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(records.map { $0["type"] as? String } == ["email-disabled", "consent-revoked", "account-delete"])
            #expect(records.first?["attempts"] as? Int == 2)
            // Deliveries run concurrently; the refused e-mail event arrives twice.
            let bodies = await receiver.bodies
            #expect(bodies.count == 4)
            let verifier = AppleNotificationVerifier(keys: harness.keys, audiences: [Fixtures.bundleID])
            let events = try await bodies.asyncMap { try await verifier.verify(body: $0).event }
            #expect(events.map(\.type.description).sorted() == ["account-deleted", "consent-revoked", "email-disabled", "email-disabled"])
            #expect(events.allSatisfy { $0.subject == sub })
            #expect(events.first { $0.type == .emailDisabled }?.isPrivateEmail == true)
            #expect(bodies.allSatisfy { String(decoding: $0, as: UTF8.self).hasPrefix(#"{"payload":""#) })
        }
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
