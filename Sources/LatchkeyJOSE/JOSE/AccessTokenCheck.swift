public import Foundation

/// A verified Latchkey access token.
public struct VerifiedAccessToken: Sendable, Equatable {
    public var userID: String
    public var sessionID: String
    public var clientID: String
    public var tokenID: String
    public var issuedAt: Date
    public var expiresAt: Date
    /// When the session began (`auth_time`); nil in tokens minted before it was sent.
    public var authTime: Date?
    /// The provider of the sign-in that began the session (`idp`).
    public var idp: String?
    /// The thumbprint of the DPoP key the token is bound to (`cnf.jkt`, RFC 9449 §6.1): it is sent with a proof by
    /// that key, never as a bearer token. Nil for a bearer token.
    public var boundKeyThumbprint: String? = nil
    /// Whether App Attest vouched for the sign-in that began the session (`attested`).
    public var attested: Bool = false
}

/// Checks a Latchkey access token: its signature with `keys` (ES256 only), `typ` `at+jwt`, `iss`, `aud` and `exp` with
/// leeway. The server checks its own tokens with it, and so do backends that verify them through the JWKS.
public struct AccessTokenCheck: Sendable {
    public let issuer: String
    public let audience: String
    public let leeway: TimeInterval
    public let timeSource: TimeSource
    private let envelope: SignedTokenVerifier

    public init(issuer: String, audience: String, keys: any VerificationKeyResolver, leeway: TimeInterval = 30, timeSource: TimeSource = .system) {
        self.issuer = issuer
        self.audience = audience
        self.leeway = leeway
        self.timeSource = timeSource
        // Room for 4 KiB of the user's claims, base64url-encoded, beside Latchkey's own.
        self.envelope = SignedTokenVerifier(allowedAlgorithms: ["ES256"], keys: keys, maximumTokenSize: 8192)
    }

    /// The verified token and its payload; every failure is `invalid_token` with the reason, except `unknown_key_id`
    /// for a key `keys` does not have.
    public func verify(_ token: String) async throws(LatchkeyError) -> (token: VerifiedAccessToken, payload: [UInt8]) {
        let jws: CompactJWS
        do {
            jws = try await envelope.verify(token)
        } catch {
            throw error.code == .invalidToken || error.code == .unknownKeyID ? error : LatchkeyError(.invalidToken, error.reason)
        }
        let typ = jws.header.typ?.lowercased()
        guard typ == "at+jwt" || typ == "application/at+jwt" else {
            throw LatchkeyError(.invalidToken, "the token's typ is not at+jwt; ID tokens and other JWTs are not access tokens")
        }
        let claims: (sub: String?, aud: [String]?, iss: String?, exp: Double?, iat: Double?, jti: String?, clientID: String?, sid: String?)
        let extra: (authTime: Double?, idp: String?, jkt: String?, attested: Bool?)
        do {
            let object = try LeanJSONObject(parsing: jws.payload)
            claims = (
                try object.string("sub"), try object.stringOrStrings("aud"), try object.string("iss"), try object.number("exp"),
                try object.number("iat"), try object.string("jti"), try object.string("client_id"), try object.string("sid")
            )
            extra = (
                try object.number("auth_time"), try object.string("idp"), try object.decode(Confirmation.self, "cnf")?.jkt, try object.lenientBool("attested")
            )
        } catch {
            throw LatchkeyError(.invalidToken, "the token's claims are malformed")
        }
        guard let sub = claims.sub, let exp = claims.exp, let iat = claims.iat, let sid = claims.sid, let clientID = claims.clientID, let jti = claims.jti
        else {
            throw LatchkeyError(.invalidToken, "the token lacks a required claim (sub, exp, iat, jti, client_id, sid)")
        }
        guard claims.iss == issuer else { throw LatchkeyError(.invalidToken, "the token was issued by another issuer") }
        guard claims.aud?.contains(audience) == true else { throw LatchkeyError(.invalidToken, "the token is for another audience") }
        let now = timeSource.now.timeIntervalSince1970
        guard now <= exp + leeway else { throw LatchkeyError(.invalidToken, "the access token expired; refresh it") }
        let verified = VerifiedAccessToken(
            userID: sub, sessionID: sid, clientID: clientID, tokenID: jti, issuedAt: Date(timeIntervalSince1970: iat),
            expiresAt: Date(timeIntervalSince1970: exp), authTime: extra.authTime.map(Date.init(timeIntervalSince1970:)), idp: extra.idp,
            boundKeyThumbprint: extra.jkt, attested: extra.attested == true)
        return (verified, jws.payload)
    }

    private struct Confirmation: Decodable {
        var jkt: String?
    }
}
