import Foundation
import LatchkeyModels
import Testing

@Suite("Device key material: software keys, raw public keys, App Attest's client data")
struct DeviceKeyMaterialTests {
    static func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }

    static func bytes(hex: String) -> Data {
        Data(stride(from: 0, to: hex.count, by: 2).map { UInt8(hex.dropFirst($0).prefix(2), radix: 16)! })
    }

    @Test("a software key survives its raw bytes: the same public key, and signatures of 64 bytes")
    func softwareKeyRoundTrip() throws {
        let key = SoftwareSigningKey()
        let restored = try SoftwareSigningKey(rawRepresentation: key.rawRepresentation)
        #expect(restored.rawPublicKey == key.rawPublicKey)
        #expect(key.rawRepresentation.count == 32 && key.rawPublicKey.count == 64)
        #expect(try restored.signature(for: Data("proof".utf8)).count == 64)
        #expect(SoftwareSigningKey().rawPublicKey != key.rawPublicKey)
        #expect(throws: (any Error).self) { try SoftwareSigningKey(rawRepresentation: Data([1, 2, 3])) }
    }

    // RFC 7515 Appendix A.3's P-256 key; its RFC 7638 thumbprint computed independently (SHA-256 of
    // {"crv":"P-256","kty":"EC","x":…,"y":…}, base64url).
    @Test("a maker for a raw public key has its RFC 7638 thumbprint; bytes that are no P-256 point are refused")
    func rawPublicKeyThumbprint() throws {
        let raw = Self.bytes(
            hex: "7fcdce2770f6c45d4183cbee6fdb4b7b580733357be9ef13bacf6e3c7bd15445c7f144cd1bbd9b7e872cdfedb9eeb9f4b3695d6ea90b24ad8a4623288588e5ad")
        let maker = try DPoPProofMaker(rawPublicKey: raw) { _ in [] }
        #expect(maker.thumbprint == "oKIywvGUpTVTyxMQ3bwIIeQUudfr_CkLMjCE19ECD-U")
        var offCurve = raw
        offCurve[63] ^= 1
        #expect(throws: (any Error).self) { try DPoPProofMaker(rawPublicKey: offCurve) { _ in [] } }
    }

    @Test("App Attest's client data hash: SHA-256 of challenge.thumbprint, or of the challenge alone without a DPoP key")
    func clientDataHash() {
        // sha256sum of the UTF-8 text.
        #expect(
            Self.hex(AppAttestClientData.hash(challenge: "challenge-1", dpopThumbprint: "thumb"))
                == "d468d9dc9f2af82a6e65361857ffc60c14ff54045d13f0523cb6650b4ac3d17d")
        #expect(
            Self.hex(AppAttestClientData.hash(challenge: "challenge-1", dpopThumbprint: nil))
                == "023212d1fd4f0a3ad03c45c52a40871f468abc416ec181f6eebfc3226cc4753c")
    }
}
