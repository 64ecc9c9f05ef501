import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Emulator: Apple app transfer (POST /emulator/apple/transfers)")
struct AppTransferTests {
    static let recipientTeam = "TEAMC12345"
    static let day: TimeInterval = 86_400

    func claims(_ token: String) -> [String: Any] { jsonSegment(token.split(separator: ".")[1]) }

    func transfer(_ harness: EmulatorHarness, _ fields: [String: any Sendable] = [:]) async throws -> EmulatorHarness.Answer {
        let body: [String: any Sendable] = ["clientId": Fixtures.bundleID, "toTeamId": Self.recipientTeam]
        return try await harness.send("POST", "/emulator/apple/transfers", json: body.merging(fields) { _, given in given })
    }

    /// The recipient team's credentials, from a transfer's answer.
    func credentials(_ answer: EmulatorHarness.Answer) throws -> AppleSigningCredentials {
        try AppleSigningCredentials(
            teamID: try #require(answer.json["teamId"] as? String), keyID: try #require(answer.json["keyId"] as? String),
            privateKeyPEM: try #require(answer.json["privateKey"] as? String))
    }

    /// A client of the bundle id with `credentials`, its client secrets made `offset` seconds ahead (the emulator's clock).
    func client(_ harness: EmulatorHarness, _ credentials: AppleSigningCredentials, offset: TimeInterval = 0) throws -> AppleClient {
        try AppleClient(
            configuration: AppleConfiguration(credentials: credentials, clientIDs: [Fixtures.bundleID], baseURL: harness.emulator.baseURL, retry: .never),
            timeSource: TimeSource { Date().addingTimeInterval(offset) })
    }

    /// A refresh-token validation of the bundle id, with a client secret made with `credentials`.
    func refresh(_ harness: EmulatorHarness, _ token: String, _ credentials: AppleSigningCredentials) async throws -> EmulatorHarness.Answer {
        let secret = try AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: Fixtures.bundleID, issuedAt: Date(), lifetime: 600)
        return try await harness.send(
            "POST", "/auth/token", form: try harness.tokenForm(secret: secret, [("grant_type", "refresh_token"), ("refresh_token", token)]))
    }

    func moveClock(_ harness: EmulatorHarness, _ offset: TimeInterval) async throws {
        #expect(try await harness.send("POST", "/emulator/clock", json: ["offsetSeconds": offset]).status == 200)
    }

    @Test("an unknown app is 404; the app's own team, or a toTeamId that is not 10 upper-case letters and digits, is 400")
    func refusals() async throws {
        try await EmulatorHarness.with { harness in
            let unknown = try await transfer(harness, ["clientId": "com.unknown.app"])
            #expect(unknown.status == 404)
            #expect(unknown.json["error"] as? String == "not_found")
            for team in [Fixtures.teamID, "teamc12345", "TEAMC1234", "TEAMC123456", "TEAM-12345", ""] {
                let answer = try await transfer(harness, ["toTeamId": team])
                #expect(answer.status == 400, "\(team)")
                #expect(answer.json["error"] as? String == "invalid_request")
            }
            #expect(try await harness.send("POST", "/emulator/apple/transfers", json: ["clientId": Fixtures.bundleID]).status == 400)
            // Nothing moved: the sending team still authenticates the app.
            _ = try await harness.apple.teamTransferToken(clientID: Fixtures.bundleID)
        }
    }

    @Test("the sending team's transfer identifier: its own Team ID as target is invalid_request; asked again, the same one")
    func transferIdentifier() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            await #expect(throws: LatchkeyError(.invalidRequest, "")) {
                _ = try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: Fixtures.teamID, clientID: Fixtures.bundleID)
            }
            let first = try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: Self.recipientTeam, clientID: Fixtures.bundleID)
            #expect(first.wholeMatch(of: /\d{6}\.[0-9a-f]{32}\.\d{4}/) != nil)
            #expect(try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: Self.recipientTeam, clientID: Fixtures.servicesID) == first)
            #expect(try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: "TEAMD12345", clientID: Fixtures.bundleID) != first)
        }
    }

    @Test("after a transfer: new key, old secret and refresh tokens refused, the exchange answers, sign-ins carry the new sub and transfer_sub for 60 days")
    func transferredApp() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser(hideMyEmail: true)
            let first = try await harness.nativeSignIn(sub: sub)
            #expect(first.user != nil)
            let oldEmail = claims(first.identityToken)["email"] as? String
            let tokens = try await harness.apple.exchangeCode(first.code, clientID: Fixtures.bundleID)
            let oldRefreshToken = try #require(tokens.refreshToken)
            let transferSub = try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: Self.recipientTeam, clientID: Fixtures.bundleID)
            let newcomer = try await harness.createUser(email: "newcomer@example.com")

            let moved = try await transfer(harness)
            #expect(moved.status == 201)
            #expect(moved.json["teamId"] as? String == Self.recipientTeam)
            #expect((moved.json["keyId"] as? String)?.wholeMatch(of: /[A-Z0-9]{10}/) != nil)
            #expect((moved.json["privateKey"] as? String)?.hasPrefix("-----BEGIN PRIVATE KEY-----") == true)
            let recipient = try credentials(moved)
            let sending = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
            #expect(try await transfer(harness).status == 400)  // already there

            // Only the recipient's client secret authenticates the app; the sending team's refresh tokens are dead for it.
            #expect(try await refresh(harness, oldRefreshToken, sending).json["error"] as? String == "invalid_client")
            #expect(try await refresh(harness, oldRefreshToken, recipient).json["error"] as? String == "invalid_grant")
            // The sending team's other apps stay with it.
            _ = try await harness.apple.teamTransferToken(clientID: Fixtures.servicesID)

            // The recipient exchanges the identifier for the user's subject and relay address under its team.
            let teamC = try client(harness, recipient)
            let migrated = try await teamC.exchangeTransferSubject(transferSub, clientID: Fixtures.bundleID)
            #expect(migrated.sub != sub)
            #expect(migrated.isPrivateEmail == true)
            #expect(migrated.email?.hasSuffix("@privaterelay.appleid.com") == true)
            #expect(migrated.email != oldEmail)

            // A sign-in after the move: the new subject and transfer_sub, and not a first sign-in (no name or e-mail again).
            let after = try await harness.nativeSignIn(sub: sub)
            #expect(after.user == nil)
            let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: [Fixtures.bundleID]), keys: harness.keys)
            let identity = try await verifier.verify(after.identityToken)
            #expect(identity.subject == migrated.sub)
            #expect(identity.transferSubject == transferSub)
            #expect(claims(after.identityToken)["email"] as? String == migrated.email)
            // The new subject finds the user too; the recipient's codes and refresh tokens work.
            _ = try await harness.nativeSignIn(sub: migrated.sub)
            let newTokens = try await teamC.exchangeCode(after.code, clientID: Fixtures.bundleID)
            let refreshed = try await teamC.validateRefreshToken(try #require(newTokens.refreshToken), clientID: Fixtures.bundleID)
            #expect(claims(try #require(refreshed.idToken))["sub"] as? String == migrated.sub)
            #expect(claims(try #require(refreshed.idToken))["transfer_sub"] as? String == transferSub)

            // A user who never signed in to the app: a first sign-in, no transfer_sub.
            let newcomerSignIn = try await harness.nativeSignIn(sub: newcomer)
            #expect(newcomerSignIn.user != nil)
            #expect(claims(newcomerSignIn.identityToken)["transfer_sub"] == nil)

            // 59 days on, still in the window; 61 days on, the exchange is invalid_request and ID tokens lose transfer_sub.
            try await moveClock(harness, 59 * Self.day)
            #expect(try await client(harness, recipient, offset: 59 * Self.day).exchangeTransferSubject(transferSub, clientID: Fixtures.bundleID) == migrated)
            #expect(claims(try await harness.nativeSignIn(sub: sub).identityToken)["transfer_sub"] as? String == transferSub)
            try await moveClock(harness, 61 * Self.day)
            let later = try client(harness, recipient, offset: 61 * Self.day)
            await #expect(throws: LatchkeyError(.invalidRequest, "")) { _ = try await later.exchangeTransferSubject(transferSub, clientID: Fixtures.bundleID) }
            let late = claims(try await harness.nativeSignIn(sub: sub).identityToken)
            #expect(late["sub"] as? String == migrated.sub)
            #expect(late["transfer_sub"] == nil)
        }
    }

    @Test("the 60 days count from the app transfer, not from when the identifier was generated")
    func windowStartsAtTransfer() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            _ = try await harness.nativeSignIn(sub: sub)
            let transferSub = try await harness.apple.makeTransferSubject(for: sub, recipientTeamID: Self.recipientTeam, clientID: Fixtures.bundleID)
            try await moveClock(harness, 50 * Self.day)
            let recipient = try credentials(try await transfer(harness))
            try await moveClock(harness, 109 * Self.day)
            let migrated = try await client(harness, recipient, offset: 109 * Self.day).exchangeTransferSubject(transferSub, clientID: Fixtures.bundleID)
            #expect(migrated.email == nil)  // not a Hide My Email user
            let signIn = claims(try await harness.nativeSignIn(sub: sub).identityToken)
            #expect(signIn["sub"] as? String == migrated.sub)
            #expect(signIn["transfer_sub"] as? String == transferSub)
            try await moveClock(harness, 111 * Self.day)
            await #expect(throws: LatchkeyError(.invalidRequest, "")) {
                _ = try await client(harness, recipient, offset: 111 * Self.day).exchangeTransferSubject(transferSub, clientID: Fixtures.bundleID)
            }
        }
    }

    @Test("a transfer to a configured team adds a key to it; the team's keys sign for each of its apps")
    func configuredRecipient() async throws {
        var configuration = EmulatorHarness.configuration()
        configuration.addTeam(teamID: "TEAMB12345", keyID: Fixtures.keyID, publicKeyPEM: Fixtures.p8PublicKey)
        configuration.addApp(clientID: "com.teamb.app", teamID: "TEAMB12345")
        try await EmulatorHarness.with(configuration) { harness in
            let moved = try await transfer(harness, ["toTeamId": "TEAMB12345"])
            #expect(moved.status == 201)
            #expect(moved.json["keyId"] as? String != Fixtures.keyID)
            let teamB = try AppleSigningCredentials(teamID: "TEAMB12345", keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
            let teamBClient = try AppleClient(
                configuration: AppleConfiguration(
                    credentials: teamB, clientIDs: ["com.teamb.app", Fixtures.bundleID], baseURL: harness.emulator.baseURL, retry: .never))
            _ = try await teamBClient.teamTransferToken(clientID: "com.teamb.app")
            _ = try await teamBClient.teamTransferToken(clientID: Fixtures.bundleID)
            _ = try await client(harness, try credentials(moved)).teamTransferToken(clientID: Fixtures.bundleID)
        }
    }

    @Test("a user created after a transfer to a new team has a subject under it, and signs in to the moved app under it")
    func userAfterTransfer() async throws {
        try await EmulatorHarness.with { harness in
            #expect(try await transfer(harness).status == 201)
            let user = try await harness.createUserAnswer()
            let subs = try #require(user["subs"] as? [String: String])
            #expect(subs.keys.sorted() == [Fixtures.teamID, Self.recipientTeam].sorted())
            #expect(user["sub"] as? String == subs[Fixtures.teamID])  // the default team is still the first one
            let recipientSub = try #require(subs[Self.recipientTeam])
            #expect(claims(try await harness.nativeSignIn(sub: recipientSub).identityToken)["sub"] as? String == recipientSub)
            #expect(try await harness.send("POST", "/emulator/users/\(recipientSub)/consent-revocation").status == 204)
        }
    }
}
