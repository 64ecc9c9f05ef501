import Foundation
import LatchkeyTestSupport
import Synchronization
import Testing

/// Several `latchkey serve` processes on one PostgreSQL, as behind a load balancer: what must hold across them.
@Suite(
    "Fleet: instances on one PostgreSQL", .serialized, .enabled(if: loadTestsEnabled, "a load suite: LATCHKEY_LOAD_TESTS=1"),
    .enabled(if: Fleet.databaseURL != nil, "needs LATCHKEY_TEST_DATABASE_URL"))
struct FleetTests {
    /// The key id in a JWT's header.
    static func keyID(_ token: String) -> String? {
        guard let header = token.split(separator: ".").first else { return nil }
        return (try? JSONSerialization.jsonObject(with: base64URLDecoded(header)) as? [String: Any])?["kid"] as? String
    }

    @Test("one refresh token sent to two instances at once yields one successor, never two")
    func concurrentRefresh() async throws {
        let fleet = try await Fleet(instances: 2)
        defer { fleet.stop() }
        var outcomes: [String: Int] = [:]
        for _ in 0..<20 {
            let session = try await fleet.signIn(at: 0)
            async let first = fleet.refresh(at: 0, session.refresh)
            async let second = fleet.refresh(at: 1, session.refresh)
            let answers = try await [first, second]
            let successors = Set(answers.filter { $0.status == 200 }.compactMap { $0.json["refreshToken"] as? String })
            #expect(successors.count == 1, "two instances made different successors")
            for answer in answers where answer.status != 200 {
                #expect(answer.status == 400 && answer.json["error"] as? String == "invalid_grant")
            }
            outcomes[answers.map { String($0.status) }.sorted().joined(separator: "+"), default: 0] += 1
            // The one successor works, once, on either instance.
            let successor = try #require(successors.first)
            #expect(try await fleet.refresh(at: 1, successor).status == 200)
        }
        print("fleet: 20 double refreshes:", outcomes)
    }

    /// Polls `/v1/me` on every instance but `origin` until each answers 401; the seconds each took after `since`.
    static func refusalDelays(_ fleet: Fleet, access: String, except origin: Int?, since: ContinuousClock.Instant) async throws -> [Duration] {
        var delays: [Duration] = []
        for index in fleet.urls.indices where index != origin {
            while true {
                let status = try await fleet.get(index, "/v1/me", bearer: access).status
                if status == 401 { break }
                #expect(status == 200)
                if ContinuousClock.now - since > .seconds(5) { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            delays.append(ContinuousClock.now - since)
        }
        return delays
    }

    @Test("logout, session revocation, account deletion and Apple's revocation on one instance are refused by the others within 1 s")
    func revocationReachesEveryInstance() async throws {
        let fleet = try await Fleet(instances: 3)
        defer { fleet.stop() }
        var worst: Duration = .zero
        for name in ["logout", "session revocation", "account deletion"] {
            let session = try await fleet.signIn(at: 0)
            // Every instance has the token verified and the profile cached.
            for index in fleet.urls.indices { #expect(try await fleet.get(index, "/v1/me", bearer: session.access).status == 200) }
            switch name {
            case "logout":
                #expect(try await fleet.post(1, "/v1/logout", bearer: session.access).status == 200)
            case "session revocation":
                let sessions = try await fleet.get(1, "/v1/me/sessions", bearer: session.access).json["sessions"] as? [[String: Any]] ?? []
                let id = try #require(sessions.first { $0["current"] as? Bool == true }?["id"] as? String)
                #expect(try await fleet.send(.DELETE, fleet.urls[1] + "/v1/me/sessions/" + id, bearer: session.access).status == 204)
            default:
                #expect(try await fleet.send(.DELETE, fleet.urls[1] + "/v1/me", bearer: session.access).status == 200)
            }
            let delays = try await Self.refusalDelays(fleet, access: session.access, except: 1, since: ContinuousClock.now)
            print("fleet: \(name) refused by the other instances after", delays)
            worst = max(worst, delays.max() ?? .zero)
        }
        // Apple's consent revocation reaches instance 0 (the notification URL); the others follow.
        let session = try await fleet.signIn(at: 0)
        for index in fleet.urls.indices { #expect(try await fleet.get(index, "/v1/me", bearer: session.access).status == 200) }
        #expect(try await fleet.send(.POST, fleet.emulatorURL + "/emulator/users/\(session.sub)/consent-revocation").status < 300)
        try await poll(until: "instance 0 to refuse the revoked session", within: .seconds(10)) {
            try await fleet.get(0, "/v1/me", bearer: session.access).status != 200
        }
        let delays = try await Self.refusalDelays(fleet, access: session.access, except: 0, since: ContinuousClock.now)
        print("fleet: Apple's revocation refused by the other instances after", delays)
        worst = max(worst, delays.max() ?? .zero)
        #expect(worst < .seconds(1))
    }

    @Test("two instances share e-mail codes and their limits, and the guests-per-address limit: each is held in the database")
    func sharedCodesAndLimits() async throws {
        let fleet = try await Fleet(instances: 2, environment: ["LATCHKEY_ANONYMOUS_ENABLED": "true", "LATCHKEY_ANONYMOUS_PER_IP_PER_HOUR": "3"])
        defer { fleet.stop() }
        // A code asked for at one instance signs in at the other; the address's one send a minute holds at both.
        #expect(try await fleet.post(0, "/v1/auth/email/start", json: ["email": "fleet@example.com"]).status == 202)
        #expect(try await fleet.post(1, "/v1/auth/email/start", json: ["email": "fleet@example.com"]).status == 429)
        let mail = try await fleet.send(.GET, fleet.emulatorURL + "/emulator/mail?to=fleet@example.com").json
        let subject = try #require((mail["messages"] as? [[String: Any]])?.last?["subject"] as? String)
        let code = String(subject.prefix { $0.isNumber })
        #expect(try await fleet.post(1, "/v1/auth/email/verify", json: ["email": "fleet@example.com", "code": code]).status == 200)
        #expect(try await fleet.post(0, "/v1/auth/email/verify", json: ["email": "fleet@example.com", "code": code]).status == 400)
        // Three guests an hour from one address, whichever instance makes them.
        var statuses: [Int] = []
        for index in [0, 1, 0, 1] { statuses.append(try await fleet.post(index, "/v1/auth/anonymous").status) }
        #expect(statuses == [200, 200, 200, 429])
    }

    @Test("the daily Apple validation of one grant happens once across the fleet")
    func validationOnce() async throws {
        let fleet = try await Fleet(instances: 3)
        defer { fleet.stop() }
        let sub = try await fleet.newAppleUser()
        var sessions: [String] = []
        for _ in 0..<9 { sessions.append(try await fleet.signIn(at: 0, sub: sub).refresh) }
        // A day has passed since the grant was last validated.
        try await fleet.execute("UPDATE provider_grants SET last_validated_at = 0")
        #expect(try await fleet.send(.DELETE, fleet.emulatorURL + "/emulator/requests").status < 300)
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, token) in sessions.enumerated() { group.addTask { try await fleet.refresh(at: index % 3, token).status } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses)")
        let validations = try await fleet.emulatorRequests().filter { $0["grantType"] as? String == "refresh_token" }
        #expect(validations.count == 1, "\(validations)")
        #expect(try await fleet.count("SELECT COUNT(*) FROM provider_grants WHERE last_validated_at > 0") == 1)
    }

    @Test("an owed revocation is made once across the fleet")
    func outboxOnce() async throws {
        let fleet = try await Fleet(instances: 3)
        defer { fleet.stop() }
        // Apple cannot be reached while five accounts are deleted: five revocations are owed.
        #expect(
            try await fleet.send(.POST, fleet.emulatorURL + "/emulator/faults", json: ["endpoint": "/auth/revoke", "kind": "status", "status": 503]).status
                == 201)
        for index in 0..<5 {
            let session = try await fleet.signIn(at: index % 3)
            let answer = try await fleet.send(.DELETE, fleet.urls[index % 3] + "/v1/me", bearer: session.access)
            #expect(answer.json["revocationsPending"] as? Int == 1)
        }
        #expect(try await fleet.send(.DELETE, fleet.emulatorURL + "/emulator/faults").status < 300)
        #expect(try await fleet.send(.DELETE, fleet.emulatorURL + "/emulator/requests").status < 300)
        try await fleet.execute("UPDATE outbox SET next_attempt_at = 0")  // due now, for all three instances at once
        try await poll(until: "every owed revocation to be made", within: .seconds(20), every: .milliseconds(100)) {
            try await fleet.count("SELECT COUNT(*) FROM outbox WHERE completed_at IS NULL") == 0
        }
        let revocations = try await fleet.emulatorRequests().filter { ($0["endpoint"] as? String)?.hasSuffix("/auth/revoke") == true }
        #expect(revocations.count == 5, "\(revocations)")
    }

    @Test("an owed revocation survives the instance that took it dying: another makes it after the lease")
    func outboxSurvivesKill() async throws {
        // Only instance 2 runs the outbox while this test makes the revocation due (the others' first run is over by then).
        let fleet = try await Fleet(instances: 3, start: false)
        defer { fleet.stop() }
        for index in 0..<3 { try await fleet.start(index, environment: index == 2 ? [:] : ["LATCHKEY_MAINTENANCE_INTERVAL": "3600"]) }
        #expect(
            try await fleet.send(.POST, fleet.emulatorURL + "/emulator/faults", json: ["endpoint": "/auth/revoke", "kind": "status", "status": 503]).status
                == 201)
        let session = try await fleet.signIn(at: 2)
        #expect(try await fleet.send(.DELETE, fleet.urls[2] + "/v1/me", bearer: session.access).json["revocationsPending"] as? Int == 1)
        #expect(try await fleet.send(.DELETE, fleet.emulatorURL + "/emulator/faults").status < 300)
        // Instance 2 takes it and hangs in Apple's call; it is killed there.
        #expect(
            try await fleet.send(
                .POST, fleet.emulatorURL + "/emulator/faults", json: ["endpoint": "/auth/revoke", "kind": "latency", "latencyMilliseconds": 8000, "count": 1]
            ).status == 201)
        let claimedAt = ContinuousClock.now
        try await fleet.execute("UPDATE outbox SET next_attempt_at = 0 WHERE completed_at IS NULL")
        try await poll(until: "instance 2 to take the owed revocation", within: .seconds(20), every: .milliseconds(100)) {
            try await fleet.count("SELECT COUNT(*) FROM outbox WHERE completed_at IS NULL AND next_attempt_at > 0") == 1
        }
        try await Task.sleep(for: .milliseconds(500))
        fleet.kill(2)
        #expect(try await fleet.count("SELECT COUNT(*) FROM outbox WHERE completed_at IS NULL") == 1)
        try await fleet.start(2)
        try await poll(until: "another instance to make the killed one's revocation", within: .seconds(40), every: .milliseconds(100)) {
            try await fleet.count("SELECT COUNT(*) FROM outbox WHERE completed_at IS NULL") == 0
        }
        let waited = ContinuousClock.now - claimedAt
        print("fleet: the revocation a killed instance had taken was made after", waited)
        #expect(waited >= .seconds(14))  // not before the lease (15 s) ended
        #expect(try await fleet.count("SELECT COUNT(*) FROM outbox WHERE completed_at IS NOT NULL AND last_error IS NULL") == 1)
    }

    @Test("a key rotated with `latchkey keys rotate` is published and accepted by every instance before any token is signed with it")
    func keyRotation() async throws {
        let fleet = try await Fleet(instances: 3)
        defer { fleet.stop() }
        let session = try await fleet.signIn(at: 0)
        let oldKey = try #require(Self.keyID(session.access))
        let rotated = try await CLI.run(["keys", "rotate", "--json"], environment: fleet.environment, directory: fleet.directory)
        #expect(rotated.status == 0, "\(rotated.stderr)")
        let newKey = try #require(rotated.json["activeKeyId"] as? String)
        var publishedEverywhere = false
        var refresh = session.refresh
        let deadline = ContinuousClock.now + TestTime.scaled(.seconds(30))
        while ContinuousClock.now < deadline {
            // Order matters: JWKS first, then a token. A token with the new key before every JWKS has it fails the test.
            var published = true
            for index in fleet.urls.indices {
                let keys = try await fleet.get(index, "/.well-known/jwks.json").json["keys"] as? [[String: Any]] ?? []
                published = published && keys.contains { $0["kid"] as? String == newKey }
            }
            publishedEverywhere = publishedEverywhere || published
            let answer = try await fleet.refresh(at: Int.random(in: 0..<3), refresh)
            #expect(answer.status == 200)
            refresh = try #require(answer.json["refreshToken"] as? String)
            let access = try #require(answer.json["accessToken"] as? String)
            if Self.keyID(access) == newKey {
                #expect(publishedEverywhere, "a token was signed with the new key before every instance published it")
                for index in fleet.urls.indices { #expect(try await fleet.get(index, "/v1/me", bearer: access).status == 200) }
                return
            }
            #expect(Self.keyID(access) == oldKey)
            try await Task.sleep(for: .milliseconds(200))
        }
        Issue.record("no token was signed with the new key within 30 s")
    }

    @Test("a sweep waiting on a lock does not hold up key reloads: a rotation is still published within seconds")
    func sweepWaitingOnLock() async throws {
        let fleet = try await Fleet(instances: 1)
        defer { fleet.stop() }
        try await fleet.whileLocked("used_sign_in_tokens") {
            // Restarted, the instance sweeps at once, and its sweep waits for the lock.
            fleet.kill(0)
            try await fleet.start(0)
            let rotated = try await CLI.run(["keys", "rotate", "--json"], environment: fleet.environment, directory: fleet.directory)
            #expect(rotated.status == 0, "\(rotated.stderr)")
            let newKey = try #require(rotated.json["activeKeyId"] as? String)
            try await poll(until: "the rotated key in the JWKS", within: .seconds(10), every: .milliseconds(100)) {
                let keys = try await fleet.get(0, "/.well-known/jwks.json").json["keys"] as? [[String: Any]] ?? []
                return keys.contains { $0["kid"] as? String == newKey }
            }
        }
    }

    @Test("rate limits are per instance: each applies the configured numbers (divide them by the instance count)")
    func rateLimitsPerInstance() async throws {
        let fleet = try await Fleet(instances: 2, environment: ["LATCHKEY_RATE_LIMIT_PER_IP": "5"])
        defer { fleet.stop() }
        for index in 0..<2 {
            var statuses: [Int] = []
            for _ in 0..<6 { statuses.append(try await fleet.post(index, "/v1/token", json: ["refreshToken": "unknown"]).status) }
            #expect(statuses == [400, 400, 400, 400, 400, 429], "instance \(index): \(statuses)")
        }
    }
}
