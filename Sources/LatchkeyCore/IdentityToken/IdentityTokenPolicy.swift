public import Foundation
public import LatchkeyJOSE

/// What an identity provider's tokens must look like to be accepted.
///
/// ```swift
/// let policy = IdentityTokenPolicy.apple(clientIDs: ["com.example.app", "com.example.web"])
/// ```
public struct IdentityTokenPolicy: Sendable {
    /// Shown in error reasons, such as `Apple`.
    public var providerName: String
    /// Exact `iss` values accepted. `{tenantid}` in an issuer is replaced by the token's `tid` claim (Microsoft).
    public var issuers: Set<String>
    /// Client ids the token may be issued to (`aud`): for Apple, the bundle id and the Services ID.
    public var audiences: [String]
    /// JWS algorithms accepted; RS256 for every major provider's ID tokens.
    public var allowedAlgorithms: Set<String>
    /// Clock skew tolerated on `exp`, `nbf` and `iat`.
    public var leeway: TimeInterval
    /// How a nonce the app sends is compared with the token's `nonce` claim.
    public var nonceMatching: NonceMatching
    /// Added to an audience error, to say where client ids come from for this provider.
    public var audienceHint: String?
    /// Largest token accepted, in bytes.
    public var maximumTokenSize: Int
    /// Sign-ins must carry a nonce: a token without a `nonce` claim is refused with `nonce_required`.
    /// Web sign-ins that cannot carry one turn this off explicitly.
    public var requireNonce: Bool
    /// Where this provider is configured (such as `apple`), so error reasons can name the setting to change.
    public var configurationKey: String?

    public init(
        providerName: String,
        issuers: Set<String>,
        audiences: [String],
        allowedAlgorithms: Set<String> = ["RS256"],
        leeway: TimeInterval = 60,
        nonceMatching: NonceMatching = .hashedOrVerbatim,
        audienceHint: String? = nil,
        maximumTokenSize: Int = CompactJWS.defaultMaximumSize,
        requireNonce: Bool = false,
        configurationKey: String? = nil
    ) {
        self.providerName = providerName
        self.issuers = issuers
        self.audiences = audiences
        self.allowedAlgorithms = allowedAlgorithms
        self.leeway = leeway
        self.nonceMatching = nonceMatching
        self.audienceHint = audienceHint
        self.maximumTokenSize = maximumTokenSize
        self.requireNonce = requireNonce
        self.configurationKey = configurationKey
    }

    /// Apple's issuers are `https://appleid.apple.com` and `https://account.apple.com`.
    public static let appleIssuers: Set<String> = ["https://appleid.apple.com", "https://account.apple.com"]

    /// Sign in with Apple: RS256, Apple's issuers, your bundle ids and Services IDs.
    public static func apple(clientIDs: [String], leeway: TimeInterval = 60) -> IdentityTokenPolicy {
        IdentityTokenPolicy(
            providerName: "Apple",
            issuers: appleIssuers,
            audiences: clientIDs,
            leeway: leeway,
            audienceHint: "native sign-ins carry your app's bundle id and web sign-ins your Services ID; add the missing one to apple.clientIDs"
        )
    }

    /// Google: RS256, `accounts.google.com` with or without the scheme.
    public static func google(clientIDs: [String], leeway: TimeInterval = 60) -> IdentityTokenPolicy {
        IdentityTokenPolicy(
            providerName: "Google",
            issuers: ["https://accounts.google.com", "accounts.google.com"],
            audiences: clientIDs,
            leeway: leeway,
            audienceHint: "tokens carry the OAuth client id of the app that asked; add it to google.clientIDs"
        )
    }

    /// Microsoft identity platform v2.0; the issuer is validated against the token's tenant (`tid`).
    public static func microsoft(clientIDs: [String], leeway: TimeInterval = 60) -> IdentityTokenPolicy {
        IdentityTokenPolicy(
            providerName: "Microsoft",
            issuers: ["https://login.microsoftonline.com/{tenantid}/v2.0"],
            audiences: clientIDs,
            leeway: leeway,
            audienceHint: "tokens carry your app registration's application (client) id"
        )
    }
}

/// How the raw nonce an app sends to its server relates to the token's `nonce` claim.
public enum NonceMatching: String, Sendable, CaseIterable {
    /// The claim is lowercase hex SHA-256 of the raw nonce (native iOS apps), or the raw nonce itself (web); the
    /// library's default. Weaker than ``hashed``: whoever holds a token can send its own claim as the nonce, so a
    /// stolen token alone passes (the server uses ``hashed`` unless configured otherwise).
    case hashedOrVerbatim = "hashed_or_verbatim"
    /// The claim must be lowercase hex SHA-256 of the raw nonce.
    case hashed
    /// The claim must equal the raw nonce.
    case verbatim
}

/// What the caller knows beyond the token, each checked when present.
public struct IdentityTokenExpectations: Sendable {
    /// The raw nonce the app generated for this sign-in.
    public var rawNonce: String?
    /// The authorization code delivered with the token; checked against `c_hash`.
    public var authorizationCode: String?
    /// The access token delivered with the token; checked against `at_hash`.
    public var accessToken: String?
    /// The token is being exchanged for a session, so it must prove the app holds its nonce: a token that
    /// carries a nonce is refused without ``rawNonce`` (a stolen token alone is not a sign-in), and with
    /// ``IdentityTokenPolicy/requireNonce`` a token without a nonce is refused too.
    public var isSignIn: Bool

    public init(rawNonce: String? = nil, authorizationCode: String? = nil, accessToken: String? = nil, isSignIn: Bool = false) {
        self.rawNonce = rawNonce
        self.authorizationCode = authorizationCode
        self.accessToken = accessToken
        self.isSignIn = isSignIn
    }

    /// What a sign-in endpoint expects: nonce proof, and the code or access token checked when sent.
    public static func signIn(rawNonce: String?, authorizationCode: String? = nil, accessToken: String? = nil) -> IdentityTokenExpectations {
        IdentityTokenExpectations(rawNonce: rawNonce, authorizationCode: authorizationCode, accessToken: accessToken, isSignIn: true)
    }
}
