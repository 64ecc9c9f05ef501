import Crypto
public import Foundation
public import LatchkeyJOSE
public import LatchkeyModels
import Synchronization

/// The keys Latchkey signs its access tokens with: the active ES256 key, plus retiring ones still published.
///
/// A fleet must publish and accept a new key before any instance signs with it, so a key signs only from
/// `propagationDelay` after it was made (by then every instance has reloaded the keys); until then the key
/// before it keeps signing. A lone first key signs at once.
public final class AccessTokenKeys: Sendable {
    struct Signer: Sendable {
        var key: P256.Signing.PrivateKey
        var signsFrom: Date
        /// The access tokens' encoded JOSE header under this key (its `kid` included), the same for every token.
        var header: String
    }

    struct Snapshot: Sendable {
        /// Oldest first.
        var signers: [Signer]
        var verification: VerificationKeySet
        var published: [SigningKeyRecord]

        /// The newest key whose propagation delay has passed, else the oldest one (a lone first key).
        func signer(at now: Date) -> Signer? {
            signers.last { $0.signsFrom <= now } ?? signers.first
        }
    }

    private let snapshot: Mutex<Snapshot?> = Mutex(nil)
    /// How long after its creation a key starts signing.
    public let propagationDelay: TimeInterval

    public init(propagationDelay: TimeInterval = 0) {
        self.propagationDelay = propagationDelay
    }

    /// Loads the active and retiring keys from their stored records.
    public func load(_ records: [SigningKeyRecord], box: SecretBox) async throws(LatchkeyError) {
        guard let active = records.last(where: { $0.state == .active }) else {
            throw LatchkeyError(.invalidConfiguration, "no active signing key; run `latchkey keys rotate` or start the server once")
        }
        var signers: [Signer] = []
        var published: [SigningKeyRecord] = []
        var keys: [VerificationKey] = []
        for record in records.sorted(by: { $0.createdAt < $1.createdAt }) where record.state != .retired {
            // An unreadable retiring key only means its tokens stop verifying early; it must not stop the server.
            guard let key = try? await VerificationKey.es256(keyID: record.keyID, publicKeyPEM: record.publicKeyPEM) else {
                if record.keyID == active.keyID { throw LatchkeyError(.invalidKey, "the active signing key \(record.keyID) has an unreadable public key") }
                continue
            }
            keys.append(key)
            published.append(record)
            let header = try JWSSigner.es256Header(keyID: record.keyID, type: AccessTokenService.tokenType)
            do {
                let privateKey = try P256.Signing.PrivateKey(pemRepresentation: try box.open(record.sealedPrivateKey))
                signers.append(Signer(key: privateKey, signsFrom: record.createdAt.addingTimeInterval(propagationDelay), header: header))
            } catch {
                if record.keyID == active.keyID {
                    throw LatchkeyError(.invalidKey, "the active signing key cannot be opened: the encryption key changed")
                }
            }
        }
        let loaded = Snapshot(signers: signers, verification: VerificationKeySet(keys), published: published)
        snapshot.withLock { $0 = loaded }
    }

    var current: Snapshot? { snapshot.withLock { $0 } }

    /// The public keys as a JWKS document (`/.well-known/jwks.json`).
    public var jwks: [String: [[String: String]]] {
        let records = current?.published ?? []
        return [
            "keys": records.compactMap { record in
                guard let key = try? P256.Signing.PublicKey(pemRepresentation: record.publicKeyPEM) else { return nil }
                let raw = Array(key.rawRepresentation)
                return [
                    "kty": "EC", "crv": "P-256", "kid": record.keyID, "use": "sig", "alg": "ES256",
                    "x": base64URL(Array(raw.prefix(32))), "y": base64URL(Array(raw.suffix(32))),
                ]
            }
        ]
    }

    /// Makes a new signing key record, its private half sealed.
    public static func generateRecord(box: SecretBox, now: Date) throws(LatchkeyError) -> SigningKeyRecord {
        let key = P256.Signing.PrivateKey()
        let digest = SHA256.hash(data: Array(key.publicKey.rawRepresentation))
        let keyID = base64URL(Array(Array(digest).prefix(12)))
        return SigningKeyRecord(
            keyID: keyID, algorithm: "ES256", sealedPrivateKey: try box.seal(key.pemRepresentation), publicKeyPEM: key.publicKey.pemRepresentation,
            state: .active, createdAt: now)
    }
}

extension AccessTokenKeys: VerificationKeyResolver {
    public func key(forKeyID keyID: String) async throws(LatchkeyError) -> VerificationKey {
        guard let verification = current?.verification else { throw LatchkeyError(.keysUnavailable, "signing keys are not loaded") }
        guard let key = verification[keyID] else { throw LatchkeyError(.unknownKeyID, "the token was signed with a key this server does not publish") }
        return key
    }
}

/// Issues and verifies Latchkey's access tokens: JWTs per RFC 9068 (`typ: at+jwt`), ES256.
///
/// Any backend can verify them without a database through `/.well-known/jwks.json`.
public struct AccessTokenService: Sendable {
    public let issuer: String
    public let audience: String
    public let lifetime: TimeInterval
    public let keys: AccessTokenKeys
    public let timeSource: TimeSource
    /// Clock skew tolerated when verifying.
    public let leeway: TimeInterval
    private let check: AccessTokenCheck

    public init(
        issuer: String, audience: String, lifetime: TimeInterval = 600, keys: AccessTokenKeys, timeSource: TimeSource = .system, leeway: TimeInterval = 30
    ) {
        self.issuer = issuer
        self.audience = audience
        self.lifetime = lifetime
        self.keys = keys
        self.timeSource = timeSource
        self.leeway = leeway
        self.check = AccessTokenCheck(issuer: issuer, audience: audience, keys: keys, leeway: leeway, timeSource: timeSource)
    }

    /// The `typ` of every access token's header (RFC 9068).
    static let tokenType = "at+jwt"

    /// Declared in key order, the order they are written in, which spares the encoder a sort.
    struct Claims: Encodable {
        let aud: String
        let attested: Bool?
        let auth_time: Int?
        let client_id: String
        let cnf: Confirmation?
        let exp: Int
        let iat: Int
        let idp: String?
        let is_anonymous: Bool?
        let iss: String
        let jti: String
        let sid: String
        let sub: String
    }

    /// ``Claims`` and the user's own claims, whose names never collide with them (``UserClaims/reserved``).
    struct ClaimsWithUserClaims: Encodable {
        let standard: Claims
        let user: [String: JSONValue]

        func encode(to encoder: any Encoder) throws {
            try standard.encode(to: encoder)
            var container = encoder.container(keyedBy: UserClaimKey.self)
            for name in user.keys.sorted() where !UserClaims.reserved.contains(name) {
                try container.encode(user[name], forKey: UserClaimKey(stringValue: name))
            }
        }
    }

    /// RFC 7800's confirmation claim, as RFC 9449 §6.1 uses it: the thumbprint of the DPoP key the token is bound to.
    struct Confirmation: Encodable {
        let jkt: String
    }

    struct UserClaimKey: CodingKey {
        let stringValue: String
        init(stringValue: String) { self.stringValue = stringValue }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }

    /// Signs a new access token for `session`: its user, client, start (`auth_time`), provider (`idp`), DPoP key
    /// (`cnf.jkt`), attestation, and the user's claims as read with it; returns it with its lifetime in seconds.
    public func issue(for session: SessionFamily) throws(LatchkeyError) -> (token: String, expiresIn: Int) {
        try issue(
            userID: session.userID, sessionID: session.id, clientID: session.clientID, authTime: session.createdAt, idp: session.idp,
            userClaims: session.userClaims, anonymous: session.userIsAnonymous, dpopThumbprint: session.dpopThumbprint, attested: session.attested)
    }

    /// Signs a new access token; returns it with its lifetime in seconds.
    public func issue(
        userID: String, sessionID: String, clientID: String, authTime: Date? = nil, idp: String? = nil, userClaims: [String: JSONValue]? = nil,
        anonymous: Bool = false, dpopThumbprint: String? = nil, attested: Bool = false
    ) throws(LatchkeyError) -> (token: String, expiresIn: Int) {
        let instant = timeSource.now
        guard let signer = keys.current?.signer(at: instant) else { throw LatchkeyError(.keysUnavailable, "signing keys are not loaded") }
        let now = Int(instant.timeIntervalSince1970)
        let claims = Claims(
            aud: audience, attested: attested ? true : nil, auth_time: authTime.map { Int($0.timeIntervalSince1970) }, client_id: clientID,
            cnf: dpopThumbprint.map(Confirmation.init(jkt:)), exp: now + Int(lifetime), iat: now, idp: idp,
            is_anonymous: anonymous ? true : nil, iss: issuer, jti: newIdentifier(), sid: sessionID, sub: userID)
        guard let userClaims, !userClaims.isEmpty else { return (try JWSSigner.es256(claims, header: signer.header, key: signer.key), Int(lifetime)) }
        return (try JWSSigner.es256(ClaimsWithUserClaims(standard: claims, user: userClaims), header: signer.header, key: signer.key), Int(lifetime))
    }

    /// Verifies a bearer token; every failure is `invalid_token` with the reason, except `unknown_key_id` for a
    /// key that is not loaded (another instance may have rotated keys: reload them and verify again).
    public func verify(_ token: String) async throws(LatchkeyError) -> VerifiedAccessToken {
        try await check.verify(token).token
    }
}
