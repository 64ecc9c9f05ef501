import LatchkeyClient
import Testing

@Suite("AppleNonce")
struct AppleNonceTests {
    // FIPS 180-2 Appendix B.1: SHA-256("abc")
    @Test func sha256IsLowercaseHex() {
        #expect(AppleNonce(raw: "abc").sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func freshNoncesDiffer() {
        let first = AppleNonce()
        let second = AppleNonce()
        #expect(first.raw != second.raw)
        #expect(first.raw.count == 43)
        #expect(first.sha256.count == 64)
    }
}
