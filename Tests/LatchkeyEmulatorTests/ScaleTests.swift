import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("Emulator: many users and a bounded request log")
struct ScaleTests {
    /// Creates `count` users through the batch endpoint; returns their Apple and Google subjects.
    func createUsers(_ count: Int, _ harness: EmulatorHarness) async throws -> [(sub: String, googleSub: String)] {
        let answer = try await harness.send("POST", "/emulator/users/batch", json: ["count": count])
        #expect(answer.status == 201, "\(answer.text.prefix(200))")
        let users = try #require(answer.json["users"] as? [[String: String]])
        return try users.map { (try #require($0["sub"]), try #require($0["googleSub"])) }
    }

    func authorize(_ sub: String, _ harness: EmulatorHarness) async throws -> EmulatorHarness.Answer {
        try await harness.send("POST", "/emulator/authorizations", json: ["sub": sub, "clientId": Fixtures.bundleID])
    }

    @Test("with thousands of users, a sign-in finds its user by Apple or Google subject, and a deleted user is gone")
    func manyUsers() async throws {
        try await EmulatorHarness.with { harness in
            let batch = try await createUsers(5_000, harness)
            #expect(batch.count == 5_000)
            #expect(Set(batch.map(\.sub)).count == 5_000)
            let late = try await harness.send("POST", "/emulator/users", json: ["email": "late@example.com", "givenName": "Late"])
            let lateSub = try #require(late.json["sub"] as? String)
            let lateGoogleSub = try #require(late.json["googleSub"] as? String)

            for sub in [lateSub, batch[0].sub, batch[2_500].sub, batch[4_999].sub] {
                let signIn = try await harness.nativeSignIn(sub: sub)
                #expect(try await harness.verifier.verify(signIn.identityToken).subject == sub)
            }
            // A Google subject names the same user: the Apple sign-in carries the user's Apple subject.
            for (sub, googleSub) in [(lateSub, lateGoogleSub), (batch[4_998].sub, batch[4_998].googleSub)] {
                let signIn = try await harness.nativeSignIn(sub: googleSub)
                #expect(try await harness.verifier.verify(signIn.identityToken).subject == sub)
            }

            #expect(try await harness.send("DELETE", "/emulator/users/\(lateSub)").status == 204)
            for sub in [lateSub, lateGoogleSub] {
                let refused = try await authorize(sub, harness)
                #expect(refused.status == 404)
                #expect(refused.json["error"] as? String == "not_found")
                #expect(refused.json["error_description"] as? String == "no user with sub \(sub)")
            }
            #expect(try await harness.send("DELETE", "/emulator/users/\(lateGoogleSub)").status == 404)
            // Deleting by Google subject works too, and leaves the other users alone.
            #expect(try await harness.send("DELETE", "/emulator/users/\(batch[1].googleSub)").status == 204)
            #expect(try await authorize(batch[1].sub, harness).status == 404)
            #expect(try await authorize(batch[2].sub, harness).status == 201)
        }
    }

    @Test("a web sign-in with a known e-mail (any case) is that user, until the user is deleted")
    func userByEmail() async throws {
        try await EmulatorHarness.with { harness in
            _ = try await createUsers(2_000, harness)
            let sub = try await harness.createUser(email: "Known.User@example.com")
            func webSignIn(email: String) async throws -> String {
                let form: [(String, String)] = [
                    ("client_id", Fixtures.servicesID), ("redirect_uri", EmulatorHarness.redirectURI), ("response_type", "code id_token"),
                    ("response_mode", "fragment"), ("email", email), ("action", "continue"),
                ]
                let answer = try await harness.send("POST", "/auth/authorize", form: form)
                let location = try #require(answer.headers["location"])
                let fragment = try #require(URLComponents(string: location)?.fragment)
                let idToken = try #require(URLComponents(string: "?" + fragment)?.queryItems?.first { $0.name == "id_token" }?.value)
                return try await harness.verifier.verify(idToken).subject
            }
            #expect(try await webSignIn(email: "known.user@EXAMPLE.com") == sub)
            #expect(try await harness.send("DELETE", "/emulator/users/\(sub)").status == 204)
            #expect(try await webSignIn(email: "known.user@example.com") != sub)
        }
    }

    @Test("the batch endpoint refuses counts out of range")
    func batchLimits() async throws {
        try await EmulatorHarness.with { harness in
            let bodies: [[String: any Sendable]] = [["count": 0], ["count": 100_001], ["count": 2, "realUserStatus": 7]]
            for body in bodies {
                let answer = try await harness.send("POST", "/emulator/users/batch", json: body)
                #expect(answer.status == 400)
                #expect(answer.json["error"] as? String == "invalid_request")
            }
            let noCount = try await harness.send("POST", "/emulator/users/batch", json: [:])
            #expect(noCount.status == 400)
        }
    }

    @Test("the request log keeps the newest entries up to its capacity, oldest first")
    func boundedLog() async throws {
        var configuration = EmulatorHarness.configuration()
        configuration.requestLogCapacity = 5
        try await EmulatorHarness.with(configuration) { harness in
            func token(_ grantType: String) async throws {
                _ = try await harness.send("POST", "/auth/token", form: [("client_id", Fixtures.bundleID), ("grant_type", grantType)])
            }
            for index in 0..<3 { try await token("g\(index)") }
            #expect(try await harness.requestLog().map { $0["grantType"] as? String } == ["g0", "g1", "g2"])
            for index in 3..<12 { try await token("g\(index)") }
            #expect(try await harness.requestLog().map { $0["grantType"] as? String } == ["g7", "g8", "g9", "g10", "g11"])
            #expect(try await harness.send("DELETE", "/emulator/requests").status == 204)
            for index in 12..<14 { try await token("g\(index)") }
            #expect(try await harness.requestLog().map { $0["grantType"] as? String } == ["g12", "g13"])
            for index in 14..<20 { try await token("g\(index)") }
            #expect(try await harness.requestLog().map { $0["grantType"] as? String } == ["g15", "g16", "g17", "g18", "g19"])
        }
    }

    @Test("a request log of capacity 0 keeps nothing")
    func noLog() async throws {
        var configuration = EmulatorHarness.configuration()
        configuration.requestLogCapacity = 0
        try await EmulatorHarness.with(configuration) { harness in
            _ = try await harness.send("GET", "/auth/keys")
            #expect(try await harness.requestLog().isEmpty)
        }
    }
}
