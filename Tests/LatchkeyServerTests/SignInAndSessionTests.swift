import Foundation
import JWTKit
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@Suite("Server: sign-in and sessions", .timeLimit(.minutes(2)))
struct SignInAndSessionTests {
    @Test("Sign in with Apple creates a user, stores Apple's refresh token sealed, and /v1/me answers")
    func signIn() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser(email: "jane@example.com")
            let answer = try await harness.signIn(sub: sub, fullName: ["givenName": "Jane", "familyName": "Appleseed"])
            #expect(answer.status == 200, "\(answer.text)")
            let signIn = try answer.decode(SignInResponse.self)
            #expect(signIn.isNewUser)
            #expect(signIn.tokenType == "Bearer")
            #expect(signIn.expiresIn == 600)
            #expect(signIn.user.email == "jane@example.com")
            #expect(signIn.user.givenName == "Jane")
            #expect(signIn.user.identities.first?.subject == sub)
            let me = try await harness.send("GET", "/v1/me", bearer: signIn.accessToken)
            #expect(try me.decode(UserResponse.self).id == signIn.user.id)
            // Apple's refresh token is stored, and only sealed.
            let identity = try #require(try await harness.store.identity(provider: "apple", subject: sub))
            let grant = try #require(try await harness.store.providerGrant(identityID: identity.id))
            #expect(grant.sealedRefreshToken.hasPrefix("v1."))
            let log = try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/token" }
            #expect(log.first?["grantType"] as? String == "authorization_code")
        }
    }

    @Test("a name with a control character is refused before anything is verified; a long one is cut to 200 characters")
    func names() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser(email: "nul@example.com")
            for fullName in [["givenName": "A\u{0}"], ["familyName": "Lee\n"], ["givenName": "\u{7F}"]] {
                let refused = try await harness.signIn(sub: sub, fullName: fullName)
                #expect(refused.status == 400, "\(fullName)")
                #expect(refused.error == "invalid_request", "\(fullName)")
            }
            let long = String(repeating: "é", count: 300)
            let answer = try await harness.signIn(sub: sub, fullName: ["givenName": long, "familyName": "Lee"])
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try answer.decode(SignInResponse.self).user.givenName == String(long.prefix(200)))
        }
    }

    @Test("a second sign-in finds the same user, keeps the first name, and is not new")
    func secondSignIn() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser(email: "kim@example.com")
            let first = try await harness.signIn(sub: sub, fullName: ["givenName": "Kim", "familyName": "Lee"]).decode(SignInResponse.self)
            let second = try await harness.signIn(sub: sub, withCode: false, fullName: ["givenName": "", "familyName": ""]).decode(SignInResponse.self)
            #expect(!second.isNewUser)
            #expect(second.user.id == first.user.id)
            #expect(second.user.givenName == "Kim")
            #expect(second.user.email == "kim@example.com")
            // Two sign-ins, two sessions.
            let sessions = try await harness.send("GET", "/v1/me/sessions", bearer: second.accessToken).json["sessions"] as? [[String: Any]]
            #expect(sessions?.count == 2)
            #expect(sessions?.filter { $0["current"] as? Bool == true }.count == 1)
        }
    }

    @Test("a refresh rotates the token; the access token verifies statelessly with the published JWKS")
    func refreshAndJWKS() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            let answer = try await harness.refresh(tokens.refreshToken)
            #expect(answer.status == 200, "\(answer.text)")
            let pair = try answer.decode(TokenPairResponse.self)
            #expect(pair.refreshToken != tokens.refreshToken)
            #expect(try await harness.send("POST", "/v1/token", body: #"{"grant_type":"refresh_token","refresh_token":"\#(pair.refreshToken)"}"#).status == 200)

            // A backend that knows only the JWKS verifies the access token with jwt-kit.
            struct Claims: JWTPayload {
                let sub: SubjectClaim
                let exp: ExpirationClaim
                let client_id: String
                let sid: String
                func verify(using algorithm: some JWTAlgorithm) throws { try exp.verifyNotExpired() }
            }
            let jwks = try await harness.send("GET", "/.well-known/jwks.json")
            #expect(jwks.headers["cache-control"]?.contains("max-age") == true)
            let keys = JWTKeyCollection()
            try await keys.add(jwksJSON: jwks.text)
            let claims = try await keys.verify(pair.accessToken, as: Claims.self)
            #expect(claims.sub.value == tokens.user.id)
            #expect(claims.client_id == Fixtures.bundleID)
            #expect(jsonSegment(pair.accessToken.split(separator: ".")[0])["typ"] as? String == "at+jwt")
            let discovery = try await harness.send("GET", "/.well-known/openid-configuration").json
            #expect(discovery["jwks_uri"] as? String == harness.server.configuration.issuer + "/.well-known/jwks.json")
        }
    }

    @Test("concurrent refreshes of one token all get the same single successor")
    func concurrentRefresh() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            let answers = try await withThrowingTaskGroup(of: ServerHarness.Answer.self) { group in
                for _ in 0..<12 { group.addTask { try await harness.refresh(tokens.refreshToken) } }
                return try await group.reduce(into: [ServerHarness.Answer]()) { $0.append($1) }
            }
            for answer in answers { #expect(answer.status == 200, "\(answer.text)") }
            let successors = Set(answers.compactMap { try? $0.decode(TokenPairResponse.self).refreshToken })
            #expect(successors.count == 1)
            let successor = try #require(successors.first)
            #expect(try await harness.refresh(successor).status == 200)
        }
    }

    @Test("reusing a rotated token whose successor was used, after the grace window, revokes the whole family")
    func reuse() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            let next = try await harness.refresh(tokens.refreshToken).decode(TokenPairResponse.self)
            let third = try await harness.refresh(next.refreshToken).decode(TokenPairResponse.self)
            harness.clock.advance(11)
            let reused = try await harness.refresh(tokens.refreshToken)
            #expect(reused.status == 400)
            #expect(reused.error == "invalid_grant")
            #expect(reused.json["error_description"].map { "\($0)".contains("already used") } == true)
            #expect(try await harness.refresh(third.refreshToken).error == "invalid_grant")
            #expect(try await harness.send("GET", "/v1/me", bearer: third.accessToken).status == 401)
        }
    }

    @Test("a client killed before saving its successor comes back with the old token and gets the same successor, within the recovery window")
    func unusedSuccessorRecovery() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            let lost = try await harness.refresh(tokens.refreshToken).decode(TokenPairResponse.self)  // the app died before saving this
            harness.clock.advance(30 * 60)
            let recovered = try await harness.refresh(tokens.refreshToken)
            #expect(recovered.status == 200, "\(recovered.text)")
            #expect(try recovered.decode(TokenPairResponse.self).refreshToken == lost.refreshToken)
            let next = try await harness.refresh(lost.refreshToken)
            #expect(next.status == 200)
            // Once the successor is used, its parent is spent for good.
            harness.clock.advance(11)
            #expect(try await harness.refresh(tokens.refreshToken).error == "invalid_grant")
        }
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            let lost = try await harness.refresh(tokens.refreshToken).decode(TokenPairResponse.self)
            harness.clock.advance(3601)
            #expect(try await harness.refresh(tokens.refreshToken).error == "invalid_grant")  // past the window: a reuse
            #expect(try await harness.refresh(lost.refreshToken).error == "invalid_grant")
        }
        try await ServerHarness.with(configure: { $0.session.unusedSuccessorRecovery = 0 }) { harness in
            let (_, tokens) = try await harness.signedIn()
            _ = try await harness.refresh(tokens.refreshToken)
            harness.clock.advance(11)
            #expect(try await harness.refresh(tokens.refreshToken).error == "invalid_grant")
        }
    }

    @Test("logout ends this session; logout all ends every session; sessions can be listed and ended")
    func logout() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let a = try await harness.signIn(sub: sub).decode(SignInResponse.self)
            let b = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            let c = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            #expect(try await harness.send("GET", "/v1/me", bearer: a.accessToken).status == 200)  // cached now
            #expect(try await harness.send("POST", "/v1/logout", bearer: a.accessToken).json["revokedSessions"] as? Int == 1)
            #expect(try await harness.send("GET", "/v1/me", bearer: a.accessToken).status == 401)
            #expect(try await harness.refresh(a.refreshToken).error == "invalid_grant")
            let sessions = try await harness.send("GET", "/v1/me/sessions", bearer: b.accessToken).json["sessions"] as? [[String: Any]] ?? []
            let cSession = try #require(sessions.first { $0["current"] as? Bool == false }?["id"] as? String)
            #expect(try await harness.send("DELETE", "/v1/me/sessions/\(cSession)", bearer: b.accessToken).status == 204)
            #expect(try await harness.send("DELETE", "/v1/me/sessions/\(cSession)", bearer: b.accessToken).status == 204)
            #expect(try await harness.send("DELETE", "/v1/me/sessions/unknown", bearer: b.accessToken).status == 404)
            #expect(try await harness.refresh(c.refreshToken).error == "invalid_grant")
            let d = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            #expect(try await harness.post("/v1/logout", json: ["all": true], bearer: d.accessToken).json["revokedSessions"] as? Int == 2)
            #expect(try await harness.refresh(b.refreshToken).error == "invalid_grant")
        }
    }
}
