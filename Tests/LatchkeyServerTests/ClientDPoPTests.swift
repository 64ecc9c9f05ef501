import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdAuth
import HummingbirdTesting
import LatchkeyBackend
import LatchkeyBackendHummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// LatchkeyClient with a device key against a real server that requires DPoP and nonces, and the app's backend
/// (LatchkeyBackendHummingbird) taking what ``LatchkeyClient/authorize(_:)`` makes; its App Attest against the server's.
@Suite("Client: DPoP and App Attest against a real server and backend")
struct ClientDPoPTests {
    /// Sends the client's requests for `https://auth.example.com` to the harness on loopback, and notes each one's
    /// path and status.
    final class ToHarness: LatchkeyTransport, @unchecked Sendable {
        // @unchecked: `log` is only used while holding `lock`.
        private let lock = NSLock()
        private let inner = URLSessionTransport()
        private var log: [String] = []
        let baseURL: String

        init(baseURL: String) { self.baseURL = baseURL }

        var exchanges: [String] { lock.withLock { log } }

        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            var local = request
            let path = request.url?.path ?? ""
            local.url = URL(string: baseURL + path)
            let answer = try await inner.send(local)
            lock.withLock { log.append("\(request.httpMethod ?? "GET") \(path) \(answer.1.statusCode)") }
            return answer
        }
    }

    /// An App Attest service whose attestations no server takes: keys of random ids, attestations of nonsense.
    final class BogusAppAttest: AppAttestService, @unchecked Sendable {
        // @unchecked: `keys` is only used while holding `lock`.
        private let lock = NSLock()
        private var keys: [String] = []

        var generated: [String] { lock.withLock { keys } }
        var isSupported: Bool { true }

        func generateKey() async throws -> String {
            let id = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            lock.withLock { keys.append(id) }
            return id
        }

        func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data { Data("not an attestation".utf8) }
        func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data { Data("not an assertion".utf8) }
    }

    @Test("App Attest: the server's challenge and its refusal of the appAttest member are understood (a new key next time); report mode signs in")
    func appAttestAgainstTheServer() async throws {
        for mode in [AppAttestMode.require, .report] {
            try await ServerHarness.with(configure: {
                BackendLibraryTests.dpopServer(&$0)
                AppAttestTests.attest(mode)(&$0)
            }) { harness in
                let transport = ToHarness(baseURL: harness.baseURL)
                let service = BogusAppAttest()
                let client = LatchkeyClient(
                    baseURL: URL(string: BackendLibraryTests.issuer)!, tokenStore: InMemoryTokenStore(), deviceBinding: .dpop,
                    appAttest: .enabled(service: service), transport: transport, clock: harness.clock, observesAppLifecycle: false)
                guard mode == .require else {
                    try await client.signInAnonymously()
                    #expect(try AdminAPITests.claims(try #require(client.currentAccessToken))["attested"] as? Bool != true)
                    #expect(transport.exchanges == ["POST /v1/attest/challenge 200", "POST /v1/auth/anonymous 200"])
                    return
                }
                for _ in 0..<2 {
                    let refused = await #expect(throws: LatchkeyClientError.rejected) { try await client.signInAnonymously() }
                    #expect(refused?.serverError?.error == "invalid_attestation", "\(refused?.reason ?? "")")
                }
                #expect(service.generated.count == 2 && Set(service.generated).count == 2)
                #expect(transport.exchanges == Array(repeating: ["POST /v1/attest/challenge 200", "POST /v1/auth/anonymous 401"], count: 2).flatMap { $0 })
            }
        }
    }

    @Test("sign-in, /v1/me, a refresh and logout, each with a proof and the server's nonce; authorize() is taken by the backend once")
    func endToEnd() async throws {
        try await ServerHarness.with(configure: {
            BackendLibraryTests.dpopServer(&$0)
            $0.dpop.mode = .require
            $0.dpop.requireNonce = true
        }) { harness in
            let transport = ToHarness(baseURL: harness.baseURL)
            let client = LatchkeyClient(
                baseURL: URL(string: BackendLibraryTests.issuer)!, tokenStore: InMemoryTokenStore(), deviceBinding: .dpop, transport: transport,
                clock: harness.clock, observesAppLifecycle: false)
            let signedIn = try await client.signInAnonymously()
            let user = try await client.user()
            #expect(user.id == signedIn.user.id)
            let thumbprint = try #require(try client.signer?.thumbprint())
            let token = try #require(client.currentAccessToken)
            let cnf = try AdminAPITests.claims(token)["cnf"] as? [String: Any]
            #expect(cnf?["jkt"] as? String == thumbprint)
            // The first proof had no nonce: the server asked for one, once; every later proof carried it.
            #expect(transport.exchanges == ["POST /v1/auth/anonymous 400", "POST /v1/auth/anonymous 200", "GET /v1/me 200"])

            // After the nonce's window and the token's life: the refresh asks again, then rotates with a proof by the key.
            harness.clock.advance(DPoPNonces.window * 2 + 1)
            let refreshed = try await client.validAccessToken()
            #expect(refreshed != token)
            #expect(Array(transport.exchanges.suffix(2)) == ["POST /v1/token 400", "POST /v1/token 200"])

            // The app's backend: what authorize() sets is taken once.
            let verifier = AccessTokenVerifier(
                issuer: BackendLibraryTests.issuer, audience: "latchkey", transport: BackendLibraryTests.ToHarness(baseURL: harness.baseURL),
                timeSource: harness.clock.source)
            let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
            router.addMiddleware { LatchkeyAuthenticator(verifier: verifier, publicBaseURL: BackendLibraryTests.api) }
            router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("me") { _, context -> String in
                try context.requireIdentity().userID
            }
            var request = URLRequest(url: URL(string: BackendLibraryTests.api + "/api/me")!)
            try await client.authorize(&request)
            let headers: HTTPFields = [
                .authorization: try #require(request.value(forHTTPHeaderField: "Authorization")),
                BackendLibraryTests.dpop: try #require(request.value(forHTTPHeaderField: "DPoP")),
            ]
            try await Application(router: router).test(.router) { backend in
                try await backend.execute(uri: "/api/me", method: .get, headers: headers) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == user.id)
                }
                try await backend.execute(uri: "/api/me", method: .get, headers: headers) { #expect($0.status == .unauthorized) }
            }

            await client.signOut()
            await client.background.finish()
            #expect(transport.exchanges.last == "POST /v1/logout 200")
            #expect(!transport.exchanges.contains { $0.hasPrefix("POST /v1/logout 4") })
        }
    }
}
