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
/// // From the ASAuthorizationAppleIDCredential of a request whose nonce was nonce.sha256:
/// let identityToken = String(decoding: credential.identityToken ?? Data(), as: UTF8.self)
/// let code = credential.authorizationCode.map { String(decoding: $0, as: UTF8.self) }
/// try await client.signInWithApple(identityToken: identityToken, authorizationCode: code, rawNonce: nonce.raw, fullName: credential.fullName)
/// let (data, _) = try await client.data(for: URLRequest(url: server.appendingPathComponent("v1/me")))
/// ```
public final class LatchkeyClient: Sendable {
    /// The Latchkey server, e.g. `https://auth.example.com`.
    public let baseURL: URL

    /// What happens to the session, for this subscriber: each read of `events` is a new stream. It starts with the
    /// event that describes the present (``SessionEvent/signedIn``, ``SessionEvent/sessionEnded(_:)`` — with
    /// ``SessionEndReason/noStoredSession`` at launch — or ``SessionEvent/storageUnavailable``), then follows.
    public var events: AsyncStream<SessionEvent> { broadcast.events() }

    /// Whether someone is signed in, and who, now.
    public var state: SessionState {
        get async { await engine.state }
    }

    /// The state for this caller: the current ``SessionState`` first, then every change. Each call is a new stream;
    /// it ends when the task iterating it is cancelled.
    public func states() -> AsyncStream<SessionState> { broadcast.states() }

    /// The signed-in user as the stored session knows them (from the sign-in, then ``user()``); nil when signed out.
    public var currentUser: LatchkeyUser? {
        get async { await engine.user }
    }

    let engine: SessionEngine
    /// The transport given, behind ``DPoPTransport`` when the client has a device key.
    let transport: any LatchkeyTransport
    /// The device key's proofs, with ``DeviceBinding/dpop``.
    let signer: DPoPSigner?
    /// App Attest at sign-in, with ``AppAttest/enabled``.
    let attestor: AppAttestor?
    private let snapshot: TokenSnapshot
    let broadcast: SessionBroadcast
    /// Browser sign-ins started by ``authorizationURL(provider:clientID:redirectURI:)``, by `state`.
    private let pending = PendingAuthorizations()
    /// Server calls that outlive the call that started them (the logout after ``signOut()``).
    let background = BackgroundCalls()
    let lifecycle: AppLifecycleObserver?

    /// A client of the server at `baseURL` keeping its session in `tokenStore`.
    ///
    /// - Parameters:
    ///   - baseURL: the Latchkey server, such as `https://auth.example.com`.
    ///   - tokenStore: where the session is kept between launches.
    ///   - deviceBinding: ``DeviceBinding/dpop`` binds the session to a key of the device (DPoP, RFC 9449): every
    ///     request to Latchkey then carries a proof by it. ``DeviceBinding/none`` by default.
    ///   - appAttest: ``AppAttest/enabled`` proves at sign-in that the app is genuine (App Attest); disabled by default.
    ///   - transport: how requests are sent; ``URLSessionTransport`` by default, a fake server in tests.
    ///   - clock: the time used for expiry and backoff; the system clock by default.
    ///   - observesAppLifecycle: whether the client calls ``refreshIfNeeded()`` itself when the app becomes active and
    ///     when protected data becomes available after an unlock (UIKit's and AppKit's notifications). Pass false to
    ///     call it yourself.
    public convenience init(
        baseURL: URL, tokenStore: any TokenStore, deviceBinding: DeviceBinding = .none, appAttest: AppAttest = .disabled,
        transport: any LatchkeyTransport = URLSessionTransport(), clock: (any LatchkeyClock)? = nil, observesAppLifecycle: Bool = true
    ) {
        self.init(
            baseURL: baseURL, tokenStore: tokenStore, transport: transport, clock: clock ?? SystemClock(), policy: RefreshPolicy(),
            lifecycle: observesAppLifecycle ? .default : nil, deviceBinding: deviceBinding, appAttest: appAttest)
    }

    /// - Parameter installItems: where the device key and App Attest's state are kept, instead of the platform's choice
    ///   (`DeviceKeyPlan`); tests pass memory.
    init(
        baseURL: URL, tokenStore: any TokenStore, transport: any LatchkeyTransport, clock: any LatchkeyClock, policy: RefreshPolicy,
        lifecycle center: NotificationCenter? = nil, deviceBinding: DeviceBinding = .none, appAttest: AppAttest = .disabled,
        installItems: (any InstallItemStore)? = nil, appAttestPolicy: AppAttestPolicy = AppAttestPolicy()
    ) {
        self.baseURL = baseURL
        let issuer = Self.issuer(of: baseURL)
        let signer = DeviceKeySource.make(deviceBinding, issuer: issuer, tokenStore: tokenStore, items: installItems).map {
            DPoPSigner(source: $0, clock: clock)
        }
        let transport: any LatchkeyTransport = signer.map { DPoPTransport(inner: transport, signer: $0, server: baseURL) } ?? transport
        self.signer = signer
        self.transport = transport
        attestor = appAttest.service.map { service in
            let accessGroup: String? = if case .dpop(let group) = deviceBinding.mode { group } else { nil }
            let items = installItems ?? DeviceKeyPlan.current(accessGroup: accessGroup, tokenStore: tokenStore).store(issuer: issuer)
            return AppAttestor(service: service, items: items, clock: clock, policy: appAttestPolicy)
        }
        let snapshot = TokenSnapshot()
        let broadcast = SessionBroadcast()
        self.snapshot = snapshot
        self.broadcast = broadcast
        let engine = SessionEngine(
            baseURL: baseURL, store: tokenStore, transport: transport, clock: clock, policy: policy, snapshot: snapshot, broadcast: broadcast)
        self.engine = engine
        lifecycle = center.map { AppLifecycleObserver(center: $0) { await engine.foreground() } }
        Task { [engine] in
            await engine.start()
            await engine.describeUserIfMissing()
        }
    }

    // MARK: - Signing in

    /// Signs in with what `ASAuthorizationAppleIDCredential` gave the app (`POST /v1/auth/apple`).
    ///
    /// - Parameters:
    ///   - identityToken: `credential.identityToken` as UTF-8 text.
    ///   - authorizationCode: `credential.authorizationCode` as UTF-8 text; lets the server revoke at Apple on account deletion.
    ///   - rawNonce: ``AppleNonce/raw`` of the nonce whose ``AppleNonce/sha256`` was in the request.
    ///   - fullName: `credential.fullName`, which Apple shares on the first sign-in only.
    ///   - inviteCode: the invitation of a new user, when the server's `signup.mode` is `invite`.
    @discardableResult
    public func signInWithApple(
        identityToken: String, authorizationCode: String?, rawNonce: String, fullName: PersonNameComponents? = nil, inviteCode: String? = nil
    ) async throws -> SignedIn {
        let name = fullName.flatMap { name in
            name.givenName == nil && name.familyName == nil ? nil : AppleSignInRequest.FullName(givenName: name.givenName, familyName: name.familyName)
        }
        let body = AppleSignInRequest(
            identityToken: identityToken, authorizationCode: authorizationCode, rawNonce: rawNonce, fullName: name, inviteCode: inviteCode)
        return try await signIn(path: "v1/auth/apple", body: body)
    }

    /// Signs in as a guest (`POST /v1/auth/anonymous`, when the server's `anonymous.enabled` is on): a user with no
    /// identity yet (`user.isAnonymous`). Linking an identity later keeps the same user.
    @discardableResult
    public func signInAnonymously() async throws -> SignedIn {
        try await signIn(path: "v1/auth/anonymous", body: [String: String]())
    }

    /// Asks the server to e-mail a one-time sign-in code to `email` (`POST /v1/auth/email/start`). The answer is the same
    /// whether or not the address has an account; the message's subject begins with the code, which iOS offers as AutoFill.
    public func startEmailSignIn(email: String, inviteCode: String? = nil) async throws {
        _ = try await post("v1/auth/email/start", body: EmailStartRequest(email: email, inviteCode: inviteCode), as: StatusResponse.self)
    }

    /// Signs in with the code the message carried (`POST /v1/auth/email/verify`); five wrong tries end a code.
    @discardableResult
    public func verifyEmailCode(_ code: String, email: String, inviteCode: String? = nil) async throws -> SignedIn {
        try await signIn(path: "v1/auth/email/verify", body: EmailVerifyRequest(email: email, code: code, inviteCode: inviteCode))
    }

    /// Signs in with another provider's ID token (`POST /v1/auth/{provider}`): Google, Microsoft, generic OpenID Connect.
    /// `inviteCode`: the invitation of a new user, when the server's `signup.mode` is `invite`.
    @discardableResult
    public func signIn(provider: String, idToken: String, rawNonce: String? = nil, inviteCode: String? = nil) async throws -> SignedIn {
        try await signIn(path: "v1/auth/\(provider)", body: ProviderSignInRequest(idToken: idToken, rawNonce: rawNonce, inviteCode: inviteCode))
    }

    /// Signs in with an authorization code the app got with PKCE; the server redeems it (`POST /v1/auth/{provider}`).
    /// `inviteCode`: the invitation of a new user, when the server's `signup.mode` is `invite`.
    @discardableResult
    public func signIn(
        provider: String, authorizationCode: String, codeVerifier: String, redirectUri: String, inviteCode: String? = nil
    ) async throws -> SignedIn {
        let body = ProviderSignInRequest(authorizationCode: authorizationCode, codeVerifier: codeVerifier, redirectUri: redirectUri, inviteCode: inviteCode)
        return try await signIn(path: "v1/auth/\(provider)", body: body)
    }

    func signIn(path: String, body: some Encodable) async throws -> SignedIn {
        let evidence = await appAttestEvidence()
        let signIn: SignInResponse
        do {
            signIn = try await post(path, body: SignInBody(body: body, appAttest: evidence), as: SignInResponse.self, describing: "a sign-in response")
        } catch let error as LatchkeyClientError {
            if let evidence, let status = error.statusCode { await attestor?.answered(evidence, status: status, error: error.serverError?.error) }
            throw error
        }
        if let evidence { await attestor?.answered(evidence, status: 200, error: nil) }
        let tokens = TokenPairResponse(
            accessToken: signIn.accessToken, tokenType: signIn.tokenType, expiresIn: signIn.expiresIn, refreshToken: signIn.refreshToken)
        await engine.signedIn(tokens, user: signIn.user)
        return SignedIn(user: signIn.user, isNewUser: signIn.isNewUser)
    }

    /// The `appAttest` member of the next sign-in, tied to the device key when there is one; nil without App Attest.
    private func appAttestEvidence() async -> AppAttestEvidence? {
        guard let attestor else { return nil }
        let thumbprint: String?
        do {
            thumbprint = try signer?.thumbprint()
        } catch {
            return nil  // The sign-in fails for want of the key anyway.
        }
        return await attestor.evidence(dpopThumbprint: thumbprint) { [self] in
            try await post("v1/attest/challenge", body: [String: String](), as: AppAttestChallenge.self, describing: "an App Attest challenge").challenge
        }
    }

    /// `POST /v1/attest/challenge`'s answer.
    struct AppAttestChallenge: Decodable {
        let challenge: String
        let expiresIn: Int?
    }

    /// A POST without a session (sign-ins and their options): a 2xx answer's body as `Answer`.
    func post<Answer: Decodable>(_ path: String, body: some Encodable, as type: Answer.Type, describing what: String = "the documented answer")
        async throws -> Answer
    {
        var request = URLRequest(url: baseURL.appendingPathComponent(path))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONEncoder().encode(body)
        let (data, response) = try await transport.send(request)
        return try Self.answer(Answer.self, data, status: response.statusCode, describing: what)
    }

    /// A 2xx answer's body as `Answer`; any other status is ``LatchkeyClientError/rejected``, with the server's error.
    static func answer<Answer: Decodable>(_ type: Answer.Type, _ data: Data, status: Int, describing what: String) throws -> Answer {
        guard (200..<300).contains(status) else {
            throw LatchkeyClientError.rejected(status: status, try? JSONDecoder().decode(OAuthErrorResponse.self, from: data))
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(Answer.self, from: data)
        } catch {
            throw LatchkeyClientError.invalidResponse("HTTP \(status) without \(what)")
        }
    }

    // MARK: - The browser flow

    /// The URL to open in a web sheet (`ASWebAuthenticationSession`) or browser to sign in through Latchkey's
    /// browser flow (`/oauth2/authorize`, PKCE S256). The client remembers the verifier and `state` until
    /// ``completeAuthorization(callbackURL:)``.
    ///
    /// - Parameters:
    ///   - provider: `apple`, `google`, … ; nil shows Latchkey's page listing the providers.
    ///   - clientID: the app's client id in the server's `clients[]`.
    ///   - redirectURI: one of that client's redirect URIs, such as `com.example.app:/oauth2redirect`.
    public func authorizationURL(provider: String? = nil, clientID: String, redirectURI: String) -> URL {
        let authorization = PendingAuthorization(clientID: clientID, redirectURI: redirectURI)
        pending.add(authorization)
        var components = URLComponents(url: baseURL.appendingPathComponent("oauth2/authorize"), resolvingAgainstBaseURL: false)!
        components.queryItems =
            [
                URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: clientID),
                URLQueryItem(name: "redirect_uri", value: redirectURI),
                URLQueryItem(name: "code_challenge", value: PKCE.challenge(for: authorization.verifier)),
                URLQueryItem(name: "code_challenge_method", value: "S256"), URLQueryItem(name: "state", value: authorization.state),
            ] + (provider.map { [URLQueryItem(name: "provider", value: $0)] } ?? [])
            // RFC 9449 §10: the code is then redeemed only with a proof by this key. A key that cannot be read now is
            // left out; the token request's proof binds the session all the same.
            + ((try? signer?.thumbprint()).map { [URLQueryItem(name: "dpop_jkt", value: $0)] } ?? [])
        return components.url!
    }

    /// Finishes a browser sign-in with the URL the web sheet ended at: checks `state` and `iss`, redeems the code
    /// with its verifier at `/oauth2/token`, saves the session, then reads the user (`GET /v1/me`).
    ///
    /// Throws ``LatchkeyClientError/rejected`` with the server's error (`access_denied` when the user cancelled at
    /// the provider), and ``LatchkeyClientError/invalidResponse`` for a URL this client did not start. The session
    /// is saved before the user is read; `isNewUser` is always false here, since the code does not say.
    @discardableResult
    public func completeAuthorization(callbackURL: URL) async throws -> SignedIn {
        let fields = Dictionary(
            (URLComponents(url: callbackURL, resolvingAgainstBaseURL: false)?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        guard let state = fields["state"], let authorization = pending.take(state: state) else {
            throw LatchkeyClientError.invalidResponse("the callback's state names no sign-in this client started")
        }
        // RFC 9207: the answer must come from this server, not from another one the app also talks to. The server
        // always sends `iss` (its metadata says so), so a callback without it is refused too.
        guard let issuer = fields["iss"], issuer == Self.issuer(of: baseURL) else {
            throw LatchkeyClientError.invalidResponse(
                "the callback comes from \(fields["iss"].map { String($0.prefix(200)) } ?? "an unnamed issuer"), not from \(Self.issuer(of: baseURL))")
        }
        if let error = fields["error"] {
            throw LatchkeyClientError.rejected(status: 0, OAuthErrorResponse(error: error, errorDescription: fields["error_description"] ?? ""))
        }
        guard let code = fields["code"], !code.isEmpty else { throw LatchkeyClientError.invalidResponse("the callback has neither code nor error") }
        var request = URLRequest(url: baseURL.appendingPathComponent("oauth2/token"))
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = SessionEngine.formBody([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", authorization.redirectURI), ("client_id", authorization.clientID),
            ("code_verifier", authorization.verifier),
        ])
        let (body, response) = try await transport.send(request)
        struct OAuthTokens: Decodable {
            let access_token: String
            let token_type: String
            let expires_in: Int
            let refresh_token: String
        }
        let tokens = try Self.answer(OAuthTokens.self, body, status: response.statusCode, describing: "RFC 6749 tokens")
        // The code says nothing about the user: ask before publishing the session, so it is published with its user.
        let user = await engine.describe(AccessCredential(token: tokens.access_token, tokenType: tokens.token_type))
        await engine.signedIn(
            TokenPairResponse(accessToken: tokens.access_token, tokenType: tokens.token_type, expiresIn: tokens.expires_in, refreshToken: tokens.refresh_token),
            user: user)
        guard let user else {
            // The session is kept (its state is `.signedInWithoutProfile` until the server describes the user).
            throw LatchkeyClientError.invalidResponse("signed in, but GET /v1/me did not answer the user")
        }
        return SignedIn(user: user, isNewUser: false)
    }

    /// The server's issuer as `iss` spells it: the base URL without a trailing slash.
    static func issuer(of baseURL: URL) -> String {
        let text = baseURL.absoluteString
        return text.hasSuffix("/") ? String(text.dropLast()) : text
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
        try await engine.validCredential().token
    }

    /// Sends `request` with the access token: `Authorization: Bearer …`, or, for a session bound to the device key
    /// (``DeviceBinding/dpop``), `Authorization: DPoP …` with a proof for the request. On a 401 that blames the token
    /// (RFC 6750, RFC 9449 §7.1: a `Bearer` or `DPoP` challenge without an error or with `invalid_token`, or no
    /// challenge at all) it refreshes, only if the rejected token is still the current one, and sends the request once
    /// more. Other 401s are returned as they are: a new token would not change them, and refreshing on each would
    /// rotate the session on every call. A server asking for a DPoP nonce (`use_dpop_nonce`) gets the request once
    /// more with a proof carrying it.
    public func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        var authorized = request
        authorized.setValue(try await engine.validCredential().authorization, forHTTPHeaderField: "Authorization")
        // The transport adds the proof (``DPoPTransport``).
        let (data, response) = try await transport.send(authorized)
        guard try await refreshes(after: response, for: authorized) else { return (data, response) }
        authorized.setValue(try await engine.validCredential().authorization, forHTTPHeaderField: "Authorization")
        return try await transport.send(authorized)
    }

    // MARK: - Any HTTP stack

    /// Authorizes `request` with an access token that is not about to expire (refreshing first when needed, one refresh
    /// shared by all callers), for Alamofire, swift-openapi-runtime middleware or any other HTTP stack: sets
    /// `Authorization: Bearer …`, or, for a session bound to the device key (``DeviceBinding/dpop``),
    /// `Authorization: DPoP …` and a `DPoP` proof for the request's method and URL, with the token's hash (`ath`).
    /// Authorize the request again before each send: a proof is good for one. Throws as ``validAccessToken()`` does.
    ///
    /// ```swift
    /// var request = URLRequest(url: URL(string: "https://api.example.com/notes")!)
    /// try await client.authorize(&request)
    /// ```
    public func authorize(_ request: inout URLRequest) async throws {
        request.setValue(try await engine.validCredential().authorization, forHTTPHeaderField: "Authorization")
        if let signer, DPoPSigner.needsProof(request, server: baseURL) { try signer.sign(&request) }
    }

    /// After `request`, sent with ``authorize(_:)``, got `response`: true when it should be sent once more, after
    /// ``authorize(_:)`` again — a 401 whose challenge blames the token (see ``data(for:)``), and a refresh that replaced
    /// the token it carried (or another caller's refresh already had); or a 401 asking for a DPoP nonce its proof did
    /// not carry (the next ``authorize(_:)`` puts it in the proof). False for any other answer, a second 401 of the
    /// same token, or a session that ended. Never sends the request itself.
    public func handleUnauthorized(_ response: HTTPURLResponse, for request: URLRequest) async -> Bool {
        if let signer, let url = request.url, DPoPSigner.asksForNonce(response, body: Data()) {
            signer.remember(response, from: url)
            return response.value(forHTTPHeaderField: "DPoP-Nonce") != DPoPSigner.nonce(ofProof: request.value(forHTTPHeaderField: "DPoP"))
        }
        return (try? await refreshes(after: response, for: request)) ?? false
    }

    /// ``handleUnauthorized(_:for:)``, throwing what the refresh threw (``data(for:)`` passes it on).
    private func refreshes(after response: HTTPURLResponse, for request: URLRequest) async throws -> Bool {
        guard response.statusCode == 401, Self.blamesToken(response.value(forHTTPHeaderField: "WWW-Authenticate")),
            let rejected = AccessCredential(authorization: request.value(forHTTPHeaderField: "Authorization"))
        else { return false }
        return try await engine.credential(replacing: rejected.token).token != rejected.token
    }

    /// Whether a 401's challenge says the access token itself is the problem.
    static func blamesToken(_ challenge: String?) -> Bool {
        guard let challenge = challenge?.trimmingCharacters(in: .whitespaces), !challenge.isEmpty else { return true }
        guard let error = challengeError(challenge, scheme: "bearer") ?? challengeError(challenge, scheme: "dpop") else { return false }
        return error.isEmpty || error == "invalid_token"
    }

    /// The `error` of `challenge` when its scheme is `scheme` (lower case): "" when it names none, nil for another scheme.
    static func challengeError(_ challenge: String?, scheme: String) -> String? {
        guard let lowered = challenge?.trimmingCharacters(in: .whitespaces).lowercased(), lowered == scheme || lowered.hasPrefix(scheme + " ") else {
            return nil
        }
        guard let range = lowered.range(of: "error=") else { return "" }
        return String(lowered[range.upperBound...].drop { $0 == "\"" }.prefix { $0 != "\"" && $0 != "," && $0 != " " })
    }

    /// Refreshes now if the token is due, retries a store write that failed, reads a store that was locked, and asks the
    /// server for the user when the stored session lacks them. The client calls it itself when the app becomes active
    /// and when protected data becomes available (unless created with `observesAppLifecycle: false`); a timer
    /// refreshes ahead of expiry.
    public func refreshIfNeeded() async {
        await engine.foreground()
    }

    // MARK: - Signing out

    /// Ends the session: clears the store (here and for every client sharing it) and returns. The server is told in the
    /// background (`POST /v1/logout`, each request with a 10-second timeout), best effort. A refresh still in flight
    /// changes nothing afterwards.
    public func signOut() async {
        await signOut(everywhere: false)
    }

    /// Signs out here and, with `everywhere`, on every device (`POST /v1/logout` with `{"all": true}`). It returns as
    /// soon as the local session is gone; the server is told in the background, best effort.
    public func signOut(everywhere: Bool) async {
        guard let ended = await engine.signOut() else { return }
        background.run { [self] in await self.logOut(ended, everywhere: everywhere) }
    }

    /// Tells the server about a sign-out. Access tokens live minutes, so many sign-outs hold an expired one: without a
    /// logout the server's session would live until its idle expiry, so the refresh token is spent once more for a token
    /// the server takes.
    private func logOut(_ ended: (credential: AccessCredential, refreshToken: String), everywhere: Bool) async {
        guard await logout(with: ended.credential, everywhere: everywhere) == 401 else { return }
        if let fresh = await engine.tokens(forSigningOut: ended.refreshToken) {
            _ = await logout(with: AccessCredential(token: fresh.accessToken, tokenType: fresh.tokenType), everywhere: everywhere)
        }
    }

    /// `POST /v1/logout`; the status, or nil without an answer.
    private func logout(with credential: AccessCredential, everywhere: Bool) async -> Int? {
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/logout"), timeoutInterval: 10)
        request.httpMethod = "POST"
        if everywhere {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"all":true}"#.utf8)
        }
        request.setValue(credential.authorization, forHTTPHeaderField: "Authorization")
        return try? await transport.send(request).1.statusCode
    }
}

/// A sign-in's body with its `appAttest` member, when there is one.
struct SignInBody<Body: Encodable>: Encodable {
    let body: Body
    let appAttest: AppAttestEvidence?

    private enum CodingKeys: String, CodingKey {
        case appAttest
    }

    func encode(to encoder: any Encoder) throws {
        try body.encode(to: encoder)
        guard let appAttest else { return }
        // The same keyed container as the body's: one JSON object.
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appAttest, forKey: .appAttest)
    }
}

/// A browser sign-in between ``LatchkeyClient/authorizationURL(provider:clientID:redirectURI:)`` and its callback.
struct PendingAuthorization: Sendable {
    let clientID: String
    let redirectURI: String
    let verifier = PKCE.makeVerifier()
    let state = PKCE.makeVerifier()
}

/// The browser sign-ins a client has started and not finished, by `state`.
final class PendingAuthorizations: @unchecked Sendable {
    // @unchecked: `byState` is only read and written while holding `lock` (Mutex needs iOS 18).
    private let lock = NSLock()
    private var byState: [String: PendingAuthorization] = [:]

    func add(_ authorization: PendingAuthorization) { lock.withLock { byState[authorization.state] = authorization } }
    func take(state: String) -> PendingAuthorization? { lock.withLock { byState.removeValue(forKey: state) } }
}

/// A successful sign-in.
public struct SignedIn: Sendable, Equatable {
    /// The user, with their identities.
    public let user: UserResponse
    /// Whether this sign-in created the user.
    public let isNewUser: Bool
}

/// Server calls that outlive the call that started them; tests wait for them.
final class BackgroundCalls: @unchecked Sendable {
    // @unchecked: `running` is only read and written while holding `lock` (Mutex needs iOS 18).
    private let lock = NSLock()
    private var running: [UUID: Task<Void, Never>] = [:]

    func run(_ operation: @escaping @Sendable () async -> Void) {
        let id = UUID()
        lock.withLock {
            running[id] = Task { [weak self] in
                await operation()
                guard let self else { return }
                _ = self.lock.withLock { self.running.removeValue(forKey: id) }
            }
        }
    }

    /// Returns when every call started so far has finished.
    func finish() async {
        for task in lock.withLock({ Array(running.values) }) { await task.value }
    }
}
