import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Emulator: /auth/token and /auth/revoke")
struct TokenEndpointTests {
    func expectError(
        _ harness: EmulatorHarness, _ form: [(String, String)], _ code: String, headers: [(String, String)] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let answer = try await harness.send("POST", "/auth/token", form: form, headers: headers)
        #expect(answer.status == 400, sourceLocation: sourceLocation)
        #expect(answer.json.keys.sorted() == ["error"], sourceLocation: sourceLocation)
        #expect(answer.json["error"] as? String == code, "\(answer.text)", sourceLocation: sourceLocation)
        #expect(answer.headers["cache-control"] == "no-store", sourceLocation: sourceLocation)
        #expect(answer.headers["pragma"] == "no-cache", sourceLocation: sourceLocation)
    }

    @Test("a code is single-use")
    func reuse() async throws {
        try await EmulatorHarness.with { harness in
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            _ = try await harness.apple.exchangeCode(signIn.code, clientID: Fixtures.bundleID)
            await #expect(throws: LatchkeyError(.invalidGrant, "")) { _ = try await harness.apple.exchangeCode(signIn.code, clientID: Fixtures.bundleID) }
        }
    }

    @Test("a code expires after five minutes")
    func expiry() async throws {
        try await EmulatorHarness.with { harness in
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            _ = try await harness.send("POST", "/emulator/clock", json: ["offsetSeconds": 301])
            try await expectError(harness, try harness.tokenForm([("grant_type", "authorization_code"), ("code", signIn.code)]), "invalid_grant")
        }
    }

    @Test("a native code is bound to the bundle id and to having no redirect_uri")
    func binding() async throws {
        try await EmulatorHarness.with { harness in
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            try await expectError(
                harness, try harness.tokenForm(clientID: Fixtures.servicesID, [("grant_type", "authorization_code"), ("code", signIn.code)]), "invalid_grant")
            try await expectError(
                harness, try harness.tokenForm([("grant_type", "authorization_code"), ("code", signIn.code), ("redirect_uri", EmulatorHarness.redirectURI)]),
                "invalid_grant")
            try await expectError(harness, try harness.tokenForm([("grant_type", "authorization_code"), ("code", "c0000.0.abcd.unknown")]), "invalid_grant")
        }
    }

    @Test("malformed requests: missing or unsupported grant, missing code, repeated parameter, wrong content type")
    func malformed() async throws {
        try await EmulatorHarness.with { harness in
            try await expectError(harness, try harness.tokenForm([]), "invalid_request")
            try await expectError(harness, try harness.tokenForm([("grant_type", "password")]), "unsupported_grant_type")
            try await expectError(harness, try harness.tokenForm([("grant_type", "authorization_code")]), "invalid_request")
            try await expectError(harness, try harness.tokenForm([("grant_type", "refresh_token")]), "invalid_request")
            try await expectError(harness, try harness.tokenForm([("grant_type", "authorization_code"), ("code", "a"), ("code", "b")]), "invalid_request")
            try await expectError(
                harness, try harness.tokenForm([("grant_type", "refresh_token"), ("refresh_token", "r")]), "invalid_request",
                headers: [("Content-Type", "application/json")])
            try await expectError(harness, try harness.tokenForm([("grant_type", "client_credentials"), ("scope", "openid")]), "invalid_scope")
        }
    }

    @Test(
        "bodies that are not form encoding are invalid_request, never a crash",
        arguments: [
            #"{"client_id":"com.example.app"}"#, "refresh_token=José", "a=%zz", "a=b c", "grant_type=x|y",
        ])
    func malformedBodies(body: String) async throws {
        try await EmulatorHarness.with { harness in
            for path in ["/auth/token", "/auth/revoke", "/auth/usermigrationinfo"] {
                let answer = try await harness.send("POST", path, rawBody: body, headers: [("Content-Type", "application/x-www-form-urlencoded")])
                #expect(answer.status == 400)
                #expect(answer.json["error"] as? String == "invalid_request")
            }
            #expect(
                try await harness.send("POST", "/google/token", rawBody: body, headers: [("Content-Type", "application/x-www-form-urlencoded")]).status == 400)
            #expect(
                try await harness.send("POST", "/auth/authorize", rawBody: body, headers: [("Content-Type", "application/x-www-form-urlencoded")]).status == 400
            )
            #expect(try await harness.send("GET", "/auth/keys").status == 200)  // still alive
        }
    }

    @Test("the code exchange answers tokens; refresh returns no new refresh token; revocation ends the grant")
    func lifecycle() async throws {
        try await EmulatorHarness.with { harness in
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser(), nonce: "n-1")
            let tokens = try await harness.apple.exchangeCode(signIn.code, clientID: Fixtures.bundleID)
            #expect(tokens.tokenType == "Bearer")
            #expect(tokens.expiresIn == 3600)
            let refreshToken = try #require(tokens.refreshToken)
            let identity = try await harness.verifier.verify(try #require(tokens.idToken), expecting: .init(rawNonce: "n-1", accessToken: tokens.accessToken))
            #expect(identity.audience == Fixtures.bundleID)

            let refreshed = try await harness.apple.validateRefreshToken(refreshToken, clientID: Fixtures.bundleID)
            #expect(refreshed.refreshToken == nil)
            #expect(refreshed.idToken != nil)
            await #expect(throws: LatchkeyError(.invalidGrant, "")) {
                _ = try await harness.apple.validateRefreshToken(refreshToken, clientID: Fixtures.servicesID)
            }

            try await harness.apple.revoke(refreshToken, clientID: Fixtures.bundleID)
            await #expect(throws: LatchkeyError(.invalidGrant, "")) {
                _ = try await harness.apple.validateRefreshToken(refreshToken, clientID: Fixtures.bundleID)
            }
        }
    }

    @Test("revoking an unknown token answers 200 with an empty body; a token of another client is invalid_grant")
    func revokeUnknown() async throws {
        try await EmulatorHarness.with { harness in
            let answer = try await harness.send(
                "POST", "/auth/revoke", form: try harness.tokenForm([("token", "unknown"), ("token_type_hint", "refresh_token")]))
            #expect(answer.status == 200)
            #expect(answer.body.isEmpty)
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            let tokens = try await harness.apple.exchangeCode(signIn.code, clientID: Fixtures.bundleID)
            await #expect(throws: LatchkeyError(.invalidGrant, "")) { try await harness.apple.revoke(tokens.refreshToken!, clientID: Fixtures.servicesID) }
            let missing = try await harness.send("POST", "/auth/revoke", form: try harness.tokenForm([]))
            #expect(missing.json["error"] as? String == "invalid_request")
        }
    }

    @Test("after revocation the next sign-in shares name and e-mail again")
    func revocationResetsFirstSignIn() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            let first = try await harness.nativeSignIn(sub: sub)
            #expect(first.user != nil)
            #expect(try await harness.nativeSignIn(sub: sub).user == nil)
            let tokens = try await harness.apple.exchangeCode(first.code, clientID: Fixtures.bundleID)
            try await harness.apple.revoke(tokens.refreshToken!, clientID: Fixtures.bundleID)
            #expect(try await harness.nativeSignIn(sub: sub).user != nil)
        }
    }

    @Test("refresh is refused after consent revocation and after account deletion")
    func refreshAfterAccountEvents() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            let tokens = try await harness.apple.exchangeCode(try await harness.nativeSignIn(sub: sub).code, clientID: Fixtures.bundleID)
            #expect(try await harness.send("POST", "/emulator/users/\(sub)/consent-revocation").status == 204)
            await #expect(throws: LatchkeyError(.invalidGrant, "")) {
                _ = try await harness.apple.validateRefreshToken(tokens.refreshToken!, clientID: Fixtures.bundleID)
            }

            let other = try await harness.createUser(email: "other@example.com")
            let otherTokens = try await harness.apple.exchangeCode(try await harness.nativeSignIn(sub: other).code, clientID: Fixtures.bundleID)
            #expect(try await harness.send("DELETE", "/emulator/users/\(other)").status == 204)
            await #expect(throws: LatchkeyError(.invalidGrant, "")) {
                _ = try await harness.apple.validateRefreshToken(otherTokens.refreshToken!, clientID: Fixtures.bundleID)
            }
            #expect(try await harness.send("DELETE", "/emulator/users/\(other)").status == 404)
        }
    }

    @Test("the request log records endpoint, client, grant type and outcome")
    func requestLog() async throws {
        try await EmulatorHarness.with { harness in
            let signIn = try await harness.nativeSignIn(sub: try await harness.createUser())
            let tokens = try await harness.apple.exchangeCode(signIn.code, clientID: Fixtures.bundleID)
            _ = try await harness.apple.validateRefreshToken(tokens.refreshToken!, clientID: Fixtures.bundleID)
            let log = try await harness.requestLog().filter { $0["endpoint"] as? String == "/auth/token" }
            #expect(log.map { $0["grantType"] as? String } == ["authorization_code", "refresh_token"])
            #expect(log.allSatisfy { $0["status"] as? Int == 200 && $0["clientId"] as? String == Fixtures.bundleID })
            #expect(try await harness.send("DELETE", "/emulator/requests").status == 204)
            #expect(try await harness.requestLog().isEmpty)
        }
    }
}
