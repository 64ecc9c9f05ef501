import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Sessions bound to a device key (DPoP, RFC 9449): at sign-in, refresh, `/v1/me` and logout, and every refusal.
@Suite("Server: DPoP-bound sessions")
struct DPoPTests {
    static func guestsOn(_ configuration: inout ServerConfiguration) {
        configuration.session.anonymous.enabled = true
        configuration.session.anonymous.perIPPerHour = 50
    }

    /// A proof for `path` on the harness's server, at the harness's time.
    static func proof(
        _ maker: DPoPProofMaker, _ harness: ServerHarness, _ method: String, _ path: String, accessToken: String? = nil, nonce: String? = nil,
        at offset: TimeInterval = 0
    ) throws -> (String, String) {
        let url = URL(string: harness.server.configuration.issuer + path)!
        return ("DPoP", try maker.proof(method: method, url: url, accessToken: accessToken, nonce: nonce, at: harness.clock.now.addingTimeInterval(offset)))
    }

    static func bound(_ answer: ServerHarness.Answer) throws -> (access: String, refresh: String, jkt: String?, type: String) {
        let tokens = try answer.decode(TokenPairResponse.self)
        let cnf = try AdminAPITests.claims(tokens.accessToken)["cnf"] as? [String: Any]
        return (tokens.accessToken, tokens.refreshToken, cnf?["jkt"] as? String, tokens.tokenType)
    }

    static func refresh(_ harness: ServerHarness, _ token: String, headers: [(String, String)] = []) async throws -> ServerHarness.Answer {
        try await harness.send(
            "POST", "/v1/token", body: "grant_type=refresh_token&refresh_token=\(token)", contentType: "application/x-www-form-urlencoded", headers: headers)
    }

    static func me(_ harness: ServerHarness, _ scheme: String, _ token: String, headers: [(String, String)] = []) async throws -> ServerHarness.Answer {
        try await harness.send("GET", "/v1/me", headers: [("Authorization", "\(scheme) \(token)")] + headers)
    }

    @Test("discovery names ES256 for proofs; a sign-in with a proof is bound (DPoP, cnf.jkt), one without stays bearer")
    func binding() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let metadata = try await harness.send("GET", "/.well-known/openid-configuration").json
            #expect(metadata["dpop_signing_alg_values_supported"] as? [String] == ["ES256"])
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let google = try await harness.googleSignIn(email: "dpop@example.com", headers: [try Self.proof(maker, harness, "POST", "/v1/auth/google")])
            #expect(google.status == 200, "\(google.text)")
            let tokens = try Self.bound(google)
            #expect(tokens.type == "DPoP" && tokens.jkt == maker.thumbprint)
            #expect(tokens.jkt == DPoPProofCheck.thumbprint(of: maker.publicKey))
            let bearer = try Self.bound(try await harness.post("/v1/auth/anonymous", json: [:]))
            #expect(bearer.type == "Bearer" && bearer.jkt == nil)
            #expect(try await Self.me(harness, "Bearer", bearer.access).status == 200)
            let asDPoP = try await Self.me(harness, "DPoP", bearer.access)
            #expect((asDPoP.status, asDPoP.error) == (401, "invalid_token"))
        }
    }

    @Test("a bound session refreshes only with a proof by its key, and /v1/me takes its token only as DPoP with ath")
    func boundSession() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let other = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let signIn = try await harness.post("/v1/auth/anonymous", json: [:], headers: [try Self.proof(maker, harness, "POST", "/v1/auth/anonymous")])
            var tokens = try Self.bound(signIn)
            #expect(tokens.jkt == maker.thumbprint)

            // Refresh: none, another key's, a wrong htm or htu, a stale iat: refused, and the session is untouched.
            for headers in [
                [], [try Self.proof(other, harness, "POST", "/v1/token")], [try Self.proof(maker, harness, "GET", "/v1/token")],
                [try Self.proof(maker, harness, "POST", "/v1/me")], [try Self.proof(maker, harness, "POST", "/v1/token", at: -120)],
                [try Self.proof(maker, harness, "POST", "/v1/token", at: 120)],
            ] {
                let refused = try await Self.refresh(harness, tokens.refresh, headers: headers)
                #expect((refused.status, refused.error) == (400, "invalid_dpop_proof"), "\(refused.text)")
            }
            let proof = try Self.proof(maker, harness, "POST", "/v1/token")
            let refreshed = try await Self.refresh(harness, tokens.refresh, headers: [proof])
            #expect(refreshed.status == 200, "\(refreshed.text)")
            tokens = try Self.bound(refreshed)
            #expect(tokens.type == "DPoP" && tokens.jkt == maker.thumbprint)
            // The same proof again: its jti is spent.
            let replayed = try await Self.refresh(harness, tokens.refresh, headers: [proof])
            #expect((replayed.status, replayed.error) == (400, "invalid_dpop_proof"))
            #expect(replayed.text.contains("already used"))

            // /v1/me: Bearer refused; DPoP without a proof, without ath, by another key, replayed: refused.
            let asBearer = try await Self.me(harness, "Bearer", tokens.access)
            #expect((asBearer.status, asBearer.error) == (401, "invalid_token"))
            #expect(asBearer.headers["www-authenticate"]?.hasPrefix("DPoP") == true)
            let noProof = try await Self.me(harness, "DPoP", tokens.access)
            #expect((noProof.status, noProof.error) == (401, "invalid_dpop_proof"))
            let noATH = try await Self.me(harness, "DPoP", tokens.access, headers: [try Self.proof(maker, harness, "GET", "/v1/me")])
            #expect((noATH.status, noATH.error) == (401, "invalid_dpop_proof"))
            #expect(noATH.text.contains("ath"))
            let otherKey = try await Self.me(
                harness, "DPoP", tokens.access, headers: [try Self.proof(other, harness, "GET", "/v1/me", accessToken: tokens.access)])
            #expect((otherKey.status, otherKey.error) == (401, "invalid_dpop_proof"))
            let good = try Self.proof(maker, harness, "GET", "/v1/me", accessToken: tokens.access)
            #expect(try await Self.me(harness, "DPoP", tokens.access, headers: [good]).status == 200)
            #expect(try await Self.me(harness, "DPoP", tokens.access, headers: [good]).error == "invalid_dpop_proof")
            let twoProofs = try await Self.me(
                harness, "DPoP", tokens.access,
                headers: [
                    try Self.proof(maker, harness, "GET", "/v1/me", accessToken: tokens.access),
                    try Self.proof(maker, harness, "GET", "/v1/me", accessToken: tokens.access),
                ])
            #expect(twoProofs.error == "invalid_dpop_proof")

            let logout = try await harness.send(
                "POST", "/v1/logout",
                headers: [("Authorization", "DPoP \(tokens.access)"), try Self.proof(maker, harness, "POST", "/v1/logout", accessToken: tokens.access)])
            #expect(logout.status == 200, "\(logout.text)")
        }
    }

    @Test("malformed proofs: not a JWT, alg none or HS256, a private jwk, another typ, no jti: each invalid_dpop_proof")
    func malformed() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let key = P256.Signing.PrivateKey()
            let raw = Array(key.publicKey.rawRepresentation)
            let jwk: [String: String] = ["kty": "EC", "crv": "P-256", "x": base64URL(Array(raw.prefix(32))), "y": base64URL(Array(raw.suffix(32)))]
            let url = harness.server.configuration.issuer + "/v1/auth/anonymous"
            let claims: [String: Any] = ["jti": UUID().uuidString, "htm": "POST", "htu": url, "iat": Int(harness.clock.now.timeIntervalSince1970)]
            func token(_ header: [String: Any], _ claims: [String: Any], signature: [UInt8]? = nil) throws -> String {
                let input =
                    base64URL(Array(try JSONSerialization.data(withJSONObject: header))) + "."
                    + base64URL(Array(try JSONSerialization.data(withJSONObject: claims)))
                return input + "." + base64URL(try signature ?? Array(key.signature(for: Array(input.utf8)).rawRepresentation))
            }
            var withPrivate = jwk
            withPrivate["d"] = base64URL(Array(key.rawRepresentation))
            var noJTI = claims
            noJTI["jti"] = nil
            for proof in [
                "not-a-jwt", try token(["alg": "none", "typ": "dpop+jwt", "jwk": jwk], claims, signature: [0]),
                try token(["alg": "HS256", "typ": "dpop+jwt", "jwk": jwk], claims), try token(["alg": "ES256", "typ": "dpop+jwt", "jwk": withPrivate], claims),
                try token(["alg": "ES256", "typ": "JWT", "jwk": jwk], claims), try token(["alg": "ES256", "typ": "dpop+jwt", "jwk": jwk], noJTI),
                try token(["alg": "ES256", "typ": "dpop+jwt"], claims),
                try token(["alg": "ES256", "typ": "dpop+jwt", "jwk": jwk], claims, signature: Array(repeating: 1, count: 64)),
            ] {
                let answer = try await harness.post("/v1/auth/anonymous", json: [:], headers: [("DPoP", proof)])
                #expect((answer.status, answer.error) == (400, "invalid_dpop_proof"), "\(answer.text)")
            }
            // The well-formed one passes, once.
            let good = try token(["alg": "ES256", "typ": "dpop+jwt", "jwk": jwk], claims)
            #expect(try await harness.post("/v1/auth/anonymous", json: [:], headers: [("DPoP", good)]).status == 200)
            #expect(try await harness.post("/v1/auth/anonymous", json: [:], headers: [("DPoP", good)]).error == "invalid_dpop_proof")
        }
    }

    @Test("dpop.mode require refuses a sign-in without a proof; dpop.requireNonce answers use_dpop_nonce with a DPoP-Nonce that then works")
    func requireAndNonce() async throws {
        try await ServerHarness.with(configure: {
            Self.guestsOn(&$0)
            $0.dpop.mode = .require
            $0.dpop.requireNonce = true
        }) { harness in
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let without = try await harness.post("/v1/auth/anonymous", json: [:])
            #expect((without.status, without.error) == (400, "invalid_dpop_proof"))
            let noNonce = try await harness.post("/v1/auth/anonymous", json: [:], headers: [try Self.proof(maker, harness, "POST", "/v1/auth/anonymous")])
            #expect((noNonce.status, noNonce.error) == (400, "use_dpop_nonce"))
            let nonce = try #require(noNonce.headers["dpop-nonce"])
            let wrong = try await harness.post(
                "/v1/auth/anonymous", json: [:], headers: [try Self.proof(maker, harness, "POST", "/v1/auth/anonymous", nonce: "stale")])
            #expect(wrong.error == "use_dpop_nonce")
            let signIn = try await harness.post(
                "/v1/auth/anonymous", json: [:], headers: [try Self.proof(maker, harness, "POST", "/v1/auth/anonymous", nonce: nonce)])
            #expect(signIn.status == 200, "\(signIn.text)")
            #expect(signIn.headers["dpop-nonce"] == nonce)
            let tokens = try Self.bound(signIn)
            // At a resource: 401 with the challenge and a nonce.
            let me = try await Self.me(harness, "DPoP", tokens.access, headers: [try Self.proof(maker, harness, "GET", "/v1/me", accessToken: tokens.access)])
            #expect((me.status, me.error) == (401, "use_dpop_nonce"))
            #expect(me.headers["www-authenticate"]?.contains(#"error="use_dpop_nonce""#) == true && me.headers["dpop-nonce"] == nonce)
            // The previous window's nonce still works; two windows on, it does not.
            harness.clock.advance(DPoPNonces.window)
            let later = try await Self.refresh(harness, tokens.refresh, headers: [try Self.proof(maker, harness, "POST", "/v1/token", nonce: nonce)])
            #expect(later.status == 200, "\(later.text)")
            harness.clock.advance(DPoPNonces.window)
            let stale = try await Self.refresh(
                harness, try Self.bound(later).refresh, headers: [try Self.proof(maker, harness, "POST", "/v1/token", nonce: nonce)])
            #expect(stale.error == "use_dpop_nonce")
        }
    }

    @Test("a bearer session refreshed with a proof gets a bound access token; the refresh token stays the session's")
    func bearerSessionWithProof() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let bearer = try Self.bound(try await harness.post("/v1/auth/anonymous", json: [:]))
            let refreshed = try Self.bound(try await Self.refresh(harness, bearer.refresh, headers: [try Self.proof(maker, harness, "POST", "/v1/token")]))
            #expect(refreshed.type == "DPoP" && refreshed.jkt == maker.thumbprint)
            let plain = try Self.bound(try await Self.refresh(harness, refreshed.refresh))
            #expect(plain.type == "Bearer" && plain.jkt == nil)
        }
    }

    @Test("the browser flow: dpop_jkt binds the code to a key, a client with dpop require needs a proof, token_type DPoP at /oauth2/token")
    func browserFlow() async throws {
        try await BrowserFlowTests.with(configure: { $0.clients[0].dpop = .require }) { harness in
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            func redeem(_ request: BrowserFlowTests.AppRequest, _ code: String, proof: DPoPProofMaker?) async throws -> ServerHarness.Answer {
                let headers =
                    try proof.map {
                        [("DPoP", try $0.proof(method: "POST", url: URL(string: BrowserFlowTests.issuer + "/oauth2/token")!, at: harness.clock.now))]
                    } ?? []
                return try await BrowserFlowTests.token(
                    harness,
                    [
                        ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", request.redirectURI), ("client_id", request.clientID),
                        ("code_verifier", request.verifier),
                    ], headers: headers)
            }
            var request = BrowserFlowTests.AppRequest()
            request.extra = [("dpop_jkt", maker.thumbprint)]
            let otherKey = try await redeem(
                request, try BrowserFlowTests.code(try await BrowserFlowTests.run(harness, request), request),
                proof: DPoPProofMaker(privateKey: P256.Signing.PrivateKey()))
            #expect((otherKey.status, otherKey.error) == (400, "invalid_dpop_proof"), "\(otherKey.text)")

            request = BrowserFlowTests.AppRequest()
            request.extra = [("dpop_jkt", maker.thumbprint)]
            let bound = try await redeem(request, try BrowserFlowTests.code(try await BrowserFlowTests.run(harness, request), request), proof: maker)
            #expect(bound.status == 200, "\(bound.text)")
            #expect(bound.json["token_type"] as? String == "DPoP")
            let access = try #require(bound.json["access_token"] as? String)
            #expect((try AdminAPITests.claims(access)["cnf"] as? [String: Any])?["jkt"] as? String == maker.thumbprint)

            // This client requires DPoP: a code redeemed without a proof is refused.
            let plain = BrowserFlowTests.AppRequest()
            let refused = try await redeem(plain, try BrowserFlowTests.code(try await BrowserFlowTests.run(harness, plain), plain), proof: nil)
            #expect((refused.status, refused.error) == (400, "invalid_dpop_proof"), "\(refused.text)")

            // A malformed dpop_jkt goes back to the app.
            var malformed = BrowserFlowTests.AppRequest()
            malformed.extra = [("dpop_jkt", "short")]
            let answer = try await BrowserFlowTests.run(harness, malformed)
            #expect(BrowserFlowTests.fields(of: answer.headers["location"] ?? "")["error"] == "invalid_request")
        }
    }
}
