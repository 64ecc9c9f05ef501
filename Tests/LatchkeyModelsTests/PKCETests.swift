import LatchkeyModels
import Testing

@Suite("PKCE (RFC 7636)")
struct PKCETests {
    // RFC 7636 Appendix B
    static let appendixBVerifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    static let appendixBChallenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"

    @Test("the S256 challenge of the Appendix B verifier")
    func appendixB() {
        #expect(PKCE.challenge(for: Self.appendixBVerifier) == Self.appendixBChallenge)
        #expect(PKCE.verify(verifier: Self.appendixBVerifier, challenge: Self.appendixBChallenge, method: .s256))
    }

    @Test("generated verifiers have 43–128 unreserved characters and differ", arguments: [32, 64, 96])
    func generation(bytes: Int) {
        let verifier = PKCE.makeVerifier(byteCount: bytes)
        #expect(PKCE.isValidVerifier(verifier))
        #expect(verifier.count == (bytes * 4 + 2) / 3)
        #expect(verifier != PKCE.makeVerifier(byteCount: bytes))
    }

    @Test("a wrong verifier fails")
    func wrongVerifier() {
        #expect(!PKCE.verify(verifier: PKCE.makeVerifier(), challenge: Self.appendixBChallenge, method: .s256))
    }

    @Test(
        "verifiers of the wrong length or with reserved characters are invalid",
        arguments: [
            String(repeating: "a", count: 42), String(repeating: "a", count: 129), String(repeating: "a", count: 42) + "/", String(repeating: "é", count: 43),
        ])
    func invalidVerifier(verifier: String) {
        #expect(!PKCE.isValidVerifier(verifier))
        #expect(!PKCE.verify(verifier: verifier, challenge: PKCE.challenge(for: verifier), method: .s256))
    }

    @Test("plain is refused unless explicitly allowed")
    func plain() {
        let verifier = PKCE.makeVerifier()
        #expect(!PKCE.verify(verifier: verifier, challenge: verifier, method: .plain))
        #expect(PKCE.verify(verifier: verifier, challenge: verifier, method: .plain, allowPlain: true))
        #expect(!PKCE.verify(verifier: verifier, challenge: verifier + "x", method: .plain, allowPlain: true))
    }

    @Test("constant-time comparison")
    func compare() {
        #expect(constantTimeEquals("abc", "abc"))
        #expect(!constantTimeEquals("abc", "abd"))
        #expect(!constantTimeEquals("abc", "abcd"))
    }
}
