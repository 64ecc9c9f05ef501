import AsyncHTTPClient
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import SQLiteNIO
import Testing

@Suite("Server: sign-in replay, nonces, key rotation and store outages")
struct SignInHardeningTests {
    @Test("a token that carries a nonce, sent without rawNonce, is refused with nonce_required")
    func nonceWithoutRawNonce() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("the-app-nonce"))
            let stolen = try await harness.post("/v1/auth/apple", json: ["identityToken": apple.identityToken, "authorizationCode": apple.code])
            #expect(stolen.status == 401)
            #expect(stolen.error == "nonce_required")
            #expect((stolen.json["error_description"] as? String)?.contains("send the raw nonce the app generated") == true)
            // The same token with its raw nonce still signs in: the refusal did not use it up.
            let owner = try await harness.post(
                "/v1/auth/apple", json: ["identityToken": apple.identityToken, "rawNonce": "the-app-nonce", "authorizationCode": apple.code])
            #expect(owner.status == 200, "\(owner.text)")
        }
    }

    @Test("apple.requireNonce (on by default) refuses tokens without a nonce and names the setting; off, they sign in")
    func requireNonce() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let apple = try await harness.emulator.nativeSignIn(sub: sub)
            let answer = try await harness.post("/v1/auth/apple", json: ["identityToken": apple.identityToken, "authorizationCode": apple.code])
            #expect(answer.status == 401)
            #expect(answer.error == "nonce_required")
            #expect((answer.json["error_description"] as? String)?.contains("apple.requireNonce") == true)
        }
        try await ServerHarness.with(configure: { $0.apple?.requireNonce = false }) { harness in
            let sub = try await harness.emulator.createUser()
            let apple = try await harness.emulator.nativeSignIn(sub: sub)
            let answer = try await harness.post("/v1/auth/apple", json: ["identityToken": apple.identityToken, "authorizationCode": apple.code])
            #expect(answer.status == 200, "\(answer.text)")
            // Off only allows a missing nonce; a token carrying one still needs its raw nonce.
            let withNonce = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("n"))
            #expect(try await harness.post("/v1/auth/apple", json: ["identityToken": withNonce.identityToken]).error == "nonce_required")
        }
    }

    @Test("an identity token starts one session only, on this instance and on another one sharing the store")
    func singleUse() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("n-1"))
            let body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": "n-1"]
            #expect(try await harness.post("/v1/auth/apple", json: body).status == 200)
            let again = try await harness.post("/v1/auth/apple", json: body)
            #expect(again.status == 401)
            #expect(again.error == "token_already_used")

            let signedPart = apple.identityToken[..<(try #require(apple.identityToken.lastIndex(of: ".")))]
            // A second instance on the same database refuses it too.
            let second = try await LatchkeyServer.make(
                configuration: harness.server.configuration, store: harness.store, encryptionKey: harness.encryptionKey,
                transport: AsyncHTTPClientTransport(), timeSource: harness.clock.source
            )
            let identity = try await verifiedIdentity(apple.identityToken, harness)
            await #expect(throws: LatchkeyError(.tokenAlreadyUsed, "")) {
                try await second.sessions.signIns.claimSignIn(apple.identityToken, provider: "apple", identity: identity)
            }
            // The claim is on what the signature covers: another signature over the same claims (ECDSA allows
            // one) is the same sign-in.
            await #expect(throws: LatchkeyError(.tokenAlreadyUsed, "")) {
                try await second.sessions.signIns.claimSignIn(signedPart + ".b3RoZXItc2lnbmF0dXJl", provider: "apple", identity: identity)
            }
            #expect(try await harness.store.sessions(userID: try #require(try await harness.store.identity(provider: "apple", subject: sub)).userID).count == 1)
        }
    }

    @Test("a sign-in that fails after its token was claimed (Apple down) can be retried with the same token")
    func releasedAfterFailure() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("n"))
            let body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": "n", "authorizationCode": apple.code]
            _ = try await harness.emulator.send("POST", "/emulator/faults", json: ["endpoint": "/auth/token", "kind": "status", "status": 503, "count": 3])
            let failed = try await harness.post("/v1/auth/apple", json: body)
            #expect(failed.status == 503)
            _ = try await harness.emulator.send("DELETE", "/emulator/faults")
            let retried = try await harness.post("/v1/auth/apple", json: body)
            #expect(retried.status == 200, "\(retried.text)")
        }
    }

    @Test("a signing key the provider rotates in right after a sign-in is accepted within 5 s")
    func providerKeyRotation() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            #expect(try await harness.signIn(sub: sub).status == 200)  // the server has just fetched Apple's keys
            _ = try await harness.emulator.send("POST", "/emulator/keys/rotate")
            // Judged by when the accepted attempt was sent, so a slow machine's slow answers do not count.
            let started = ContinuousClock.now
            var status = 0
            var acceptedAttemptSent = started
            while status != 200, ContinuousClock.now - started < .seconds(15) {
                acceptedAttemptSent = ContinuousClock.now
                status = try await harness.signIn(sub: sub, withCode: false).status
                if status != 200 { try await Task.sleep(for: .milliseconds(200)) }
            }
            #expect(status == 200)
            #expect(acceptedAttemptSent - started < .seconds(5))
        }
    }

    @Test("while the database is locked by another writer, sign-ins get 503 temporarily_unavailable, not 500")
    func storeUnavailable() async throws {
        try await ServerHarness.with { harness in
            let sub = try await harness.emulator.createUser()
            let blocker = try await SQLiteConnection.open(storage: .file(path: harness.databasePath))
            _ = try await blocker.query("BEGIN EXCLUSIVE")
            let answer = try await harness.signIn(sub: sub)
            _ = try await blocker.query("ROLLBACK")
            try await blocker.close()
            #expect(answer.status == 503, "\(answer.text)")
            #expect(answer.error == "temporarily_unavailable")
            #expect(answer.headers["retry-after"] != nil)
            #expect(try await harness.signIn(sub: sub).status == 200)
        }
    }

    @Test("once the store is closed (shutting down), requests get 503 temporarily_unavailable, not 500")
    func storeClosed() async throws {
        try await ServerHarness.with { harness in
            let (_, tokens) = try await harness.signedIn()
            await harness.store.close()
            for answer in [try await harness.send("GET", "/v1/me", bearer: tokens.accessToken), try await harness.refresh(tokens.refreshToken)] {
                #expect(answer.status == 503, "\(answer.text)")
                #expect(answer.error == "temporarily_unavailable")
            }
        }
    }

    @Test("discovery's token_endpoint is the one that answers RFC 6749 §5.1, not the app-facing /v1/token")
    func discoveryTokenEndpoint() async throws {
        try await ServerHarness.with { harness in
            let document = try await harness.send("GET", "/.well-known/openid-configuration").json
            #expect(document["jwks_uri"] as? String == harness.server.configuration.issuer + "/.well-known/jwks.json")
            #expect(document["token_endpoint"] as? String == harness.server.configuration.issuer + "/oauth2/token")
        }
    }

    private func verifiedIdentity(_ token: String, _ harness: ServerHarness) async throws -> VerifiedIdentity {
        let keys = JWKSCache(url: harness.emulator.emulator.baseURL + "/auth/keys", transport: AsyncHTTPClientTransport())
        return try await IdentityTokenVerifier(policy: .apple(clientIDs: [Fixtures.bundleID]), keys: keys, timeSource: harness.clock.source).verify(token)
    }
}
