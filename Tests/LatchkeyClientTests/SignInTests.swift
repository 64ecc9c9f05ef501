import Foundation
import LatchkeyModels
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("Sign-in and signed-in requests")
struct SignInTests {
    @Test func signInWithAppleSendsTheWireBody() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        let events = EventLog(client.events)
        var name = PersonNameComponents()
        name.givenName = "Ada"
        name.familyName = "Lovelace"
        let signedIn = try await client.signInWithApple(identityToken: "user-1", authorizationCode: "code", rawNonce: "raw", fullName: name)
        #expect(signedIn.user.id == "user-1" && signedIn.isNewUser)
        let body = fields(await fixture.server.signInBodies["apple"])
        #expect(body["identityToken"] as? String == "user-1")
        #expect(body["authorizationCode"] as? String == "code")
        #expect(body["rawNonce"] as? String == "raw")
        #expect(body["fullName"] as? [String: String] == ["givenName": "Ada", "familyName": "Lovelace"])
        #expect(try await client.validAccessToken() == client.currentAccessToken)
        #expect(try await events.wait { $0.count >= 2 } == [.sessionEnded(.noStoredSession), .signedIn])
    }

    @Test func providerSignIns() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signIn(provider: "google", idToken: "user-g", rawNonce: "n")
        #expect(fields(await fixture.server.signInBodies["google"])["idToken"] as? String == "user-g")
        try await client.signIn(provider: "dropbox", authorizationCode: "user-d", codeVerifier: "v", redirectUri: "com.example:/cb")
        let body = fields(await fixture.server.signInBodies["dropbox"])
        #expect(body["codeVerifier"] as? String == "v" && body["redirectUri"] as? String == "com.example:/cb")
        #expect(body["inviteCode"] == nil)
        #expect(client.currentAccessToken?.hasPrefix("at-user-d-") == true)
        try await client.signIn(provider: "google", idToken: "user-i", inviteCode: "INVITE-1")
        #expect(fields(await fixture.server.signInBodies["google"])["inviteCode"] as? String == "INVITE-1")
        try await client.signInWithApple(identityToken: "user-a", authorizationCode: nil, rawNonce: "n", inviteCode: "INVITE-2")
        #expect(fields(await fixture.server.signInBodies["apple"])["inviteCode"] as? String == "INVITE-2")
        try await client.signIn(provider: "dropbox", authorizationCode: "user-e", codeVerifier: "v", redirectUri: "com.example:/cb", inviteCode: "INVITE-3")
        #expect(fields(await fixture.server.signInBodies["dropbox"])["inviteCode"] as? String == "INVITE-3")
    }

    @Test func refusedSignInCarriesTheServersError() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        let error = await #expect(throws: LatchkeyClientError.rejected) {
            try await client.signInWithApple(identityToken: "refused", authorizationCode: nil, rawNonce: "n")
        }
        #expect(error?.serverError?.error == "invalid_token")
        #expect(error?.statusCode == 401)
        #expect(client.currentAccessToken == nil)
    }

    @Test func notSignedIn() async throws {
        let client = Fixture().client(store: InMemoryTokenStore())
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await client.validAccessToken() }
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await client.data(for: Fixture().resource()) }
    }

    @Test func a401RefreshesOnceAndRetriesOnce() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        await fixture.server.rejectIssuedAccessTokens()
        let (_, response) = try await client.data(for: fixture.resource())
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(await fixture.server.refreshRequests == 1)
        #expect(await fixture.server.resourceRequests == 2)
    }

    @Test("authorize and handleUnauthorized: another HTTP stack gets a bearer, and after a 401 for it one refresh and a go-ahead")
    func primitivesForOtherHTTPStacks() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        var request = fixture.resource()
        await #expect(throws: LatchkeyClientError.notSignedIn) { try await client.authorize(&request) }
        try await client.signInWithApple(identityToken: "user-4", authorizationCode: nil, rawNonce: "n")
        try await client.authorize(&request)
        #expect(request.value(forHTTPHeaderField: "Authorization") == "Bearer \(client.currentAccessToken ?? "")")
        await fixture.server.rejectIssuedAccessTokens()
        // The caller's own stack sends it (here: the fake server as a transport).
        let (_, rejected) = try await fixture.server.send(request)
        #expect(rejected.statusCode == 401)
        #expect(await client.handleUnauthorized(rejected, for: request))
        #expect(await fixture.server.refreshRequests == 1)
        // Another caller with the same rejected token: the refresh is not repeated, it may go again too.
        #expect(await client.handleUnauthorized(rejected, for: request))
        #expect(await fixture.server.refreshRequests == 1)
        try await client.authorize(&request)
        #expect(try await fixture.server.send(request).1.statusCode == 200)

        // Not a go-ahead: another status, a challenge that does not blame the token, a request that carried no token.
        let forbidden = HTTPURLResponse(url: request.url!, statusCode: 403, httpVersion: nil, headerFields: nil)!
        let scope = HTTPURLResponse(
            url: request.url!, statusCode: 401, httpVersion: nil, headerFields: ["WWW-Authenticate": #"Bearer error="insufficient_scope""#])!
        #expect(await !client.handleUnauthorized(forbidden, for: request))
        #expect(await !client.handleUnauthorized(scope, for: request))
        #expect(await !client.handleUnauthorized(rejected, for: fixture.resource()))
        #expect(await fixture.server.refreshRequests == 1)
    }

    @Test func aSecond401IsReturnedNotRetried() async throws {
        let fixture = Fixture()
        let rejectEverything = RejectingTransport(server: fixture.server)
        let stubborn = fixture.client(store: InMemoryTokenStore(), transport: rejectEverything)
        try await stubborn.signInWithApple(identityToken: "user-2", authorizationCode: nil, rawNonce: "n")
        let (_, response) = try await stubborn.data(for: fixture.resource())
        #expect((response as? HTTPURLResponse)?.statusCode == 401)
        #expect(await fixture.server.refreshRequests == 1)
        #expect(rejectEverything.resourceRequests.all.count == 2)
    }

    @Test(
        "a 401 refreshes only when its challenge blames the token",
        arguments: [
            (nil, 1), (#"Bearer error="invalid_token", error_description="expired""#, 1), ("Bearer", 1), (#"Bearer realm="api""#, 1),
            (#"bearer error=invalid_token"#, 1), (#"Bearer error="invalid_request""#, 0), (#"Basic realm="api""#, 0),
            (#"Bearer realm="api", error="insufficient_scope""#, 0),
        ] as [(String?, Int)])
    func a401RefreshesOnlyWhenItBlamesTheToken(challenge: String?, refreshes: Int) async throws {
        let fixture = Fixture()
        let rejecting = RejectingTransport(server: fixture.server, challenge: challenge)
        let client = fixture.client(store: InMemoryTokenStore(), transport: rejecting)
        try await client.signInWithApple(identityToken: "user-3", authorizationCode: nil, rawNonce: "n")
        for _ in 0..<3 {
            let (_, response) = try await client.data(for: fixture.resource())
            #expect((response as? HTTPURLResponse)?.statusCode == 401)
        }
        #expect(await fixture.server.refreshRequests == 3 * refreshes)
        #expect(rejecting.resourceRequests.all.count == 3 * (1 + refreshes))
    }

    @Test func concurrent401sForTheSameTokenShareOneRefresh() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        await fixture.server.rejectIssuedAccessTokens()
        let request = fixture.resource()
        try await withThrowingTaskGroup(of: Int?.self) { group in
            for _ in 0..<50 { group.addTask { (try await client.data(for: request).1 as? HTTPURLResponse)?.statusCode } }
            for try await status in group { #expect(status == 200) }
        }
        #expect(await fixture.server.refreshRequests == 1)
    }

    @Test(
        "a browser callback without this server as iss is refused before its code is redeemed (RFC 9207)",
        arguments: [nil, "https://other.example.com", "https://auth.example.com/"] as [String?])
    func callbackFromAnotherIssuer(issuer: String?) async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        let started = client.authorizationURL(clientID: "web", redirectURI: "com.example.app:/callback")
        let state = try #require(URLComponents(url: started, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "state" }?.value)
        var callback = URLComponents(string: "com.example.app:/callback")!
        callback.queryItems =
            [URLQueryItem(name: "code", value: "c"), URLQueryItem(name: "state", value: state)] + (issuer.map { [URLQueryItem(name: "iss", value: $0)] } ?? [])
        await #expect(throws: LatchkeyClientError.self) { try await client.completeAuthorization(callbackURL: callback.url!) }
        #expect(client.currentAccessToken == nil)
        #expect(await fixture.server.resourceRequests == 0, "the code went to the token endpoint")  // the fake counts every other path there
    }

    @Test func signOutWithAnExpiredAccessTokenStillEndsTheServersSession() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = try await fixture.expiredSession(store: store)
        let spent = try #require(try store.load()?.refreshToken)
        await client.signOut()
        await client.background.finish()
        #expect(await fixture.server.logouts == 1)
        #expect(await fixture.server.refreshRequests == 1)
        #expect(try store.load() == nil)
        #expect(await fixture.server.presented[spent] == 1)
    }

    @Test func signOutTellsTheServerAndClearsTheStore() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = fixture.client(store: store)
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        await client.signOut()
        await client.background.finish()
        #expect(await fixture.server.logouts == 1)
        #expect(await fixture.server.refreshRequests == 0)
        #expect(try store.load() == nil)
        #expect(client.currentAccessToken == nil)
    }
}

/// Answers 401 to every resource request, with `challenge` in `WWW-Authenticate`; the rest goes to the server.
struct RejectingTransport: LatchkeyTransport {
    let server: FakeServer
    var challenge: String?
    let resourceRequests = SeenTokens()

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        guard request.url?.host == "api.example.com" else { return try await server.send(request) }
        resourceRequests.append(request.value(forHTTPHeaderField: "Authorization") ?? "", visible: nil)
        return FakeServer.answer(401, Data(), challenge.map { ["WWW-Authenticate": $0] } ?? [:])
    }
}
