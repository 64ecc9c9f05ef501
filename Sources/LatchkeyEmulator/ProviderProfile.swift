import Foundation
import Hummingbird

/// One provider's stand-in, in one file with its routes: its name for people, how its apps register, the shape of its
/// codes and tokens, what its app SDK hands an app, its subjects, what its ID tokens and token answers carry beyond the
/// shared ones, and how it refreshes. ``ProviderProfiles/all`` registers them; the shared code, PKCE, refresh and
/// revocation machinery of ``EmulatorState`` reads them. Apple's stand-in, with its teams, client secrets and
/// notifications, is the emulator's own and has a profile only for its name and routes.
struct ProviderProfile: Sendable {
    typealias Provider = CodeRecord.Provider
    typealias TokenStyle = EmulatorState.TokenStyle

    /// What a sign-in minted by the control API hands the app, as the provider's app SDK would.
    enum AppSignIn: Sendable {
        /// Apple's sign-ins are minted by its own endpoint.
        case apple
        /// An ID token and an authorization code (Google, Microsoft, OpenID Connect providers).
        case idTokenAndCode
        /// A code only (plain OAuth 2.0: GitHub, Discord, X).
        case code
        /// A code and an access token (Dropbox).
        case codeAndAccessToken
        /// A user access token and a Limited Login ID token (Facebook).
        case accessTokenAndIDToken
    }

    /// What a refresh answers.
    enum Refresh: Sendable {
        /// The same refresh token, which goes on working.
        case keeps
        /// A new refresh token each time; the old one goes on working too (Microsoft).
        case newAndOldKept
        /// A new refresh token each time; the old one stops working.
        case rotates
    }

    let provider: Provider
    let displayName: String
    /// Adds the provider's endpoints.
    let addRoutes: @Sendable (Emulator, Router<BasicRequestContext>) -> Void
    /// The user's subject here.
    var subject: @Sendable (Identifiers.ProviderSubjects) -> String = { _ in "" }
    /// Every subject that finds the user here (Microsoft's `sub` and `oid`); the subject alone when nil.
    var lookupSubjects: (@Sendable (Identifiers.ProviderSubjects) -> [String])?
    /// Registers a client id (``EmulatorConfiguration/addClientEverywhere(_:redirectURIs:)``): by default a
    /// confidential client whose secret is the id and `-secret`.
    var register: @Sendable (inout EmulatorConfiguration, Provider, _ clientID: String, _ redirectURIs: [String]) -> Void = {
        configuration, provider, clientID, uris in
        configuration.setClient(.init(clientID: clientID, clientSecret: clientID + "-secret", redirectURIs: uris), for: provider)
    }
    /// The registered client `clientID`; nil when there is none.
    var client: @Sendable (EmulatorConfiguration, Provider, _ clientID: String) -> EmulatorConfiguration.OAuthClient? = {
        configuration, provider, clientID in configuration.providerClients[provider]?.first { $0.clientID == clientID }
    }
    var tokenStyle: @Sendable (_ accessTokenLifetime: TimeInterval) -> TokenStyle = { .openID(accessTokenLifetime: $0) }
    var makeCode: @Sendable (TokenStyle) -> String = { $0.codePrefix + Identifiers.randomAlphanumeric(64, alphabet: Identifiers.base64URLAlphabet) }
    var accessTokenLength = 100
    /// The status of an unknown client's refusal at the token endpoint.
    var invalidClientStatus = 401
    /// The error of a code redeemed with another redirect URI than it was issued for.
    var redirectMismatchError = "invalid_grant"
    var refresh: @Sendable (EmulatorConfiguration) -> Refresh = { _ in .keeps }
    var appSignIn = AppSignIn.idTokenAndCode
    /// The scopes a minted sign-in has when the request names none.
    var defaultScopes = ["openid", "email", "profile"]
    /// Whether the app's PKCE challenge may be `plain` (Google, Microsoft); S256 always may.
    var allowsPlainChallenge = false
    /// Whether the provider's issuer is its own path (`{base}/gitlab`) rather than the generic `{base}/oidc`.
    var ownIssuerPath = false
    /// Whether the authorization answer repeats the granted `scope`.
    var authorizationAnswerHasScope = true
    /// Whether a GitHub-style authorization request without `response_type` is taken.
    var responseTypeOptional = false
    /// Whether the token endpoint's answer holds an ID token.
    var tokenAnswerHasIDToken = true
    /// Members the token endpoint's answer adds (Dropbox's account ids, Microsoft's `ext_expires_in`).
    var tokenAnswerExtras: @Sendable (inout [String: Claim], UserRecord, TokenStyle) -> Void = { _, _, _ in }
    /// The ID token's `iss`: the issuer as the caller addressed the emulator unless the provider has its own.
    var idTokenIssuer: @Sendable (EmulatorConfiguration, UserRecord, _ addressed: String) -> String = { _, _, addressed in addressed }
    /// The ID token's lifetime; the configuration's identity-token lifetime when nil.
    var idTokenLifetime: Int?
    var idTokenHasEmailVerified = true
    /// Claims the provider's ID tokens add (Google's `azp` and `hd`, Microsoft's `tid`).
    var idTokenExtras: @Sendable (inout ClaimSet, UserRecord, _ clientID: String, _ issuedAt: Int) -> Void = { _, _, _, _ in }
    /// Signs an ID token its own way (LINE); nil signs RS256 with the provider's key ring.
    var signIDToken: (@Sendable (EmulatorState, ClaimSet, _ clientID: String, _ webLogin: Bool) async throws(ProviderOAuthError) -> String)?
    /// How its RS256 keys are named; nil for a provider without a key ring.
    var keyID: (@Sendable () -> String)?
    /// The `alg` and extra members its JWKS puts on each key (Microsoft's have no `alg` and a per-key `issuer`).
    var jwksAlgorithm: String? = "RS256"
    var jwksExtras: [String: String] = [:]

    init(provider: Provider, displayName: String, addRoutes: @escaping @Sendable (Emulator, Router<BasicRequestContext>) -> Void) {
        self.provider = provider
        self.displayName = displayName
        self.addRoutes = addRoutes
    }
}

/// The stand-ins the emulator serves, in the order their routes are added: one line per provider.
enum ProviderProfiles {
    static let all: [ProviderProfile] = [.apple, .google, .microsoft, .facebook, .dropbox, .github, .discord, .x, .gitlab, .slack, .line, .oidc]

    private static let byName = Dictionary(uniqueKeysWithValues: all.map { ($0.provider.name, $0) })

    /// The stand-in named `name` (`gitlab`), if the emulator has one.
    static func named(_ name: String) -> ProviderProfile? { byName[name] }

    static subscript(_ provider: CodeRecord.Provider) -> ProviderProfile { byName[provider.name]! }
}

extension CodeRecord.Provider {
    var profile: ProviderProfile { ProviderProfiles[self] }
}

/// A provider the emulator stands in for, as tests and tools see it: found by the name the server's provider module
/// has (`gitlab`), with what a sign-in minted by the control API (`POST /emulator/authorizations`) hands the app, as
/// that provider's app SDK would.
public struct EmulatedProvider: Sendable, Hashable, CustomStringConvertible {
    /// What a provider's app SDK hands an app after a sign-in.
    public enum AppCredential: String, Sendable, Hashable, CaseIterable {
        /// An ID token (`idToken`; Apple's `identityToken`), with the nonce the app asked for.
        case idToken
        /// An authorization code (`authorizationCode`), bound to the app's PKCE challenge when it sent one.
        case authorizationCode
        /// An access token (`accessToken`) the provider answers questions about.
        case accessToken
    }

    /// The stand-in's path under the emulator's base URL and the control API's `provider`.
    public let name: String
    public let displayName: String
    /// What its minted sign-ins hand the app.
    public let appCredentials: Set<AppCredential>

    init(_ profile: ProviderProfile) {
        name = profile.provider.name
        displayName = profile.displayName
        appCredentials =
            switch profile.appSignIn {
            case .apple, .idTokenAndCode: [.idToken, .authorizationCode]
            case .code: [.authorizationCode]
            case .codeAndAccessToken: [.authorizationCode, .accessToken]
            case .accessTokenAndIDToken: [.accessToken, .idToken]
            }
    }

    /// Every stand-in the emulator serves.
    public static let all = ProviderProfiles.all.map(EmulatedProvider.init)

    /// The stand-in for the provider named `name`, if the emulator has one.
    public static func named(_ name: String) -> EmulatedProvider? { ProviderProfiles.named(name).map(EmulatedProvider.init) }

    public var description: String { name }
}
