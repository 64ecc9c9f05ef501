import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyModels
public import Logging
import Synchronization

/// How an OpenID Connect provider is reached and what its ID tokens must say.
public struct OpenIDProviderConfiguration: Sendable {
    /// The path segment and stored provider name.
    public var name: String
    /// The provider's name for people.
    public var displayName: String
    /// Where the discovery document is; its `jwks_uri`, `token_endpoint` and `revocation_endpoint` are used.
    public var discoveryURL: String
    /// For a generic provider: discovery's `issuer` must equal this exactly. Nil when the policy's issuers decide.
    public var expectedIssuer: String?
    /// Issuers, client ids (audiences), nonce rules and leeway. A generic provider's algorithms come from discovery.
    public var policy: IdentityTokenPolicy
    /// For confidential clients; public clients with PKCE send none.
    public var clientSecret: Secret?
    /// The client id of the browser flow (a web client); nil uses the first of the policy's audiences.
    public var webClientID: String?
    /// Provider-specific checks after the token verified (Google's `azp` and `hd`, Microsoft's tenants).
    public var checks: @Sendable (VerifiedIdentity) throws(LatchkeyError) -> Void
    public var requestTimeout: Duration = .seconds(10)
    /// The client secret also signs HS256 ID tokens that name no key (LINE's web login); only LINE's module sets it.
    public var clientSecretSignsIDTokens = false
    /// How a grant is revoked at the revocation endpoint.
    public var revocation = Revocation.refreshToken

    /// What the revocation endpoint takes.
    public enum Revocation: Sendable {
        /// RFC 7009: the refresh token itself (`token`, `token_type_hint=refresh_token`).
        case refreshToken
        /// An access token (`access_token`), got by refreshing the grant; the provider ends the grant with it (LINE).
        case accessTokenOfGrant
    }

    public init(
        name: String, displayName: String, discoveryURL: String, expectedIssuer: String? = nil, policy: IdentityTokenPolicy, clientSecret: String? = nil,
        checks: @escaping @Sendable (VerifiedIdentity) throws(LatchkeyError) -> Void = { _ throws(LatchkeyError) in }
    ) {
        self.name = name
        self.displayName = displayName
        self.discoveryURL = discoveryURL
        self.expectedIssuer = expectedIssuer
        self.policy = policy
        self.clientSecret = clientSecret.map { Secret($0) }
        self.checks = checks
    }

    /// Google: both issuer spellings, `aud` among `clientIDs`, `azp` among them when present, and `hd` among
    /// `hostedDomains` when that list is not empty.
    public static func google(
        clientIDs: [String], hostedDomains: [String] = [], clientSecret: String? = nil,
        discoveryURL: String = "https://accounts.google.com/.well-known/openid-configuration"
    ) -> OpenIDProviderConfiguration {
        var policy = IdentityTokenPolicy.google(clientIDs: clientIDs)
        policy.configurationKey = "google"
        policy.audienceHint = "tokens carry the OAuth client id of the app that asked; add it to google.clientIds"
        return OpenIDProviderConfiguration(
            name: "google", displayName: "Google", discoveryURL: discoveryURL, policy: policy, clientSecret: clientSecret
        ) { identity throws(LatchkeyError) in
            if let azp = identity.authorizedParty, !clientIDs.contains(azp) {
                throw LatchkeyError(.unexpectedAudience, "the token's azp (authorized party) \"\(azp.prefix(128))\" is not one of google.clientIds")
            }
            if !hostedDomains.isEmpty {
                guard let domain = identity.hostedDomain, hostedDomains.contains(domain) else {
                    throw LatchkeyError(
                        .invalidClaim,
                        "the Google account is \(identity.hostedDomain.map { "in the Workspace domain \($0.prefix(100))" } ?? "not in a Workspace domain"), and google.hostedDomains allows only \(hostedDomains.joined(separator: ", "))"
                    )
                }
            }
        }
    }

    /// The consumers tenant of personal Microsoft accounts.
    public static let microsoftConsumersTenant = "9188040d-6c67-4c5b-b112-36a304b66dad"

    /// Microsoft identity platform v2.0, multi-tenant: `iss` must be the token's own tenant's issuer, and the
    /// tenant must be allowed by `tenants` (`common`, `organizations`, `consumers` or tenant GUIDs).
    public static func microsoft(
        clientIDs: [String], tenants: [String] = ["common"], clientSecret: String? = nil, authority: String = "https://login.microsoftonline.com"
    ) -> OpenIDProviderConfiguration {
        var policy = IdentityTokenPolicy.microsoft(clientIDs: clientIDs)
        policy.configurationKey = "microsoft"
        // A national cloud (`https://login.microsoftonline.us`) issues under its own host; its keys, fetched from the
        // authority, are what the signature is checked against.
        let authority = authority.hasSuffix("/") ? String(authority.dropLast()) : authority
        policy.issuers.insert(authority + "/{tenantid}/v2.0")
        let allowed = Set(tenants.map { $0.lowercased() })
        return OpenIDProviderConfiguration(
            name: "microsoft", displayName: "Microsoft", discoveryURL: authority + "/common/v2.0/.well-known/openid-configuration", policy: policy,
            clientSecret: clientSecret
        ) { identity throws(LatchkeyError) in
            guard let tid = identity.tenantID?.lowercased(), UUID(uuidString: tid) != nil else {
                throw LatchkeyError(.invalidClaim, "the token's tid is not a tenant GUID, so its issuer cannot be checked")
            }
            let consumer = tid == microsoftConsumersTenant
            let accepted =
                allowed.contains("common") || allowed.contains(tid) || (allowed.contains("consumers") && consumer)
                || (allowed.contains("organizations") && !consumer)
            guard accepted else {
                throw LatchkeyError(
                    .unexpectedIssuer,
                    "the token is from \(consumer ? "a personal Microsoft account" : "the tenant \(tid)"), which microsoft.tenants [\(tenants.joined(separator: ", "))] does not allow"
                )
            }
        }
    }

    /// Any OpenID Connect provider, configured by its issuer URL; keys and algorithms come from its discovery document.
    public static func generic(name: String, displayName: String? = nil, issuer: String, clientIDs: [String], clientSecret: String? = nil)
        -> OpenIDProviderConfiguration
    {
        var policy = IdentityTokenPolicy(providerName: displayName ?? name, issuers: [issuer], audiences: clientIDs, configurationKey: "oidc.\(name)")
        policy.audienceHint = "add the client id to oidc.\(name).clientIds"
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        return OpenIDProviderConfiguration(
            name: name, displayName: displayName ?? name, discoveryURL: base + "/.well-known/openid-configuration", expectedIssuer: issuer, policy: policy,
            clientSecret: clientSecret)
    }
}

/// An OpenID Connect provider (Google, Microsoft, or any other by its issuer): ID tokens verified locally,
/// authorization codes redeemed with PKCE, refresh tokens validated and revoked at its endpoints.
public final class OpenIDProvider: IdentityProvider {
    public let configuration: OpenIDProviderConfiguration
    private let calls: ProviderCalls
    private let transport: any HTTPTransport
    private let timeSource: TimeSource
    private let logger: Logger?
    private let resolved = Mutex<Task<Endpoints, any Error>?>(nil)

    /// The algorithms Latchkey verifies; a generic provider's discovery list is narrowed to these.
    static let verifiableAlgorithms: Set<String> = ["RS256", "ES256"]

    struct Endpoints: Sendable {
        let verifier: IdentityTokenVerifier
        let keys: JWKSCache
        let authorizationEndpoint: String?
        let tokenEndpoint: String?
        let revocationEndpoint: String?
    }

    public init(
        configuration: OpenIDProviderConfiguration, transport: any HTTPTransport, timeSource: TimeSource = .system, logger: Logger? = nil,
        observer: ProviderCallObserver? = nil
    ) {
        self.configuration = configuration
        self.transport = transport
        self.timeSource = timeSource
        self.logger = logger
        self.calls = ProviderCalls(
            provider: configuration.name, displayName: configuration.displayName, transport: transport, timeout: configuration.requestTimeout,
            observer: observer)
    }

    public var name: String { configuration.name }
    public var displayName: String { configuration.displayName }
    public var signsInWithBrowser: Bool { true }
    public var acceptedCredentials: String { "{idToken, rawNonce?} or {authorizationCode, codeVerifier, redirectUri}" }
    public var credentialKinds: Set<CredentialKind> { [.idToken, .authorizationCode] }

    public func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn {
        let endpoints = try await resolve()
        if let idToken = credential.idToken, !idToken.isEmpty {
            let identity = try await endpoints.verifier.verify(idToken, expecting: .signIn(rawNonce: credential.rawNonce))
            try configuration.checks(identity)
            return ProviderSignIn(identity: identity, singleUseToken: idToken)
        }
        guard let code = credential.authorizationCode, !code.isEmpty else {
            throw LatchkeyError(.malformedRequest, "send idToken, or authorizationCode with codeVerifier and redirectUri")
        }
        guard let verifier = credential.codeVerifier, PKCE.isValidVerifier(verifier) else {
            throw LatchkeyError(.malformedRequest, "codeVerifier is missing or not 43–128 unreserved characters (RFC 7636 §4.1)")
        }
        guard let tokenEndpoint = endpoints.tokenEndpoint else {
            throw LatchkeyError(.invalidConfiguration, "\(displayName)'s discovery document has no token_endpoint, so codes cannot be redeemed")
        }
        let clientID = try chooseClientID(credential.clientID)
        var fields = [("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier), ("client_id", clientID)]
        if let redirectURI = credential.redirectURI { fields.append(("redirect_uri", redirectURI)) }
        if let secret = configuration.clientSecret { fields.append(("client_secret", secret.revealed)) }
        let answer = try calls.decode(
            OAuthTokenAnswer.self, try await calls.postForm(tokenEndpoint, fields, operation: "code_exchange"), what: "token endpoint")
        guard let idToken = answer.id_token else {
            throw LatchkeyError(.invalidProviderResponse, "\(displayName)'s token endpoint answered without an id_token; request the openid scope")
        }
        // The code was redeemed with its verifier, which proves this client asked for it; a nonce is checked when sent.
        let identity = try await endpoints.verifier.verify(idToken, expecting: IdentityTokenExpectations(rawNonce: credential.rawNonce))
        try configuration.checks(identity)
        return ProviderSignIn(identity: identity, grant: answer.refresh_token)
    }

    /// The code flow with PKCE and a nonce, at discovery's `authorization_endpoint`.
    public func browserSignIn(_ request: BrowserSignInRequest) async throws -> BrowserSignInStart? {
        let endpoints = try await resolve()
        guard let authorization = endpoints.authorizationEndpoint, endpoints.tokenEndpoint != nil else { return nil }
        return BrowserSignInStart(
            url: url(
                authorization,
                query: [
                    ("response_type", "code"), ("client_id", try chooseClientID(configuration.webClientID)), ("scope", "openid email profile"),
                    ("nonce", nonceParameter(request.rawNonce, configuration.policy.nonceMatching)),
                ] + request.codeFlowParameters))
    }

    public func browserCredential(_ answer: [String: String], _ request: BrowserSignInRequest) -> ProviderCredential {
        ProviderCredential(
            rawNonce: request.rawNonce, authorizationCode: answer["code"], codeVerifier: request.codeVerifier, redirectURI: request.callbackURL,
            clientID: configuration.webClientID)
    }

    public func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            guard let tokenEndpoint = try await resolve().tokenEndpoint else { return .valid }
            var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", clientID)]
            if let secret = configuration.clientSecret { fields.append(("client_secret", secret.revealed)) }
            let answer = try await calls.postForm(tokenEndpoint, fields, operation: "refresh_validation")
            // A provider that rotates refresh tokens (Microsoft, and OpenID Connect providers set up to) answers a new one.
            struct Refreshed: Decodable { let refresh_token: String? }
            if let new = (try? calls.decode(Refreshed.self, answer, what: "token answer"))?.refresh_token, !new.isEmpty, new != refreshToken {
                return .replaced(newRefreshToken: new)
            }
            return .valid
        } catch {
            let error = error as? LatchkeyError
            return error?.code == .invalidGrant ? .revoked : .unreachable(error?.errorCode ?? "error")
        }
    }

    public func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        let endpoints: Endpoints
        do { endpoints = try await resolve() } catch { throw error as? LatchkeyError ?? LatchkeyError(.providerUnavailable, "\(error)") }
        // Without a revocation endpoint (Microsoft) there is nothing to call; the grant is forgotten.
        guard let revocationEndpoint = endpoints.revocationEndpoint else { return }
        var fields = [("token", refreshToken), ("token_type_hint", "refresh_token"), ("client_id", clientID)]
        if configuration.revocation == .accessTokenOfGrant, let tokenEndpoint = endpoints.tokenEndpoint {
            var refresh = [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", clientID)]
            if let secret = configuration.clientSecret { refresh.append(("client_secret", secret.revealed)) }
            struct Refreshed: Decodable { let access_token: String }
            do {
                let answer = try await calls.postForm(tokenEndpoint, refresh, operation: "revocation")
                fields = [("access_token", try calls.decode(Refreshed.self, answer, what: "token answer").access_token), ("client_id", clientID)]
            } catch  where error.code == .invalidGrant {
                return  // The provider ended the grant already.
            }
        }
        if let secret = configuration.clientSecret { fields.append(("client_secret", secret.revealed)) }
        _ = try await calls.postForm(revocationEndpoint, fields, operation: "revocation")
    }

    /// Reads the discovery document and the keys, as a sign-in would; says what was found. For `latchkey doctor --live`.
    public func preflight() async throws -> String {
        let endpoints = try await resolve()
        let keys = try await endpoints.keys.refresh()
        var found = "discovery read, \(keys.keyIDs.count) signing key(s)"
        found += endpoints.tokenEndpoint == nil ? ", no token endpoint (codes cannot be redeemed)" : ", token endpoint present"
        found += endpoints.revocationEndpoint == nil ? ", no revocation endpoint" : ", revocation endpoint present"
        return found
    }

    private func chooseClientID(_ requested: String?) throws(LatchkeyError) -> String {
        let configured = configuration.policy.audiences
        if let requested {
            guard configured.contains(requested) else {
                throw LatchkeyError(.malformedRequest, "clientId \(requested.prefix(128)) is not one of \(name)'s configured client ids")
            }
            return requested
        }
        guard let first = configured.first else { throw LatchkeyError(.invalidConfiguration, "\(name) has no client ids configured") }
        return first
    }

    /// Reads the discovery document once; a failed read is retried by the next sign-in.
    func resolve() async throws -> Endpoints {
        let task = resolved.withLock { current in
            if let current { return current }
            let task = Task { try await self.discover() }
            current = task
            return task
        }
        do {
            return try await task.value
        } catch {
            resolved.withLock { if $0 == task { $0 = nil } }
            throw error
        }
    }

    private func discover() async throws -> Endpoints {
        struct Discovery: Decodable {
            let issuer: String
            let jwks_uri: String
            let authorization_endpoint: String?
            let token_endpoint: String?
            let revocation_endpoint: String?
            let id_token_signing_alg_values_supported: [String]?
        }
        let body = try await calls.send(
            OutboundRequest(url: configuration.discoveryURL, headers: [("Accept", "application/json")], timeout: configuration.requestTimeout),
            operation: "discovery")
        let document = try calls.decode(Discovery.self, body, what: "discovery document")
        var policy = configuration.policy
        if let expected = configuration.expectedIssuer {
            guard document.issuer == expected else {
                throw LatchkeyError(
                    .invalidConfiguration,
                    "the discovery document at \(configuration.discoveryURL) names the issuer \(document.issuer.prefix(200)), not \(expected) (setting \(policy.configurationKey ?? name).issuer): they must be equal exactly"
                )
            }
            let algorithms = Set(document.id_token_signing_alg_values_supported ?? ["RS256"]).intersection(Self.verifiableAlgorithms)
            guard !algorithms.isEmpty else {
                throw LatchkeyError(.invalidConfiguration, "\(displayName) signs ID tokens with none of the algorithms Latchkey verifies (RS256, ES256)")
            }
            policy.allowedAlgorithms = algorithms
        }
        let keys = JWKSCache(url: document.jwks_uri, transport: transport, timeSource: timeSource, logger: logger)
        var resolver: any VerificationKeyResolver = keys
        if configuration.clientSecretSignsIDTokens, let secret = configuration.clientSecret {
            policy.allowedAlgorithms.insert("HS256")
            resolver = KeysAndClientSecret(published: keys, secret: try await .hs256(keyID: "", secret: secret.revealed))
        }
        return Endpoints(
            verifier: IdentityTokenVerifier(policy: policy, keys: resolver, timeSource: timeSource), keys: keys,
            authorizationEndpoint: document.authorization_endpoint, tokenEndpoint: document.token_endpoint,
            revocationEndpoint: document.revocation_endpoint)
    }
}

/// A provider's published keys, and its client secret for the HS256 ID tokens that name no key.
struct KeysAndClientSecret: VerificationKeyResolver {
    let published: JWKSCache
    let secret: VerificationKey

    var sharedSecretAlgorithms: Set<String> { ["HS256"] }

    func key(forKeyID keyID: String) async throws(LatchkeyError) -> VerificationKey { try await published.key(forKeyID: keyID) }

    func sharedSecretKey(algorithm: String) async throws(LatchkeyError) -> VerificationKey {
        guard algorithm == secret.algorithm else {
            throw LatchkeyError(.malformedToken, "the header has no \"kid\", so no key can be chosen (only HS256 tokens are signed with the client secret)")
        }
        return secret
    }
}
