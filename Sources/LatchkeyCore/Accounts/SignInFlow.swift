import Foundation
import LatchkeyJOSE
import Tracing

/// What an app sends to sign in with a provider; which fields a provider needs depends on the provider.
public struct ProviderCredential: Sendable {
    /// An OpenID Connect ID token (Apple's identity token, Google's, Microsoft's, Facebook Limited Login's).
    public var idToken: String?
    /// The nonce the app generated, when the ID token carries one.
    public var rawNonce: String?
    /// An authorization code for the server to redeem.
    public var authorizationCode: String?
    /// The PKCE verifier of that code (RFC 7636).
    public var codeVerifier: String?
    /// The redirect URI the code was issued to.
    public var redirectURI: String?
    /// An access token the provider can be asked about (Facebook classic login, Dropbox).
    public var accessToken: String?
    /// Which of the provider's configured client ids the app used, when it has several (code exchange).
    public var clientID: String?

    public init(
        idToken: String? = nil, rawNonce: String? = nil, authorizationCode: String? = nil, codeVerifier: String? = nil, redirectURI: String? = nil,
        accessToken: String? = nil, clientID: String? = nil
    ) {
        self.idToken = idToken
        self.rawNonce = rawNonce
        self.authorizationCode = authorizationCode
        self.codeVerifier = codeVerifier
        self.redirectURI = redirectURI
        self.accessToken = accessToken
        self.clientID = clientID
    }
}

/// A credential the provider has vouched for.
public struct ProviderSignIn: Sendable {
    /// Who signed in. For providers without ID tokens, built from what the provider answered.
    public var identity: VerifiedIdentity
    /// The ID token that proved it, when the app sent one: it may start one session only.
    public var singleUseToken: String?
    /// A token the provider issued that is worth keeping to validate and revoke the grant later.
    public var grant: String?

    public init(identity: VerifiedIdentity, singleUseToken: String? = nil, grant: String? = nil) {
        self.identity = identity
        self.singleUseToken = singleUseToken
        self.grant = grant
    }
}

/// A person's name as a provider or an app gave it, unchecked.
public struct PersonName: Sendable, Equatable {
    public var givenName: String?
    public var familyName: String?

    public init(givenName: String?, familyName: String?) {
        self.givenName = givenName
        self.familyName = familyName
    }
}

/// The kinds of credential an app can send `POST /v1/auth/{provider}`; each provider takes some of them.
public enum CredentialKind: String, Sendable, Hashable, CaseIterable {
    /// An OpenID Connect ID token with the app's nonce (Apple's identity token among them).
    case idToken
    /// An authorization code with its PKCE verifier, for the server to redeem.
    case authorizationCode
    /// An access token the provider can be asked about.
    case accessToken
}

/// What ``SignInFlow`` needs of a provider: to check a credential an app sent, and to finish it at the provider.
public protocol CredentialVerifier: Sendable {
    /// The path segment and stored provider name: `apple`, `google`, or a generic provider's name.
    var name: String { get }
    /// Checks what the app sent.
    func verify(_ credential: ProviderCredential) async throws -> ProviderSignIn
    /// Finishes the sign-in after its token was claimed; returns the sign-in with any grant obtained.
    func complete(_ credential: ProviderCredential, _ signIn: ProviderSignIn) async throws -> ProviderSignIn
    /// Whether ``complete(_:_:)`` calls the provider for this credential. Only then is the token claimed before it runs;
    /// otherwise the claim is made with the sign-in's writes, in one store step.
    func completes(_ credential: ProviderCredential) -> Bool
}

/// A sign-in with a provider's credential, step by step: verify it, admit its account (the server's per-account rate
/// limit), claim its single-use token, finish it at the provider, and write the account and the session. The native
/// sign-in, linking and the browser flow's callback all go through it; the routes only parse and encode.
public struct SignInFlow: Sendable {
    public let signIns: SignInService
    /// Called with the provider and subject of every verified credential before anything is claimed or written; it
    /// throws to refuse the sign-in.
    public let admit: @Sendable (_ provider: String, _ subject: String) throws -> Void

    public init(signIns: SignInService, admit: @escaping @Sendable (_ provider: String, _ subject: String) throws -> Void = { _, _ in }) {
        self.signIns = signIns
        self.admit = admit
    }

    /// Signs in with `credential` and starts a session: the user is found by provider and subject, or created
    /// (`accounts` may rule either out).
    public func signIn(
        _ verifier: any CredentialVerifier, _ credential: ProviderCredential, name: PersonName?, userAgent: String?, inviteCode: String?,
        accounts: SignInPlan.Accounts = .existingOrNew
    ) async throws -> SignInService.SignInOutcome {
        try await withVerifiedCredential(verifier, credential, claimingInBody: true) { signIn, token in
            try await signIns.signIn(
                identity: signIn.identity, provider: verifier.name, givenName: name?.givenName, familyName: name?.familyName,
                providerRefreshToken: signIn.grant, userAgent: userAgent, inviteCode: inviteCode, claiming: token, accounts: accounts)
        }
    }

    /// Finds or creates the account of `credential` as ``signIn(_:_:name:userAgent:inviteCode:)`` does, without
    /// starting a session (the browser flow starts it when the app redeems its code).
    public func resolveAccount(
        _ verifier: any CredentialVerifier, _ credential: ProviderCredential, name: PersonName?, inviteCode: String?
    ) async throws -> SignInService.ResolvedAccount {
        try await withVerifiedCredential(verifier, credential, claimingInBody: true) { signIn, token in
            try await signIns.resolveAccount(
                identity: signIn.identity, provider: verifier.name, givenName: name?.givenName, familyName: name?.familyName,
                providerRefreshToken: signIn.grant, inviteCode: inviteCode, claiming: token)
        }
    }

    /// Links the identity of `credential` to the user `userID`; returns the user's identities.
    public func link(_ verifier: any CredentialVerifier, _ credential: ProviderCredential, userID: String, inviteCode: String? = nil) async throws
        -> [LinkedIdentity]
    {
        try await withVerifiedCredential(verifier, credential) { signIn, _ in
            try await signIns.link(
                identity: signIn.identity, provider: verifier.name, userID: userID, providerRefreshToken: signIn.grant, inviteCode: inviteCode)
        }
    }

    /// Verifies a credential; then `body` runs with the verified sign-in. Its single-use token is claimed first when the
    /// provider still has calls to make for the credential (redeeming Apple's code, which must not happen twice), and a
    /// failure there releases the claim so the app may retry with the same token. Otherwise, with `claimingInBody`,
    /// `body` gets the token to claim itself, in the store step that writes the sign-in.
    func withVerifiedCredential<T: Sendable>(
        _ verifier: any CredentialVerifier, _ credential: ProviderCredential, claimingInBody: Bool = false,
        _ body: (_ signIn: ProviderSignIn, _ tokenToClaim: String?) async throws -> T
    ) async throws -> T {
        let name = verifier.name
        // Spans of a sign-in's steps: the token's verification, the provider call that completes it (a code exchange),
        // and (in SignInService) the store transaction.
        let signIn = try await withSpan("sign-in token verification") { span in
            span.attributes["latchkey.provider"] = name
            return try await verifier.verify(credential)
        }
        try admit(verifier.name, signIn.identity.subject)
        if verifier.name == "apple", let transfers = signIns.transfers { try await transfers.beforeSignIn(signIn.identity) }
        func complete() async throws -> ProviderSignIn {
            guard verifier.completes(credential) else { return try await verifier.complete(credential, signIn) }
            return try await withSpan("sign-in provider call") { span in
                span.attributes["latchkey.provider"] = name
                return try await verifier.complete(credential, signIn)
            }
        }
        if claimingInBody, !verifier.completes(credential) {
            return try await body(try await complete(), signIn.singleUseToken)
        }
        if let token = signIn.singleUseToken { try await signIns.claimSignIn(token, provider: verifier.name, identity: signIn.identity) }
        do {
            return try await body(try await complete(), nil)
        } catch {
            if let token = signIn.singleUseToken { await signIns.releaseSignIn(token, provider: verifier.name, identity: signIn.identity) }
            throw error
        }
    }
}
