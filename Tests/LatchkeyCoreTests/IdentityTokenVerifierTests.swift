import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("Identity token verification")
struct IdentityTokenVerifierTests {
    let key = Fixtures.appleKey
    let verifier: IdentityTokenVerifier

    init() async throws {
        let keys = try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        verifier = IdentityTokenVerifier(
            policy: .apple(clientIDs: [Fixtures.bundleID, Fixtures.servicesID]),
            keys: StaticKeyResolver(keys),
            timeSource: .fixed(Fixtures.now)
        )
    }

    @discardableResult
    func expectError(_ code: LatchkeyError.Code, _ token: String, expecting: IdentityTokenExpectations = .init(), verifier: IdentityTokenVerifier? = nil) async
        -> LatchkeyError?
    {
        do {
            let identity = try await (verifier ?? self.verifier).verify(token, expecting: expecting)
            Issue.record("expected \(code), got identity \(identity.subject)")
            return nil
        } catch {
            #expect(error.code == code, "\(error)")
            return error
        }
    }

    // MARK: accepted tokens

    @Test("a valid Apple token yields a typed identity")
    func validToken() async throws {
        let identity = try await verifier.verify(key.sign(claims: appleClaims()))
        #expect(identity.subject == "000123.0123456789abcdef0123456789abcdef.0456")
        #expect(identity.audience == Fixtures.bundleID)
        #expect(identity.email == "ab12cd34ef@privaterelay.appleid.com")
        #expect(identity.emailVerified == true)
        #expect(identity.isPrivateEmail == true)
        #expect(identity.realUserStatus == .likelyReal)
        #expect(identity.nonceSupported == true)
        #expect(identity.expiresAt == Fixtures.now.addingTimeInterval(600))
        #expect(identity.authTime == Fixtures.now)
    }

    @Test("booleans arrive as strings or booleans; transfer_sub and org_id are kept")
    func tolerantClaims() async throws {
        let token = key.sign(
            claims: appleClaims(extra: [
                "email_verified": false, "is_private_email": "false", "real_user_status": 0,
                "transfer_sub": "760417.ebbf12acbc78e1be1668ba852d492d8a.1827", "org_id": "org-1",
            ]))
        let identity = try await verifier.verify(token)
        #expect(identity.emailVerified == false)
        #expect(identity.isPrivateEmail == false)
        #expect(identity.realUserStatus == .unsupported)
        #expect(identity.transferSubject == "760417.ebbf12acbc78e1be1668ba852d492d8a.1827")
        #expect(identity.organizationID == "org-1")
    }

    @Test("claims spelled with escapes (a slash as \\/, as Foundation's encoder writes it; a name as \\u sequences) are read as what they spell")
    func escapedClaims() async throws {
        let payload = json(appleClaims()).replacingOccurrences(of: "/", with: #"\/"#).replacingOccurrences(of: #""sub""#, with: #""\u0073ub""#)
        #expect(payload.contains(#"https:\/\/appleid.apple.com"#))
        let identity = try await verifier.verify(key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: payload))
        #expect(identity.issuer == "https://appleid.apple.com")
        #expect(identity.subject == "000123.0123456789abcdef0123456789abcdef.0456")
    }

    @Test("web tokens for the Services ID, audience arrays, and account.apple.com are accepted")
    func audiencesAndIssuers() async throws {
        #expect(try await verifier.verify(key.sign(claims: appleClaims(audience: Fixtures.servicesID))).audience == Fixtures.servicesID)
        let array = key.sign(claims: appleClaims(extra: ["aud": ["other", Fixtures.servicesID]]))
        #expect(try await verifier.verify(array).audience == Fixtures.servicesID)
        let newIssuer = key.sign(claims: appleClaims(extra: ["iss": "https://account.apple.com"]))
        #expect(try await verifier.verify(newIssuer).issuer == "https://account.apple.com")
    }

    @Test("expiry within the leeway is accepted")
    func leeway() async throws {
        let token = key.sign(claims: appleClaims(issuedAt: Fixtures.now.addingTimeInterval(-650), lifetime: 600))
        _ = try await verifier.verify(token)
        _ = try await verifier.verify(key.sign(claims: appleClaims(issuedAt: Fixtures.now.addingTimeInterval(59))))
    }

    // MARK: shape

    @Test(
        "tokens that are not three base64url segments of JSON are malformed",
        arguments: [
            "abc", "a.b", "a.b.c.d", "!!!.e30.c2ln", "eyJhbGciOiJSUzI1NiJ9.!!!.c2ln", "bm90IGpzb24.e30.c2ln",
            "eyJhbGciOiJSUzI1NiJ9=.e30.c2ln", "e30.e30.c2ln",
        ])
    func malformed(token: String) async {
        await expectError(.malformedToken, token)
    }

    @Test("a signature whose last character has unused bits set is refused, although it decodes to the same bytes")
    func nonCanonicalBase64URL() async throws {
        let token = key.sign(claims: appleClaims())
        _ = try await verifier.verify(token)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let signature = try #require(token.split(separator: ".").last)
        #expect(signature.count % 4 == 2, "an RS256 signature (256 bytes) ends in a 2-character group with 4 unused bits")
        let lastCharacter = try #require(signature.last)
        let last = try #require(alphabet.firstIndex(of: lastCharacter))
        let twin = String(token.dropLast()) + String(alphabet[last | 1])
        let error = await expectError(.malformedToken, twin)
        #expect(error?.reason.contains("canonical") == true)
    }

    @Test(
        "a header or payload whose last character has unused bits set is refused",
        arguments: [(segment: 0, padding: 0), (segment: 0, padding: 1), (segment: 1, padding: 0), (segment: 1, padding: 1)])
    func nonCanonicalSegment(segment: Int, padding: Int) async throws {
        // Spaces inside the JSON pick the segment's length: 2 or 3 characters in its last group.
        func token(spaces: Int) -> String {
            let filler = String(repeating: " ", count: spaces)
            return segment == 0
                ? key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"\#(filler)}"#, payloadJSON: #"{"sub":"x"}"#)
                : key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: #"{"sub":"x"\#(filler)}"#)
        }
        let wanted = 2 + padding
        let canonical = try #require((0..<3).map(token(spaces:)).first { $0.split(separator: ".")[segment].count % 4 == wanted })
        var parts = canonical.split(separator: ".").map(String.init)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let lastCharacter = try #require(parts[segment].last)
        let last = try #require(alphabet.firstIndex(of: lastCharacter))
        #expect(last & 1 == 0, "the last character of a canonical segment has its unused bits clear")
        parts[segment] = String(parts[segment].dropLast()) + String(alphabet[last | 1])
        let error = await expectError(.malformedToken, parts.joined(separator: "."))
        #expect(error?.reason.contains("canonical") == true)
    }

    @Test("a payload that is not JSON is malformed")
    func payloadNotJSON() async {
        await expectError(.malformedToken, key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: "not json"))
    }

    @Test("oversized tokens are refused before any decoding")
    func oversized() async {
        let big = key.sign(claims: appleClaims(extra: ["padding": String(repeating: "x", count: 20_000)]))
        await expectError(.tokenTooLarge, big)
    }

    // MARK: algorithms and keys

    @Test("alg none is refused, with or without a signature")
    func algNone() async {
        let header = base64URL(Array(#"{"alg":"none","kid":"W6WcOKB"}"#.utf8))
        let payload = base64URL(Array(json(appleClaims()).utf8))
        await expectError(.unsupportedAlgorithm, "\(header).\(payload).")
        await expectError(.unsupportedAlgorithm, "\(header).\(payload).c2ln")
    }

    @Test("an HS256 token signed with the RSA public key as HMAC secret is refused")
    func algorithmConfusion() async {
        let header = base64URL(Array(#"{"alg":"HS256","kid":"W6WcOKB"}"#.utf8))
        let payload = base64URL(Array(json(appleClaims()).utf8))
        let secret = SymmetricKey(data: Array(Fixtures.appleKey.jwk.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(header).\(payload)".utf8), using: secret)
        await expectError(.unsupportedAlgorithm, "\(header).\(payload).\(base64URL(Array(mac)))")
    }

    @Test("HS256 only with a resolver that holds the shared secret (LINE's web login): no kid, the right secret; never with a public key")
    func sharedSecret() async throws {
        struct KeysAndSecret: VerificationKeyResolver {
            let keys: StaticKeyResolver
            let secret: VerificationKey
            var sharedSecretAlgorithms: Set<String> { ["HS256"] }
            func key(forKeyID keyID: String) async throws(LatchkeyError) -> VerificationKey { try await keys.key(forKeyID: keyID) }
            func sharedSecretKey(algorithm: String) async throws(LatchkeyError) -> VerificationKey {
                guard algorithm == "HS256" else { throw LatchkeyError(.malformedToken, "no kid") }
                return secret
            }
        }
        func hs256(_ header: String, secret: [UInt8]) -> String {
            let signingInput = base64URL(Array(header.utf8)) + "." + base64URL(Array(json(appleClaims()).utf8))
            let mac = HMAC<SHA256>.authenticationCode(for: Array(signingInput.utf8), using: SymmetricKey(data: secret))
            return signingInput + "." + base64URL(Array(mac))
        }
        let published = StaticKeyResolver(try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8)))
        var policy = IdentityTokenPolicy.apple(clientIDs: [Fixtures.bundleID])
        policy.allowedAlgorithms = ["RS256", "HS256"]
        let line = IdentityTokenVerifier(
            policy: policy, keys: KeysAndSecret(keys: published, secret: try await .hs256(keyID: "", secret: "channel-secret-0123456789abcdef0")),
            timeSource: .fixed(Fixtures.now))
        let signed = hs256(#"{"alg":"HS256","typ":"JWT"}"#, secret: Array("channel-secret-0123456789abcdef0".utf8))
        #expect(try await line.verify(signed).subject == "000123.0123456789abcdef0123456789abcdef.0456")
        await expectError(.invalidSignature, hs256(#"{"alg":"HS256","typ":"JWT"}"#, secret: Array("another-secret-0123456789abcdef0".utf8)), verifier: line)
        await #expect(throws: LatchkeyError.self) { try await VerificationKey.hs256(keyID: "", secret: "short") }
        // Naming a public key: that key verifies RS256 only, whatever the token says.
        await expectError(.unsupportedAlgorithm, hs256(#"{"alg":"HS256","kid":"W6WcOKB"}"#, secret: Array(Fixtures.appleKey.jwk.utf8)), verifier: line)
        await expectError(.malformedToken, key.sign(claims: appleClaims(), header: ["alg": "RS256"]), verifier: line)
        #expect(try await line.verify(key.sign(claims: appleClaims())).subject == "000123.0123456789abcdef0123456789abcdef.0456")
        // A resolver of public keys only: HS256 is refused although the policy names it.
        let publicOnly = IdentityTokenVerifier(policy: policy, keys: published, timeSource: .fixed(Fixtures.now))
        await expectError(.unsupportedAlgorithm, signed, verifier: publicOnly)
    }

    @Test("an allowed algorithm that is not the key's algorithm is refused")
    func keyAlgorithmMismatch() async throws {
        let keys = try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        var policy = IdentityTokenPolicy.apple(clientIDs: [Fixtures.bundleID])
        policy.allowedAlgorithms = ["RS256", "ES256"]
        let lenient = IdentityTokenVerifier(policy: policy, keys: StaticKeyResolver(keys), timeSource: .fixed(Fixtures.now))
        let token = key.sign(claims: appleClaims(), header: ["alg": "ES256", "kid": key.keyID])
        await expectError(.unsupportedAlgorithm, token, verifier: lenient)
    }

    @Test("an unknown kid, a missing kid and a crit header are refused")
    func headerProblems() async {
        await expectError(.unknownKeyID, key.withKeyID("NEWKEY").sign(claims: appleClaims()))
        await expectError(.malformedToken, key.sign(claims: appleClaims(), header: ["alg": "RS256"]))
        await expectError(.unsupportedCriticalHeader, key.sign(claims: appleClaims(), header: ["alg": "RS256", "kid": key.keyID, "crit": ["exp"]]))
        await expectError(.malformedToken, key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB","alg":"HS256"}"#, payloadJSON: json(appleClaims())))
    }

    @Test("a forged or tampered token fails the signature check")
    func badSignature() async {
        await expectError(.invalidSignature, Fixtures.attackerKey.sign(claims: appleClaims()))
        let parts = key.sign(claims: appleClaims()).split(separator: ".")
        let tampered = base64URL(Array(json(appleClaims(extra: ["sub": "someone-else"])).utf8))
        await expectError(.invalidSignature, "\(parts[0]).\(tampered).\(parts[2])")
    }

    // MARK: claims

    @Test("every required claim must be present", arguments: ["iss", "sub", "aud", "exp", "iat"])
    func missingClaim(claim: String) async {
        var claims = appleClaims()
        claims.removeValue(forKey: claim)
        let error = await expectError(.missingClaim, key.sign(claims: claims))
        #expect(error?.reason.contains("\"\(claim)\"") == true)
    }

    @Test("a claim given twice is refused, also when spelled with escapes")
    func duplicateClaims() async {
        let base = json(appleClaims()).dropLast()
        await expectError(.duplicateClaim, key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: base + #","aud":"com.evil"}"#))
        await expectError(.duplicateClaim, key.sign(headerJSON: #"{"alg":"RS256","kid":"W6WcOKB"}"#, payloadJSON: base + #","\u0061ud":"com.evil"}"#))
    }

    @Test("claims of the wrong type name the claim")
    func wrongType() async {
        let error = await expectError(.invalidClaim, key.sign(claims: appleClaims(extra: ["exp": "tomorrow"])))
        #expect(error?.reason.contains("exp") == true)
        await expectError(.invalidClaim, key.sign(claims: appleClaims(extra: ["email_verified": "maybe"])))
    }

    @Test("a foreign issuer is refused")
    func foreignIssuer() async {
        await expectError(.unexpectedIssuer, key.sign(claims: appleClaims(extra: ["iss": "https://evil.example"])))
    }

    @Test("a wrong audience says which arrived, which were expected, and about Services IDs")
    func wrongAudience() async {
        let error = await expectError(.unexpectedAudience, key.sign(claims: appleClaims(audience: "com.other.app")))
        #expect(error?.reason.contains("com.other.app") == true)
        #expect(error?.reason.contains(Fixtures.bundleID) == true)
        #expect(error?.reason.contains("Services ID") == true)
    }

    @Test("expired, not-yet-valid and future-issued tokens are refused")
    func times() async {
        await expectError(.tokenExpired, key.sign(claims: appleClaims(issuedAt: Fixtures.now.addingTimeInterval(-700), lifetime: 600)))
        await expectError(.tokenNotYetValid, key.sign(claims: appleClaims(extra: ["nbf": Int(Fixtures.now.timeIntervalSince1970) + 300])))
        await expectError(.issuedInFuture, key.sign(claims: appleClaims(issuedAt: Fixtures.now.addingTimeInterval(120))))
    }

    @Test("verification at an explicit time")
    func explicitTime() async throws {
        let token = key.sign(claims: appleClaims(issuedAt: Fixtures.now.addingTimeInterval(-86_400)))
        _ = try await verifier.verify(token, now: Fixtures.now.addingTimeInterval(-86_000))
        await expectError(.tokenExpired, token)
    }

    // MARK: nonce

    @Test("the nonce matches hashed (native) or verbatim (web)")
    func nonceAccepted() async throws {
        let raw = "k3J9-random-nonce"
        _ = try await verifier.verify(key.sign(claims: appleClaims(extra: ["nonce": sha256Hex(raw)])), expecting: .init(rawNonce: raw))
        _ = try await verifier.verify(key.sign(claims: appleClaims(extra: ["nonce": raw])), expecting: .init(rawNonce: raw))
    }

    @Test("the hashed nonce is lowercase hex SHA-256 (FIPS 180-2 vector for \"abc\")")
    func hashedNonceVector() {
        #expect(hashedNonce("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("a wrong nonce is refused")
    func nonceMismatch() async {
        let raw = "k3J9-random-nonce"
        await expectError(.nonceMismatch, key.sign(claims: appleClaims(extra: ["nonce": sha256Hex("other")])), expecting: .init(rawNonce: raw))
        await expectError(.nonceMismatch, key.sign(claims: appleClaims(extra: ["nonce": "other"])), expecting: .init(rawNonce: raw))
    }

    @Test("a strict nonce mode refuses the other convention")
    func nonceModes() async throws {
        let keys = try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        var policy = IdentityTokenPolicy.apple(clientIDs: [Fixtures.bundleID])
        policy.nonceMatching = .hashed
        let strict = IdentityTokenVerifier(policy: policy, keys: StaticKeyResolver(keys), timeSource: .fixed(Fixtures.now))
        await expectError(.nonceMismatch, key.sign(claims: appleClaims(extra: ["nonce": "raw"])), expecting: .init(rawNonce: "raw"), verifier: strict)
        // The app's server must send the raw nonce; sending the hash again does not match in hashed mode.
        await expectError(
            .nonceMismatch, key.sign(claims: appleClaims(extra: ["nonce": sha256Hex("raw")])), expecting: .init(rawNonce: sha256Hex("raw")), verifier: strict)
        policy.nonceMatching = .verbatim
        let verbatim = IdentityTokenVerifier(policy: policy, keys: StaticKeyResolver(keys), timeSource: .fixed(Fixtures.now))
        await expectError(
            .nonceMismatch, key.sign(claims: appleClaims(extra: ["nonce": sha256Hex("raw")])), expecting: .init(rawNonce: "raw"), verifier: verbatim)
    }

    @Test("an expected nonce must be present unless the token says nonces are unsupported")
    func nonceMissing() async throws {
        await expectError(.nonceMissing, key.sign(claims: appleClaims()), expecting: .init(rawNonce: "n"))
        var claims = appleClaims()
        claims.removeValue(forKey: "nonce_supported")
        await expectError(.nonceMissing, key.sign(claims: claims), expecting: .init(rawNonce: "n"))
        _ = try await verifier.verify(key.sign(claims: appleClaims(extra: ["nonce_supported": false])), expecting: .init(rawNonce: "n"))
    }

    // MARK: c_hash and at_hash

    static func halfHash(_ value: String) -> String {
        base64URL(Array(Array(SHA256.hash(data: Array(value.utf8))).prefix(16)))
    }

    @Test("c_hash and at_hash bind the token to the code and access token that came with it")
    func hashes() async throws {
        let code = "c68eafb759bcc49d9b9620ee0e3de91ba.0.mxzs.gN4k953WIuRVUIqZ4LJl9A"
        let access = "beg5105ed7a4def32adec143038877c2b.0.nx.20LreF67Or9"
        let token = key.sign(claims: appleClaims(extra: ["c_hash": Self.halfHash(code), "at_hash": Self.halfHash(access)]))
        _ = try await verifier.verify(token, expecting: .init(authorizationCode: code, accessToken: access))
        await expectError(.codeHashMismatch, token, expecting: .init(authorizationCode: "another-code"))
        await expectError(.accessTokenHashMismatch, token, expecting: .init(accessToken: "another-token"))
        // A token without c_hash cannot be bound to the code; it is accepted on its other checks.
        _ = try await verifier.verify(key.sign(claims: appleClaims()), expecting: .init(authorizationCode: code))
    }

    // MARK: other providers

    @Test("Microsoft's templated issuer is checked against tid")
    func microsoftTenant() async throws {
        let keys = try await VerificationKeySet(jwksJSON: Array(jwks(Fixtures.appleKey).utf8))
        let microsoft = IdentityTokenVerifier(policy: .microsoft(clientIDs: ["app-1"]), keys: StaticKeyResolver(keys), timeSource: .fixed(Fixtures.now))
        let tid = "9188040d-6c67-4c5b-b112-36a304b66dad"
        let good = key.sign(claims: appleClaims(audience: "app-1", extra: ["iss": "https://login.microsoftonline.com/\(tid)/v2.0", "tid": tid]))
        #expect(try await microsoft.verify(good).tenantID == tid)
        let other = key.sign(
            claims: appleClaims(
                audience: "app-1", extra: ["iss": "https://login.microsoftonline.com/\(tid)/v2.0", "tid": "00000000-0000-0000-0000-000000000001"]))
        await expectError(.unexpectedIssuer, other, verifier: microsoft)
    }
}
