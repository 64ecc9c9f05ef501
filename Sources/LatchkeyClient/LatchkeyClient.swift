public import Foundation
public import LatchkeyModels

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// Signs the user in to a Latchkey server and keeps them signed in.
///
/// It refreshes ahead of expiry and after a 401, one refresh at a time (across processes sharing a
/// ``FileTokenStore`` too), saves each rotated pair before using it, and ends the session only when the
/// server says `invalid_grant`: timeouts, 5xx, 429, a proxy's error page or a locked store never sign the user out.
///
/// ```swift
/// let client = LatchkeyClient(baseURL: server, tokenStore: FileTokenStore(url: container.appendingPathComponent("session.json")))
/// // credential: the ASAuthorizationAppleIDCredential of a request whose nonce was nonce.sha256
/// try await client.signInWithApple(identityToken: credential.identityToken, authorizationCode: credential.code, rawNonce: nonce.raw)
/// let (data, _) = try await client.data(for: URLRequest(url: server.appendingPathComponent("v1/me")))
/// ```
public final class LatchkeyClient: Sendable {
    /// The Latchkey server, e.g. `https://auth.example.com`.
    public let baseURL: URL
    /// What happens to the session; the first event is the stored state (``SessionEvent/signedIn``,
    /// ``SessionEvent/sessionEnded(_:)`` with ``SessionEndReason/noStoredSession``, or ``SessionEvent/storageUnavailable``).
    /// One consumer.
    public let events: AsyncStream<SessionEvent>

    private let engine: SessionEngine
    private let transport: any LatchkeyTransport
    private let snapshot: TokenSnapshot

    /// A client of the server at `baseURL` keeping its session in `tokenStore`.
    ///
    /// - Parameters:
    ///   - transport: how requests are sent; ``URLSessionTransport`` by default, a fake server in tests.
    ///   - clock: the time used for expiry and backoff; the system clock by default.
    public convenience init(
        baseURL: URL, tokenStore: any TokenStore, transport: any LatchkeyTransport = URLSessionTransport(), clock: (any LatchkeyClock)? = nil
    ) {
        self.init(baseURL: baseURL, tokenStore: tokenStore, transport: transport, clock: clock ?? SystemClock(), policy: RefreshPolicy())
    }

    init(baseURL: URL, tokenStore: any TokenStore, transport: any LatchkeyTransport, clock: any LatchkeyClock, policy: RefreshPolicy) {
        self.baseURL = baseURL
        self.transport = transport
        let snapshot = TokenSnapshot()
        let (events, continuation) = AsyncStream.makeStream(of: SessionEvent.self, bufferingPolicy: .bufferingNewest(64))
        self.events = events
        self.snapshot = snapshot
        engine = SessionEngine(
            baseURL: baseURL, store: tokenStore, transport: transport, clock: clock, policy: policy, snapshot: snapshot, events: continuation)
        Task { [engine] in await engine.start() }
    }

    // MARK: - Signing in

    /// Signs in with what `ASAuthorizationAppleIDCredential` gave the app (`POST /v1/auth/apple`).
    ///
    /// - Parameters:
    ///   - identityToken: `credential.identityToken` as UTF-8 text.
    ///   - authorizationCode: `credential.authorizationCode` as UTF-8 text; lets the server revoke at Apple on account deletion.
    ///   - rawNonce: ``AppleNonce/raw`` of the nonce whose ``AppleNonce/sha256`` was in the request.
    ///   - fullName: `credential.fullName`, which Apple shares on the first sign-in only.
    @discardableResult
    public func signInWithApple(
        identityToken: String, authorizationCode: String?, rawNonce: String, fullName: PersonNameComponents? = nil
    ) async throws -> SignedIn {
        let name = fullName.flatMap { name in
            name.givenName == nil && name.familyName == nil ? nil : AppleSignInRequest.FullName(givenName: name.givenName, familyName: name.familyName)
        }
        let body = AppleSignInRequest(identityToken: identityToken, authorizationCode: authorizationCode, rawNonce: rawNonce, fullName: name)
        return try await signIn(path: "v1/auth/apple", body: body)
    }

    /// Signs in with another provider's ID token (`POST /v1/auth/{provider}`): Google, Microsoft, generic OpenID Connect.
    @discardableResult
    public func signIn(provider: String, idToken: String, rawNonce: String? = nil) async throws -> SignedIn {
        try await signIn(path: "v1/auth/\(provider)", body: ProviderSignInRequest(idToken: idToken, rawNonce: rawNonce))
    }

    /// Signs in with an authorization code the app got with PKCE; the server redeems it (`POST /v1/auth/{provider}`).
    @discardableResult
    public func signIn(provider: String, authorizationCode: String, codeVerifier: String, redirectUri: String) async throws -> SignedIn {
        let body = ProviderSignInRequest(authorizationCode: authorizationCode, codeVerifier: codeVerifier, redirectUri: redirectUri)
        return try await signIn(path: "v1/auth/\(provider)", body: body)
    }

    private func signIn(path: String, body: some Encodable) async throws -> SignedIn {
        var request = URLRequest(url: baseURL.appendingPathComponent(path))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONEncoder().encode(body)
        let (data, response) = try await transport.send(request)
        guard (200..<300).contains(response.statusCode) else {
            throw LatchkeyClientError.rejected(status: response.statusCode, try? JSONDecoder().decode(OAuthErrorResponse.self, from: data))
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let signIn: SignInResponse
        do {
            signIn = try decoder.decode(SignInResponse.self, from: data)
        } catch {
            throw LatchkeyClientError.invalidResponse("HTTP \(response.statusCode) without a sign-in response")
        }
        await engine.signedIn(signIn)
        return SignedIn(user: signIn.user, isNewUser: signIn.isNewUser)
    }

    // MARK: - Signed-in requests

    /// The last access token known, without waiting; may have expired. Nil when signed out.
    public var currentAccessToken: String? { snapshot.accessToken }

    /// An access token that is not about to expire, refreshing first when needed (one refresh shared by all callers).
    ///
    /// Throws ``LatchkeyClientError/notSignedIn`` when there is no session, ``LatchkeyClientError/temporarilyUnavailable``
    /// when the server gave no definite answer, ``LatchkeyClientError/storageUnavailable`` when the store cannot be used;
    /// only the first ends the session.
    public func validAccessToken() async throws -> String {
        try await engine.validAccessToken()
    }

    /// Sends `request` with `Authorization: Bearer …`. On a 401 it refreshes, only if the rejected token is still the
    /// current one, and sends the request once more.
    public func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        let token = try await engine.validAccessToken()
        let (data, response) = try await transport.send(Self.authorized(request, token))
        guard response.statusCode == 401 else { return (data, response) }
        let fresh = try await engine.accessToken(replacing: token)
        let (retryData, retryResponse) = try await transport.send(Self.authorized(request, fresh))
        return (retryData, retryResponse)
    }

    private static func authorized(_ request: URLRequest, _ token: String) -> URLRequest {
        var request = request
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        return request
    }

    /// Refreshes now if the token is due, retries a store write that failed, and reads a store that was locked.
    /// Call it when the app comes to the foreground (`scenePhase == .active`); a timer does the same ahead of expiry.
    public func refreshIfNeeded() async {
        await engine.refreshIfNeeded()
    }

    // MARK: - Signing out

    /// Ends the session: clears the store (here and for every client sharing it) and, best effort, tells the
    /// server (`POST /v1/logout`). A refresh still in flight changes nothing afterwards.
    public func signOut() async {
        guard let token = await engine.signOut() else { return }
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/logout"), timeoutInterval: 10)
        request.httpMethod = "POST"
        _ = try? await transport.send(Self.authorized(request, token))
    }
}

/// A successful sign-in.
public struct SignedIn: Sendable, Equatable {
    /// The user, with their identities.
    public let user: UserResponse
    /// Whether this sign-in created the user.
    public let isNewUser: Bool
}
