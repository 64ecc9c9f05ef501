import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
public import LatchkeyModels

extension ProviderCredential {
    /// The authorization code and its PKCE verifier, which a provider without ID tokens needs; `displayName` names the
    /// provider in the refusal.
    func codeWithVerifier(_ displayName: String) throws(LatchkeyError) -> (code: String, verifier: String) {
        guard let code = authorizationCode, !code.isEmpty else {
            throw LatchkeyError(.malformedRequest, "send authorizationCode with codeVerifier and redirectUri (\(displayName) issues no ID tokens)")
        }
        guard let verifier = codeVerifier, PKCE.isValidVerifier(verifier) else {
            throw LatchkeyError(.malformedRequest, "codeVerifier is missing or not 43–128 unreserved characters (RFC 7636 §4.1)")
        }
        return (code, verifier)
    }
}

/// What Latchkey sends a provider to start a browser sign-in on an app's behalf.
public struct BrowserSignInRequest: Sendable {
    /// Latchkey's own callback for this provider, `{issuer}/oauth2/callback/{provider}`.
    public var callbackURL: String
    public var state: String
    /// The ID token must carry this nonce (hashed, unless the provider's `nonceMatching` says otherwise).
    public var rawNonce: String
    /// Latchkey's PKCE verifier at the provider (S256).
    public var codeVerifier: String

    public init(callbackURL: String, state: String, rawNonce: String, codeVerifier: String) {
        self.callbackURL = callbackURL
        self.state = state
        self.rawNonce = rawNonce
        self.codeVerifier = codeVerifier
    }
}

extension BrowserSignInRequest {
    /// The authorization request's parameters every code flow with PKCE sends: where to come back, the state, and the
    /// S256 challenge of Latchkey's verifier.
    var codeFlowParameters: [(String, String)] {
        [
            ("redirect_uri", callbackURL), ("state", state), ("code_challenge", PKCE.challenge(for: codeVerifier)),
            ("code_challenge_method", "S256"),
        ]
    }
}

/// Where the browser goes to sign in at a provider.
public struct BrowserSignInStart: Sendable, Equatable {
    /// The provider's authorization URL with every parameter.
    public var url: String

    public init(url: String) {
        self.url = url
    }
}

/// A provider users sign in with: turns what an app sends into a verified identity, and validates and
/// revokes the grant it leaves behind.
///
/// A sign-in runs ``verify(_:)`` (local checks, or the one provider call that proves the credential),
/// then the server claims ``ProviderSignIn/singleUseToken``, then ``complete(_:_:)`` does the calls that
/// must not happen twice for one credential (such as redeeming Apple's code).
public protocol IdentityProvider: ProviderAuthorizationLink, CredentialVerifier {
    /// The body fields this provider takes, for error descriptions and the 404 listing.
    var acceptedCredentials: String { get }
    /// The kinds of credential it takes (what ``acceptedCredentials`` says for people).
    var credentialKinds: Set<CredentialKind> { get }
    /// Signing-key caches to keep fresh in the background.
    var keyCaches: [JWKSCache] { get }
    /// The provider's name for people (the chooser page's buttons).
    var displayName: String { get }
    /// Whether ``browserSignIn(_:)`` can start a sign-in (false for Facebook, whose logins come from its SDKs).
    var signsInWithBrowser: Bool { get }
    /// Starts a browser sign-in at the provider; nil when the provider has none here.
    func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart?
    /// The credential the provider's answer at Latchkey's callback makes, to run through ``verify(_:)``.
    func browserCredential(_ answer: [String: String], _ request: BrowserSignInRequest) -> ProviderCredential
    /// The name the provider's answer at Latchkey's callback carries, if any (Apple's `user` field, first sign-in only).
    func browserName(_ answer: [String: String]) -> PersonName?
    /// The JSON body `POST /v1/auth/{name}` takes: ``ProviderSignInRequest``, or Apple's ``AppleSignInRequest``.
    var signInBody: any SignInBody.Type { get }
}

/// A body of `POST /v1/auth/{provider}` (and of linking): the credential, and what else the app sent with it.
public protocol SignInBody: Decodable, Sendable {
    /// The credential, or why the body cannot be one.
    func credential() throws(LatchkeyError) -> ProviderCredential
    /// The name the app sent, as `fullName.givenName` and `fullName.familyName`.
    var name: PersonName? { get }
    var inviteCode: String? { get }
}

extension ProviderSignInRequest: SignInBody {
    public func credential() throws(LatchkeyError) -> ProviderCredential {
        ProviderCredential(
            idToken: idToken, rawNonce: rawNonce, authorizationCode: authorizationCode, codeVerifier: codeVerifier, redirectURI: redirectUri,
            accessToken: accessToken, clientID: clientId)
    }
    public var name: PersonName? { nil }
}

extension AppleSignInRequest: SignInBody {
    public func credential() throws(LatchkeyError) -> ProviderCredential {
        guard !identityToken.isEmpty else { throw LatchkeyError(.malformedRequest, "identityToken is empty") }
        return ProviderCredential(idToken: identityToken, rawNonce: rawNonce, authorizationCode: authorizationCode, redirectURI: redirectUri)
    }
    public var name: PersonName? { fullName.map { PersonName(givenName: $0.givenName, familyName: $0.familyName) } }
}

extension IdentityProvider {
    public func complete(_ credential: ProviderCredential, _ signIn: ProviderSignIn) async throws -> ProviderSignIn { signIn }
    public func completes(_ credential: ProviderCredential) -> Bool { false }
    public var keyCaches: [JWKSCache] { [] }
    public var signsInWithBrowser: Bool { false }
    public func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart? { nil }
    public func browserName(_ answer: [String: String]) -> PersonName? { nil }
    public var signInBody: any SignInBody.Type { ProviderSignInRequest.self }

    /// A code redeemed with Latchkey's verifier at Latchkey's callback, its ID token checked against the nonce.
    public func browserCredential(_ answer: [String: String], _ request: BrowserSignInRequest) -> ProviderCredential {
        ProviderCredential(rawNonce: request.rawNonce, authorizationCode: answer["code"], codeVerifier: request.codeVerifier, redirectURI: request.callbackURL)
    }
}

/// The `nonce` parameter that makes a provider's ID token pass `matching` for `rawNonce`.
func nonceParameter(_ rawNonce: String, _ matching: NonceMatching) -> String {
    matching == .verbatim ? rawNonce : hashedNonce(rawNonce)
}

/// `base` with `fields` appended as a form-encoded query.
func url(_ base: String, query fields: [(String, String)]) -> String {
    base + (base.contains("?") ? "&" : "?") + formURLEncoded(fields)
}

/// Receives one event per provider call: the provider, the operation (`code_exchange`, `refresh_validation`,
/// `revocation`, `token_check`, `discovery`) and the outcome (`ok` or an error code). The server turns these into metrics.
public typealias ProviderCallObserver = @Sendable (_ provider: String, _ operation: String, _ outcome: String) -> Void

/// The providers a server is configured with, by name.
public struct ProviderRegistry: Sendable {
    private let byName: [String: any IdentityProvider]

    public init(_ providers: [any IdentityProvider]) {
        byName = Dictionary(providers.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    public subscript(name: String) -> (any IdentityProvider)? { byName[name] }

    /// The configured providers' names, sorted.
    public var names: [String] { byName.keys.sorted() }

    public var all: [any IdentityProvider] { names.compactMap { byName[$0] } }

    /// Each provider as the session service's link for validating and revoking grants.
    public var links: [String: any ProviderAuthorizationLink] { byName.mapValues { $0 as any ProviderAuthorizationLink } }
}
