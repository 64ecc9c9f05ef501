import Crypto
import ExtrasBase64
public import Foundation
public import LatchkeyJOSE
import LatchkeyModels

/// Verifies OpenID Connect identity tokens: signature against the provider's keys, then `iss`, `aud`,
/// `exp`/`nbf`/`iat` with leeway, the nonce, and `c_hash`/`at_hash` when the caller has the code or access token.
///
/// ```swift
/// let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.example.app"]), keys: appleKeys)
/// let identity = try await verifier.verify(token, expecting: .init(rawNonce: nonce))
/// print(identity.subject)
/// ```
public struct IdentityTokenVerifier: Sendable {
    public let policy: IdentityTokenPolicy
    public let timeSource: TimeSource
    private let envelope: SignedTokenVerifier

    public init(policy: IdentityTokenPolicy, keys: any VerificationKeyResolver, timeSource: TimeSource = .system) {
        self.policy = policy
        self.timeSource = timeSource
        self.envelope = SignedTokenVerifier(
            allowedAlgorithms: policy.allowedAlgorithms,
            keys: keys,
            maximumTokenSize: policy.maximumTokenSize
        )
    }

    /// Verifies `token` as of `now` (the time source's time when nil).
    public func verify(
        _ token: String,
        expecting expectations: IdentityTokenExpectations = .init(),
        now: Date? = nil
    ) async throws(LatchkeyError) -> VerifiedIdentity {
        let jws = try await envelope.verify(token)
        let claims = try IDTokenClaims.decode(jws.payload)
        return try check(claims, algorithm: jws.header.alg, expectations: expectations, now: now ?? timeSource.now)
    }

    func check(
        _ claims: IDTokenClaims,
        algorithm: String,
        expectations: IdentityTokenExpectations,
        now: Date
    ) throws(LatchkeyError) -> VerifiedIdentity {
        guard let issuer = claims.iss else { throw missing("iss") }
        guard let subject = claims.sub, !subject.isEmpty else { throw missing("sub") }
        guard let audience = claims.aud, !audience.isEmpty else { throw missing("aud") }
        guard let exp = claims.exp else { throw missing("exp") }
        guard let iat = claims.iat else { throw missing("iat") }

        try checkIssuer(issuer, tenantID: claims.tid)
        let matchedAudience = try checkAudience(audience)
        try checkTimes(exp: exp, iat: iat, nbf: claims.nbf, now: now)
        try checkNonce(claims, expectations: expectations)
        if let code = expectations.authorizationCode {
            try checkHalfHash(claims.cHash, of: code, algorithm: algorithm, claim: "c_hash", error: .codeHashMismatch)
        }
        if let accessToken = expectations.accessToken {
            try checkHalfHash(claims.atHash, of: accessToken, algorithm: algorithm, claim: "at_hash", error: .accessTokenHashMismatch)
        }
        return VerifiedIdentity(
            issuer: issuer,
            subject: subject,
            audience: matchedAudience,
            issuedAt: Date(timeIntervalSince1970: iat),
            expiresAt: Date(timeIntervalSince1970: exp),
            authTime: claims.authTime.map { Date(timeIntervalSince1970: $0) },
            email: claims.email,
            emailVerified: claims.emailVerified,
            isPrivateEmail: claims.isPrivateEmail,
            realUserStatus: claims.realUserStatus.flatMap(RealUserStatus.init(rawValue:)),
            transferSubject: claims.transferSub,
            organizationID: claims.orgID,
            nonceSupported: claims.nonceSupported,
            authorizedParty: claims.azp,
            hostedDomain: claims.hd,
            tenantID: claims.tid,
            name: claims.name,
            givenName: claims.givenName,
            familyName: claims.familyName
        )
    }

    private func missing(_ claim: String) -> LatchkeyError {
        LatchkeyError(.missingClaim, "the token has no \"\(claim)\" claim, which \(policy.providerName) ID tokens always carry")
    }

    private func checkIssuer(_ issuer: String, tenantID: String?) throws(LatchkeyError) {
        if policy.issuers.contains(issuer) { return }
        if let tenantID, UUID(uuidString: tenantID) != nil {
            let templated = policy.issuers.map { $0.replacingOccurrences(of: "{tenantid}", with: tenantID.lowercased()) }
            if templated.contains(issuer) { return }
        }
        throw LatchkeyError(
            .unexpectedIssuer,
            "issuer \"\(issuer.prefix(128))\" is not \(policy.providerName)'s (expected \(policy.issuers.sorted().joined(separator: " or ")))"
        )
    }

    private func checkAudience(_ audiences: [String]) throws(LatchkeyError) -> String {
        if let match = audiences.first(where: { policy.audiences.contains($0) }) { return match }
        let arrived = audiences.map { "\"\($0.prefix(128))\"" }.joined(separator: ", ")
        let expected = policy.audiences.isEmpty ? "none configured" : policy.audiences.joined(separator: ", ")
        var reason = "audience \(arrived) is not one of the configured client ids [\(expected)]"
        if let hint = policy.audienceHint { reason += "; \(hint)" }
        throw LatchkeyError(.unexpectedAudience, reason)
    }

    private func checkTimes(exp: Double, iat: Double, nbf: Double?, now: Date) throws(LatchkeyError) {
        let now = now.timeIntervalSince1970
        let leeway = policy.leeway
        if now > exp + leeway {
            throw LatchkeyError(
                .tokenExpired,
                "the token expired \(describe(seconds: now - exp)) ago (leeway \(Int(leeway)) s); ask the app for a fresh sign-in"
            )
        }
        if let nbf, now + leeway < nbf {
            throw LatchkeyError(.tokenNotYetValid, "the token is not valid for another \(describe(seconds: nbf - now)); check this server's clock")
        }
        if now + leeway < iat {
            throw LatchkeyError(
                .issuedInFuture,
                "the token was issued \(describe(seconds: iat - now)) in the future; this server's clock is probably behind"
            )
        }
    }

    private func checkNonce(_ claims: IDTokenClaims, expectations: IdentityTokenExpectations) throws(LatchkeyError) {
        guard let claim = claims.nonce else {
            if expectations.isSignIn, policy.requireNonce {
                let setting = policy.configurationKey.map { "\($0).requireNonce" } ?? "requireNonce"
                let device = claims.nonceSupported == false ? " (the token says the device could not carry one: nonce_supported is false)" : ""
                throw LatchkeyError(
                    .nonceRequired,
                    "the token carries no nonce\(device), and \(setting) is on; set the SHA-256 of a fresh random nonce on the "
                        + "authorization request and send the raw nonce with the token, or turn \(setting) off for web sign-ins that cannot carry one"
                )
            }
            guard expectations.rawNonce != nil, claims.nonceSupported != false else { return }  // Apple: the device could not carry a nonce
            throw LatchkeyError(
                .nonceMissing,
                "a nonce was sent but the token carries none; the app must set the (hashed) nonce on the authorization request"
            )
        }
        guard let rawNonce = expectations.rawNonce else {
            guard expectations.isSignIn else { return }
            throw LatchkeyError(
                .nonceRequired,
                "the token carries a nonce but no rawNonce was sent; send the raw nonce the app generated for this sign-in "
                    + "(the token alone does not prove the sign-in is the app's own)"
            )
        }
        let hashed = hashedNonce(rawNonce)
        let matches: Bool
        switch policy.nonceMatching {
        case .hashed: matches = constantTimeEquals(hashed, claim)
        case .verbatim: matches = constantTimeEquals(rawNonce, claim)
        case .hashedOrVerbatim: matches = constantTimeEquals(hashed, claim) || constantTimeEquals(rawNonce, claim)
        }
        guard matches else {
            let expectation =
                switch policy.nonceMatching {
                case .hashed: "is not SHA-256(hex) of the sent nonce"
                case .verbatim: "is not the sent nonce"
                case .hashedOrVerbatim: "matches neither SHA-256(hex) of the sent nonce nor the nonce itself"
                }
            throw LatchkeyError(.nonceMismatch, "the token's nonce \(expectation); send the raw nonce the app generated for this sign-in, not its hash")
        }
    }

    private func checkHalfHash(_ claim: String?, of value: String, algorithm: String, claim name: String, error: LatchkeyError.Code) throws(LatchkeyError) {
        // Not every token carries the hash (OIDC requires it only in hybrid flows); when it does, it must match.
        guard let claim else { return }
        let bytes = Array(value.utf8)
        let digest: [UInt8]
        switch algorithm.suffix(3) {
        case "384": digest = Array(SHA384.hash(data: bytes))
        case "512": digest = Array(SHA512.hash(data: bytes))
        default: digest = Array(SHA256.hash(data: bytes))
        }
        let expected = Base64.encodeToString(bytes: digest.prefix(digest.count / 2), options: [.base64UrlAlphabet, .omitPaddingCharacter])
        guard constantTimeEquals(expected, claim) else {
            throw LatchkeyError(error, "\(name) does not match the value delivered with the token; they come from different sign-ins")
        }
    }
}

/// Lowercase hex SHA-256 of `raw`: what an iOS app puts in `ASAuthorizationAppleIDRequest.nonce`
/// (and what the token's `nonce` claim then holds) while it sends `raw` to its server.
public func hashedNonce(_ raw: String) -> String {
    sha256Hex(raw)
}

/// Lowercase hex SHA-256 of the UTF-8 bytes of `text`.
func sha256Hex(_ text: String) -> String {
    lowercaseHex(SHA256.hash(data: Array(text.utf8)))
}

/// Lowercase hex of bytes.
func lowercaseHex(_ digest: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    text.reserveCapacity(128)
    for byte in digest {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: text, as: UTF8.self)
}

/// "3 h", "12 min", "40 s": a duration for people.
public func describe(seconds: Double) -> String {
    // Clamped: a provider-signed token may carry absurd times, and Int() of a huge Double traps.
    let seconds = min(abs(seconds.isFinite ? seconds : 0), 1e12)
    switch seconds {
    case ..<120: return "\(Int(seconds)) s"
    case ..<7200: return "\(Int(seconds / 60)) min"
    case ..<172_800: return "\(Int(seconds / 3600)) h"
    default: return "\(Int(seconds / 86400)) days"
    }
}
