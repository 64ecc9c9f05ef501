import Foundation
import Hummingbird
import HummingbirdAuth
import HummingbirdTesting
import LatchkeyBackend
import LatchkeyBackendHummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Synchronization
import Testing

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
