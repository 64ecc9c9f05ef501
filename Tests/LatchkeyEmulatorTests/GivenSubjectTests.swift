import Foundation
import LatchkeyEmulator
import LatchkeyTestSupport
import Testing

@Suite("Emulator: users created with the subjects they already have at Apple and Google")
struct GivenSubjectTests {
    static let apple = "001122.0123456789abcdef0123456789abcdef.3344"
    static let google = "109876543210987654321"

    func claims(_ token: String) -> [String: Any] { jsonSegment(token.split(separator: ".")[1]) }

    @Test("a user created with subjects signs in under them, is found by them, is notified under them, and frees them when deleted")
    func givenSubjects() async throws {
        // Notifications go nowhere; their records are enough.
        try await EmulatorHarness.with(EmulatorHarness.configuration(notificationURL: "http://127.0.0.1:9/notifications")) { harness in
            let user = try await harness.createUserAnswer(["subjects": ["apple": Self.apple, "google": Self.google]])
            #expect(user["sub"] as? String == Self.apple)
            #expect(user["googleSub"] as? String == Self.google)
            #expect((user["subs"] as? [String: Any])?[Fixtures.teamID] as? String == Self.apple)
            let subjects = try #require(user["subjects"] as? [String: Any])
            #expect(subjects["apple"] as? String == Self.apple)
            #expect(subjects["google"] as? String == Self.google)
            #expect((subjects["microsoft"] as? String)?.isEmpty == false)

            let signIn = try await harness.nativeSignIn(sub: Self.apple)
            #expect(try await harness.verifier.verify(signIn.identityToken).subject == Self.apple)
            let tokens = try await harness.apple.exchangeCode(signIn.code, clientID: Fixtures.bundleID)
            #expect(claims(try #require(tokens.idToken))["sub"] as? String == Self.apple)
            let refreshed = try await harness.apple.validateRefreshToken(try #require(tokens.refreshToken), clientID: Fixtures.bundleID)
            #expect(claims(try #require(refreshed.idToken))["sub"] as? String == Self.apple)

            for sub in [Self.google, Self.apple] {
                let google = try await harness.providerSignIn("google", sub: sub)
                #expect(google["sub"] as? String == Self.google)
                #expect(claims(try #require(google["idToken"] as? String))["sub"] as? String == Self.google)
            }

            #expect(try await harness.send("POST", "/emulator/users/\(Self.apple)/email-forwarding", json: ["enabled": false]).status == 204)
            let records = try await harness.send("GET", "/emulator/notifications").array
            #expect(records.map { $0["sub"] as? String } == [Self.apple])

            #expect(try await harness.send("DELETE", "/emulator/users/\(Self.apple)").status == 204)
            let gone = try await harness.send(
                "POST", "/emulator/authorizations", json: ["provider": "google", "sub": Self.google, "clientId": Fixtures.bundleID])
            #expect(gone.status == 404)
            let again = try await harness.createUserAnswer(["subjects": ["apple": Self.apple, "google": Self.google]])
            #expect(again["sub"] as? String == Self.apple)
        }
    }

    @Test("only the given subjects replace derived ones: google alone leaves the Apple subject derived")
    func googleAlone() async throws {
        try await EmulatorHarness.with { harness in
            let user = try await harness.createUserAnswer(["subjects": ["google": Self.google]])
            let sub = try #require(user["sub"] as? String)
            #expect(sub.wholeMatch(of: /\d{6}\.[0-9a-f]{32}\.\d{4}/) != nil)
            #expect(user["googleSub"] as? String == Self.google)
            #expect(claims(try await harness.nativeSignIn(sub: sub).identityToken)["sub"] as? String == sub)
        }
    }

    @Test("a subject another user has, an empty one, one given twice or of another provider is refused with 400")
    func refusals() async throws {
        try await EmulatorHarness.with { harness in
            let first = try await harness.createUserAnswer(["subjects": ["apple": Self.apple]])
            let derivedGoogle = try #require(first["googleSub"] as? String)
            let cases: [([String: String], String)] = [
                (["apple": Self.apple], "already"),
                (["google": Self.apple], "already"),
                (["google": derivedGoogle], "already"),
                (["apple": ""], "empty"),
                (["google": ""], "empty"),
                (["microsoft": "abc"], "apple and google"),
                (["Apple": "abc"], "apple and google"),
                (["apple": "same", "google": "same"], "differ"),
            ]
            for (subjects, reason) in cases {
                let answer = try await harness.send("POST", "/emulator/users", json: ["subjects": subjects])
                #expect(answer.status == 400, "\(subjects)")
                #expect(answer.json["error"] as? String == "invalid_request")
                #expect((answer.json["error_description"] as? String)?.contains(reason) == true, "\(subjects): \(answer.text)")
            }
            #expect(try await harness.send("POST", "/emulator/users", json: ["subjects": ["apple": 7]]).status == 400)
            // Nothing refused was kept: the subjects are still free.
            let second = try await harness.createUserAnswer(["subjects": ["apple": "same", "google": "abc"]])
            #expect(second["sub"] as? String == "same")
        }
    }

    @Test("an Apple subject needs a team")
    func noTeam() async throws {
        var configuration = EmulatorConfiguration()
        configuration.addClientEverywhere(EmulatorHarness.providerClientID)
        try await EmulatorHarness.with(configuration) { harness in
            let answer = try await harness.send("POST", "/emulator/users", json: ["subjects": ["apple": Self.apple]])
            #expect(answer.status == 400)
            #expect((answer.json["error_description"] as? String)?.contains("no team") == true)
            #expect(try await harness.send("POST", "/emulator/users", json: ["subjects": ["google": Self.google]]).status == 201)
        }
    }
}
