import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("Verification key sets")
struct KeySetTests {
    @Test("a JWKS document becomes keys by kid; private and kid-less keys are skipped")
    func parse() async throws {
        let document = #"{"keys":[\#(Fixtures.appleKey.jwk),{"kty":"RSA","n":"AQAB","e":"AQAB"},{"kty":"oct","kid":"h","k":"c2VjcmV0"}]}"#
        let keys = try await VerificationKeySet(jwksJSON: Array(document.utf8))
        #expect(keys.keyIDs == ["W6WcOKB"])
        #expect(keys["W6WcOKB"]?.algorithm == "RS256")
    }

    @Test("keys without alg are assumed RS256 (Microsoft publishes them so)")
    func noAlg() async throws {
        let jwk = Fixtures.appleKey.jwk.replacingOccurrences(of: #""alg":"RS256","#, with: "")
        let keys = try await VerificationKeySet(jwksJSON: Array(#"{"keys":[\#(jwk)]}"#.utf8))
        #expect(keys["W6WcOKB"]?.algorithm == "RS256")
    }

    @Test(
        "documents that are not a JWKS, or hold no usable key, are refused",
        arguments: [
            "not json", #"{"keys":[]}"#, #"{"nokeys":1}"#, #"{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0"}]}"#,
        ])
    func invalid(document: String) async {
        await #expect(throws: LatchkeyError(.keysUnavailable, "")) {
            _ = try await VerificationKeySet(jwksJSON: Array(document.utf8))
        }
    }
}
