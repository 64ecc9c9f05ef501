import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdAuth
import HummingbirdTesting
import LatchkeyBackendHummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Synchronization
import Testing

@testable import LatchkeyBackend

/// LatchkeyBackend against a real Latchkey: what the app's own server does with its tokens and webhooks.
@Suite("Backend library: access tokens and webhooks verified by the app's server")
struct BackendLibraryTests {
    static let issuer = "https://auth.example.com"

    /// Sends requests for `issuer` to the harness on loopback, and counts them by path.
    final class ToHarness: HTTPTransport {
        let baseURL: String
        let inner = AsyncHTTPClientTransport()
        let counts = Mutex<[String: Int]>([:])

        init(baseURL: String) { self.baseURL = baseURL }

        func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
            var request = request
            let path = String(request.url.dropFirst(BackendLibraryTests.issuer.count))
            counts.withLock { $0[path, default: 0] += 1 }
            request.url = baseURL + path
            return try await inner.send(request)
        }

        func count(_ path: String) -> Int { counts.withLock { $0[path] ?? 0 } }
    }

    @Test("a session's access token verifies with its user, session, auth_time, idp and custom claims; forged, foreign and expired ones do not")
    func verifies() async throws {
        try await ServerHarness.with(configure: { $0.publicURL = Self.issuer }) { harness in
            let transport = ToHarness(baseURL: harness.baseURL)
            let verifier = AccessTokenVerifier(issuer: Self.issuer + "/", audience: "latchkey", transport: transport, timeSource: harness.clock.source)
            let (_, jane) = try await harness.signedIn()
            _ = try await harness.store.setUserClaims(userID: jane.user.id, claims: ["plan": .string("pro"), "seats": .integer(3)])
            let pair = try await harness.refresh(jane.refreshToken).decode(TokenPairResponse.self)

            let token = try await verifier.verify(pair.accessToken)
            #expect(token.userID == jane.user.id)
            #expect(token.idp == "apple")
            #expect(token.authTime != nil)
            #expect(token[claim: "plan"] == .string("pro"))
            #expect(token[claim: "seats"] == .integer(3))
            #expect(token.clientID == "com.example.app" || !token.clientID.isEmpty)
            // Many requests at once: one discovery, one JWKS fetch.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<20 { group.addTask { _ = try await verifier.verify(pair.accessToken) } }
                try await group.waitForAll()
            }
            #expect(transport.count("/.well-known/openid-configuration") == 1)
            #expect(transport.count("/.well-known/jwks.json") == 1)

            var parts = pair.accessToken.split(separator: ".").map(String.init)
            parts[2] = String(parts[2].reversed())
            for bad in [parts.joined(separator: "."), "not.a.token", "", jane.refreshToken] {
                let error = await #expect(throws: LatchkeyError.self) { try await verifier.verify(bad) }
                #expect(error?.code == .invalidToken, "\(error?.reason ?? "")")
            }
            let other = AccessTokenVerifier(issuer: Self.issuer, audience: "another-api", transport: transport, timeSource: harness.clock.source)
            let foreign = await #expect(throws: LatchkeyError.self) { try await other.verify(pair.accessToken) }
            #expect(foreign?.reason.contains("audience") == true)
            harness.clock.advance(601 + 30)
            let expired = await #expect(throws: LatchkeyError.self) { try await verifier.verify(pair.accessToken) }
            #expect(expired?.reason.contains("expired") == true)
        }
    }

    @Test("after a key rotation, a token signed with the new key is verified at once (the JWKS fetched again, once)")
    func rotation() async throws {
        try await ServerHarness.with(configure: { $0.publicURL = Self.issuer }) { harness in
            let transport = ToHarness(baseURL: harness.baseURL)
            let verifier = AccessTokenVerifier(issuer: Self.issuer, audience: "latchkey", transport: transport, timeSource: harness.clock.source)
            let (_, jane) = try await harness.signedIn()
            _ = try await verifier.verify(jane.accessToken)
            // A rotation, loaded by the server and signing after its propagation delay.
            let box = try SecretBox(base64Key: harness.encryptionKey)
            try await KeyMaintenance.rotate(store: harness.store, box: box, now: harness.clock.now, overlap: harness.server.configuration.signingKeyOverlap)
            try await harness.server.accessKeys.load(try await harness.store.signingKeys(), box: box)
            harness.clock.advance(harness.server.configuration.keyPropagationDelay + 1)
            let pair = try await harness.refresh(jane.refreshToken).decode(TokenPairResponse.self)
            #expect(try CompactJWS(parsing: pair.accessToken).header.kid != (try CompactJWS(parsing: jane.accessToken).header.kid))
            #expect(try await verifier.verify(pair.accessToken).userID == jane.user.id)
            #expect(transport.count("/.well-known/jwks.json") == 2)
        }
    }

    @Test("a discovery document for another issuer, or with keys elsewhere, is refused; the next call tries discovery again")
    func discovery() async throws {
        try await ServerHarness.with(configure: { $0.publicURL = "https://impostor.example.com" }) { harness in
            let transport = ToHarness(baseURL: harness.baseURL)
            let verifier = AccessTokenVerifier(issuer: Self.issuer, audience: "latchkey", transport: transport, timeSource: harness.clock.source)
            let (_, jane) = try await harness.signedIn()
            for _ in 0..<2 {
                let error = await #expect(throws: LatchkeyError.self) { try await verifier.verify(jane.accessToken) }
                #expect(error?.code == .keysUnavailable)
                #expect(error?.reason.contains("impostor.example.com") == true, "\(error?.reason ?? "")")
            }
            #expect(transport.count("/.well-known/openid-configuration") == 2)
        }
    }

    @Test("the Hummingbird authenticator: no token, a bad one and a good one, behind IsAuthenticatedMiddleware")
    func hummingbird() async throws {
        try await ServerHarness.with(configure: { $0.publicURL = Self.issuer }) { harness in
            let verifier = AccessTokenVerifier(
                issuer: Self.issuer, audience: "latchkey", transport: ToHarness(baseURL: harness.baseURL), timeSource: harness.clock.source)
            let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
            router.addMiddleware { LatchkeyAuthenticator(verifier: verifier) }
            router.get("open") { _, context -> String in context.identity?.userID ?? "anonymous" }
            router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("me") { _, context -> String in
                try context.requireIdentity().userID
            }
            let (_, jane) = try await harness.signedIn()
            try await Application(router: router).test(.router) { client in
                try await client.execute(uri: "/open", method: .get) { #expect(String(buffer: $0.body) == "anonymous") }
                try await client.execute(uri: "/api/me", method: .get) { #expect($0.status == .unauthorized) }
                try await client.execute(uri: "/api/me", method: .get, headers: [.authorization: "Bearer nonsense"]) { response in
                    #expect(response.status == .unauthorized)
                    #expect(response.headers[.wwwAuthenticate]?.contains("invalid_token") == true)
                }
                try await client.execute(uri: "/api/me", method: .get, headers: [.authorization: "Bearer \(jane.accessToken)"]) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == jane.user.id)
                }
            }
        }
    }

    // MARK: DPoP

    static let api = "https://api.example.com"
    static let dpop = HTTPField.Name("DPoP")!

    static func dpopServer(_ configuration: inout ServerConfiguration) {
        configuration.publicURL = Self.issuer
        DPoPTests.guestsOn(&configuration)
    }

    /// A guest's access token, bound to `maker`'s key when given (the sign-in carries its proof).
    static func guestToken(_ harness: ServerHarness, boundTo maker: DPoPProofMaker?) async throws -> String {
        let url = URL(string: harness.server.configuration.issuer + "/v1/auth/anonymous")!
        let headers = try maker.map { [("DPoP", try $0.proof(method: "POST", url: url, at: harness.clock.now))] } ?? []
        let tokens = try await harness.post("/v1/auth/anonymous", json: [:], headers: headers).decode(TokenPairResponse.self)
        #expect(tokens.tokenType == (maker == nil ? "Bearer" : "DPoP"))
        return tokens.accessToken
    }

    @Test(
        "a DPoP-bound token with a good proof is accepted once; as Bearer, by another key, without ath, for another method or URL, stale, missing, doubled or replayed it is refused; an unbound one as DPoP too"
    )
    func dpopBoundTokens() async throws {
        try await ServerHarness.with(configure: Self.dpopServer) { harness in
            let verifier = AccessTokenVerifier(
                issuer: Self.issuer, audience: "latchkey", transport: ToHarness(baseURL: harness.baseURL), timeSource: harness.clock.source)
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let other = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let token = try await Self.guestToken(harness, boundTo: maker)
            let notes = Self.api + "/notes"
            func proof(
                _ maker: DPoPProofMaker, _ method: String = "GET", _ url: String = notes, ath: String? = nil, at offset: TimeInterval = 0
            ) throws -> String {
                try maker.proof(method: method, url: URL(string: url)!, accessToken: ath ?? token, at: harness.clock.now.addingTimeInterval(offset))
            }

            let good = try proof(maker)
            // The query is no part of the URL a proof names.
            let verified = try await verifier.verify(authorization: "DPoP \(token)", dpop: [good], method: "GET", url: notes + "?page=2")
            #expect(verified.boundKeyThumbprint == maker.thumbprint && !verified.userID.isEmpty && !verified.attested)
            // The scheme's case does not matter.
            #expect(try await verifier.verify(authorization: "dpop \(token)", dpop: [try proof(maker)], method: "GET", url: notes).userID == verified.userID)

            let refusals: [(String, String, [String], String, String, LatchkeyError.Code)] = [
                ("replayed", "DPoP \(token)", [good], "GET", notes, .invalidDPoPProof),
                ("as Bearer", "Bearer \(token)", [try proof(maker)], "GET", notes, .invalidToken),
                ("another key", "DPoP \(token)", [try proof(other)], "GET", notes, .invalidDPoPProof),
                ("no ath", "DPoP \(token)", [try maker.proof(method: "GET", url: URL(string: notes)!, at: harness.clock.now)], "GET", notes, .invalidDPoPProof),
                ("another token's ath", "DPoP \(token)", [try proof(maker, ath: "another-token")], "GET", notes, .invalidDPoPProof),
                ("another method", "DPoP \(token)", [try proof(maker, "POST")], "GET", notes, .invalidDPoPProof),
                ("another URL", "DPoP \(token)", [try proof(maker, "GET", Self.api + "/other")], "GET", notes, .invalidDPoPProof),
                ("another host", "DPoP \(token)", [try proof(maker, "GET", "https://evil.example.com/notes")], "GET", notes, .invalidDPoPProof),
                ("stale", "DPoP \(token)", [try proof(maker, at: -120)], "GET", notes, .invalidDPoPProof),
                ("no proof", "DPoP \(token)", [], "GET", notes, .invalidDPoPProof),
                ("two proofs", "DPoP \(token)", [try proof(maker), try proof(maker)], "GET", notes, .invalidDPoPProof),
                ("another scheme", "Basic \(token)", [], "GET", notes, .invalidToken),
                ("no scheme", token, [], "GET", notes, .invalidToken),
            ]
            for (name, authorization, proofs, method, url, code) in refusals {
                let error = await #expect(throws: LatchkeyError.self, "\(name)") {
                    try await verifier.verify(authorization: authorization, dpop: proofs, method: method, url: url)
                }
                #expect(error?.code == code, "\(name): \(error?.reason ?? "")")
            }
            // The bearer API refuses a bound token: without its proof it would be a bearer token after all.
            let asBearer = await #expect(throws: LatchkeyError.self) { try await verifier.verify(token) }
            #expect(asBearer?.code == .invalidToken && asBearer?.reason.contains("DPoP-bound") == true)

            // An unbound token: as Bearer (either API) yes, as DPoP no.
            let bearer = try await Self.guestToken(harness, boundTo: nil)
            #expect(try await verifier.verify(authorization: "Bearer \(bearer)", dpop: [], method: "GET", url: notes).boundKeyThumbprint == nil)
            #expect(try await verifier.verify(bearer).boundKeyThumbprint == nil)
            let unboundAsDPoP = await #expect(throws: LatchkeyError.self) {
                try await verifier.verify(authorization: "DPoP \(bearer)", dpop: [try proof(maker, ath: bearer)], method: "GET", url: notes)
            }
            #expect(unboundAsDPoP?.code == .invalidToken)
        }
    }

    @Test("the Hummingbird authenticator with a public base URL takes DPoP-bound tokens with their proofs, and answers refusals with a DPoP challenge")
    func hummingbirdDPoP() async throws {
        try await ServerHarness.with(configure: Self.dpopServer) { harness in
            let verifier = AccessTokenVerifier(
                issuer: Self.issuer, audience: "latchkey", transport: ToHarness(baseURL: harness.baseURL), timeSource: harness.clock.source)
            let maker = DPoPProofMaker(privateKey: P256.Signing.PrivateKey())
            let token = try await Self.guestToken(harness, boundTo: maker)
            let bearer = try await Self.guestToken(harness, boundTo: nil)
            // The router sees /api/me on whatever host the proxy used; the proof names the public URL.
            let proof = try maker.proof(method: "GET", url: URL(string: Self.api + "/api/me")!, accessToken: token, at: harness.clock.now)
            func router(publicBaseURL: String?) -> Router<BasicAuthRequestContext<LatchkeyAccessToken>> {
                typealias Authenticator = LatchkeyAuthenticator<BasicAuthRequestContext<LatchkeyAccessToken>>
                let authenticator = publicBaseURL.map { Authenticator(verifier: verifier, publicBaseURL: $0) } ?? Authenticator(verifier: verifier)
                let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
                router.addMiddleware { authenticator }
                router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("me") { _, context -> String in
                    try context.requireIdentity().boundKeyThumbprint ?? "bearer"
                }
                return router
            }
            try await Application(router: router(publicBaseURL: Self.api + "/")).test(.router) { client in
                let headers: HTTPFields = [.authorization: "DPoP \(token)", Self.dpop: proof]
                try await client.execute(uri: "/api/me", method: .get, headers: headers) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == maker.thumbprint)
                }
                try await client.execute(uri: "/api/me", method: .get, headers: headers) { response in
                    #expect(response.status == .unauthorized)
                    #expect(response.headers[.wwwAuthenticate] == #"DPoP error="invalid_dpop_proof", algs="ES256""#)
                }
                try await client.execute(uri: "/api/me", method: .get, headers: [.authorization: "Bearer \(token)"]) { response in
                    #expect(response.status == .unauthorized)
                    #expect(response.headers[.wwwAuthenticate] == #"Bearer error="invalid_token""#)
                }
                try await client.execute(uri: "/api/me", method: .get, headers: [.authorization: "Bearer \(bearer)"]) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == "bearer")
                }
            }
            // Without a public base URL: bearer tokens only.
            try await Application(router: router(publicBaseURL: nil)).test(.router) { client in
                let fresh = try maker.proof(method: "GET", url: URL(string: Self.api + "/api/me")!, accessToken: token, at: harness.clock.now)
                try await client.execute(uri: "/api/me", method: .get, headers: [.authorization: "DPoP \(token)", Self.dpop: fresh]) { response in
                    #expect(response.status == .unauthorized)
                    #expect(response.headers[.wwwAuthenticate]?.hasPrefix(#"DPoP error="invalid_token""#) == true)
                }
                try await client.execute(uri: "/api/me", method: .get, headers: [.authorization: "Bearer \(bearer)"]) { #expect($0.status == .ok) }
            }
        }
    }

    @Test("the replay window: a proof is refused while remembered, taken again once expired, and at most `capacity` are remembered, the oldest forgotten first")
    func replayWindow() {
        let now = Date(timeIntervalSince1970: 1_000)
        let window = DPoPReplayWindow(capacity: 3)
        #expect(window.insert("a", until: now.addingTimeInterval(60), now: now))
        #expect(!window.insert("a", until: now.addingTimeInterval(60), now: now.addingTimeInterval(59)))
        #expect(window.insert("a", until: now.addingTimeInterval(120), now: now.addingTimeInterval(60)))
        #expect(window.count == 1)
        for key in ["b", "c", "d", "e"] { #expect(window.insert(key, until: now.addingTimeInterval(600), now: now.addingTimeInterval(61))) }
        #expect(window.count == 3)
        // "a" and "b", the oldest, are forgotten; "e", the newest, is still refused.
        #expect(!window.insert("e", until: now.addingTimeInterval(600), now: now.addingTimeInterval(62)))
        #expect(window.insert("b", until: now.addingTimeInterval(600), now: now.addingTimeInterval(62)))
        #expect(window.count == 3)
        // Everything expired: the next insert forgets them all.
        #expect(window.insert("z", until: now.addingTimeInterval(2_000), now: now.addingTimeInterval(1_000)))
        #expect(window.count == 1)
        // Many keys through a small window: the count stays bounded.
        let small = DPoPReplayWindow(capacity: 100)
        for index in 0..<10_000 { _ = small.insert("jti-\(index)", until: now.addingTimeInterval(600), now: now) }
        #expect(small.count == 100)
        #expect(!small.insert("jti-9999", until: now.addingTimeInterval(600), now: now))
        #expect(small.insert("jti-0", until: now.addingTimeInterval(600), now: now))
    }

    @Test("WebhookVerifier accepts the dispatcher's deliveries and refuses a changed body, another secret, an old timestamp and missing headers")
    func webhooks() async throws {
        let secret = WebhookEndpoint.generateSecret()
        let clock = MutableClock(Date())
        let sent = Mutex<[(headers: [(name: String, value: String)], body: String)]>([])
        let event = LifecycleEvent.userDeleted("user-1", reason: .providerConsentRevoked, at: clock.now)
        let key = try WebhookSignature.key(fromSecret: secret).get()
        _ = await WebhookDispatcher.post(
            messageID: event.id, body: event.body(), to: "https://backend.example/hooks", key: key, at: clock.now, timeout: .seconds(10),
            send: { _, headers, body, _ in
                sent.withLock { $0.append((headers, body)) }
                return .answered(204)
            })
        let (headerList, body) = try #require(sent.withLock { $0.first })
        let headers = Dictionary(uniqueKeysWithValues: headerList.map { ($0.name.uppercased(), $0.value) })  // names in any case

        let verifier = try WebhookVerifier(secret: secret, timeSource: clock.source)
        let verified = try verifier.verify(body: Array(body.utf8), headers: headers)
        #expect(verified.id == event.id)
        #expect(verified.type == "user.deleted")
        #expect(verified.userID == "user-1")
        #expect(verified.data["reason"] == .string("provider_consent_revoked"))

        #expect(throws: WebhookVerificationError.invalidSignature) {
            try verifier.verify(body: Array(body.replacingOccurrences(of: "user-1", with: "user-2").utf8), headers: headers)
        }
        #expect(throws: WebhookVerificationError.invalidSignature) {
            try WebhookVerifier(secret: WebhookEndpoint.generateSecret(), timeSource: clock.source).verify(body: Array(body.utf8), headers: headers)
        }
        #expect(throws: WebhookVerificationError.missingHeaders) { try verifier.verify(body: Array(body.utf8), headers: [:]) }
        clock.advance(301)
        #expect(throws: WebhookVerificationError.timestampOutOfRange) { try verifier.verify(body: Array(body.utf8), headers: headers) }
        #expect(throws: WebhookSecretProblem.missingPrefix) { try WebhookVerifier(secret: "hunter2") }
    }
}
