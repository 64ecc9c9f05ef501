import Crypto
public import Foundation
import JWTKit
import LatchkeyCore
public import LatchkeyJOSE

/// The credentials of a Sign in with Apple private key (the `.p8` file from the developer portal).
public struct AppleSigningCredentials: Sendable {
    /// Your 10-character Team ID, the client secret's `iss`.
    public let teamID: String
    /// The 10-character id of the Sign in with Apple key, the client secret's `kid`.
    public let keyID: String
    let privateKey: P256.Signing.PrivateKey

    /// Checks every field and parses the key, naming the field that is wrong.
    public init(teamID: String, keyID: String, privateKeyPEM: String) throws(LatchkeyError) {
        try Self.checkTeamID(teamID)
        try Self.checkKeyID(keyID)
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = try Self.parseKey(privateKeyPEM)
    }

    /// The public half, as Apple's servers hold it.
    public var publicKeyPEM: String { privateKey.publicKey.pemRepresentation }

    /// Checks a Team ID: 10 upper-case letters and digits.
    public static func checkTeamID(_ teamID: String) throws(LatchkeyError) {
        try checkIdentifier(teamID, field: "team id", example: "the Team ID shown under Membership, e.g. A1B2C3D4E5")
    }

    /// Checks a Key ID: 10 upper-case letters and digits.
    public static func checkKeyID(_ keyID: String) throws(LatchkeyError) {
        try checkIdentifier(keyID, field: "key id", example: "the Key ID shown next to the Sign in with Apple key, e.g. ABC123DEFG")
    }

    /// Whether `value` has the shape of a Team ID or Key ID: 10 upper-case ASCII letters and digits.
    static func isIdentifier(_ value: String) -> Bool {
        value.utf8.count == 10 && value.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) }
    }

    static func checkIdentifier(_ value: String, field: String, example: String) throws(LatchkeyError) {
        guard isIdentifier(value) else {
            throw LatchkeyError(
                .invalidConfiguration,
                "\(field) \"\(value.prefix(40))\" is not 10 upper-case letters and digits; use \(example)"
            )
        }
    }

    static func parseKey(_ pem: String) throws(LatchkeyError) -> P256.Signing.PrivateKey {
        let trimmed = pem.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.hasPrefix("-----BEGIN") else {
            throw LatchkeyError(.invalidKey, "the private key is not PEM; pass the .p8 file's contents, starting with -----BEGIN PRIVATE KEY-----")
        }
        if let key = try? P256.Signing.PrivateKey(pemRepresentation: trimmed) { return key }
        if (try? P384.Signing.PrivateKey(pemRepresentation: trimmed)) != nil {
            throw LatchkeyError(
                .invalidKey, "the private key is a P-384 key; Sign in with Apple keys are P-256 (ES256): download the .p8 for the Sign in with Apple key")
        }
        if (try? P521.Signing.PrivateKey(pemRepresentation: trimmed)) != nil {
            throw LatchkeyError(.invalidKey, "the private key is a P-521 key; Sign in with Apple keys are P-256 (ES256)")
        }
        if trimmed.contains("PUBLIC KEY") {
            throw LatchkeyError(.invalidKey, "this is a public key; the client secret needs the private .p8 key")
        }
        throw LatchkeyError(.invalidKey, "the private key is not a PKCS#8 P-256 key; use the .p8 file exactly as downloaded from Apple")
    }
}

/// Builds and caches the ES256 client secret Apple's REST endpoints require (`client_secret`).
///
/// One secret is signed per client id (its `sub` must equal the `client_id` sent with it) and reused
/// until it nears expiry; concurrent callers share one signature.
///
/// ```swift
/// let secrets = try AppleClientSecretProvider(credentials: credentials, clientID: "com.example.app")
/// let secret = try await secrets.secret()
/// ```
public final class AppleClientSecretProvider: Sendable {
    /// Apple refuses secrets that expire more than 15,777,000 seconds (about six months) after its own clock.
    public static let maximumLifetime: TimeInterval = 15_777_000
    /// Apple's client-secret audience.
    public static let audience = "https://appleid.apple.com"

    public let credentials: AppleSigningCredentials
    public let clientID: String
    public let lifetime: TimeInterval
    private let timeSource: TimeSource
    private let cache: SingleFlightCache<String>

    /// - Parameter lifetime: how long each secret lives; 1 hour by default, at most ``maximumLifetime``.
    public init(credentials: AppleSigningCredentials, clientID: String, lifetime: TimeInterval = 3600, timeSource: TimeSource = .system) throws(LatchkeyError) {
        try Self.checkLifetime(lifetime)
        guard !clientID.isEmpty else {
            throw LatchkeyError(.invalidConfiguration, "client id is empty; use your app's bundle id (native sign-ins) or your Services ID (web)")
        }
        self.credentials = credentials
        self.clientID = clientID
        self.lifetime = lifetime
        self.timeSource = timeSource
        self.cache = SingleFlightCache()
    }

    /// A valid secret, signed anew only when the cached one has less than a fifth of its lifetime left.
    public func secret() async throws(LatchkeyError) -> String {
        let now = timeSource.now
        return try await cache.value(now: now) { () throws(LatchkeyError) -> (String, Date) in
            let secret = try Self.makeSecret(credentials: self.credentials, clientID: self.clientID, issuedAt: now, lifetime: self.lifetime)
            return (secret, now.addingTimeInterval(self.lifetime * 0.8))
        }
    }

    /// Signs one client secret.
    public static func makeSecret(credentials: AppleSigningCredentials, clientID: String, issuedAt: Date, lifetime: TimeInterval) throws(LatchkeyError)
        -> String
    {
        try checkLifetime(lifetime)
        guard !clientID.isEmpty else {
            throw LatchkeyError(.invalidConfiguration, "client id is empty; use your app's bundle id (native sign-ins) or your Services ID (web)")
        }
        let iat = Int(issuedAt.timeIntervalSince1970)
        let claims = ClientSecretClaims(iss: credentials.teamID, iat: iat, exp: iat + Int(lifetime), aud: audience, sub: clientID)
        return try JWSSigner.es256(claims, keyID: credentials.keyID, key: credentials.privateKey)
    }

    static func checkLifetime(_ lifetime: TimeInterval) throws(LatchkeyError) {
        guard lifetime > 0, lifetime <= maximumLifetime else {
            throw LatchkeyError(
                .invalidConfiguration,
                "client secret lifetime \(Int(lifetime)) s is outside 1…15777000 s; Apple answers invalid_client to secrets that expire more than six months ahead of its clock"
            )
        }
    }

    struct ClientSecretClaims: Encodable {
        let iss: String
        let iat: Int
        let exp: Int
        let aud: String
        let sub: String
    }
}
