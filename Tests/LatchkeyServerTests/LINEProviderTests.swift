import Foundation
import JWTKit
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// LINE Login: the app SDK's ES256 ID tokens, and the web login's HS256 ones signed with the channel secret.
@Suite("Server: LINE")
struct LINEProviderTests {
    @Test("line.* settings: channel ids, a secret of 32 characters for one channel, its absence a warning, a wrong issuer URL named")
    func settings() throws {
        let configuration = try ConfigurationTests.read(["line.channelIds": "1657000000"])
        let module = try #require(configuration.providerModules.first as? LINEModule)
        #expect(module.issuer == "https://access.line.me" && module.channelIDs == ["1657000000"])
        #expect(module.findings.contains { $0.level == .warning && $0.key == "line.channelSecret" })
        let secret = String(repeating: "0123456789abcdef", count: 2)
        for (values, named) in [
            (["line.channelIds": "1", "line.issuer": "access.line.me"], "line.issuer"),
            (["line.channelIds": "1", "line.channelSecret": "too-short"], "32"),
            (["line.channelIds": "1,2", "line.channelSecret": secret], "one channel"),
            (["line.channelSecret": secret], "line.channelIds is missing"),
        ] {
            #expect {
                try ConfigurationTests.read(values)
            } throws: {
                ($0 as? LatchkeyError)?.reason.contains(named) == true
            }
        }
        #expect(try ConfigurationTests.read(["line.channelIds": "1", "line.channelSecret": secret]).module(LINEModule.self)?.channelSecret != nil)
    }

    /// The emulator's app-SDK token for a new user, its claims re-signed HS256 (as a web login's) with `secret`.
    static func webLoginToken(_ harness: ServerHarness, secret: String) async throws -> (token: String, nonce: String) {
        struct Claims: JWTPayload {
            let iss: String, sub: String, aud: String, exp: Int, iat: Int, nonce: String
            func verify(using algorithm: some JWTAlgorithm) throws {}
        }
        let subjects = try await ProviderEndToEndTests.newUser(harness)
        let body = try await ProviderContractTests.body("line", .idToken, harness, subjects: subjects)
        let sdkToken = try #require(body["idToken"] as? String)
        let payload = try JSONDecoder().decode(Claims.self, from: base64URLDecoded(sdkToken.split(separator: ".")[1]))
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        return (try await keys.sign(payload), try #require(body["rawNonce"] as? String))
    }

    @Test("a web login's HS256 token signs in with the channel secret only; without a kid an ES256 token is refused; other providers never take HS256")
    func sharedSecretTokens() async throws {
        try await ServerHarness.with { harness in
            let secret = EmulatorHarness.providerClientID + LINEModule.emulatedSecretSuffix
            let web = try await Self.webLoginToken(harness, secret: secret)
            let signedIn = try await harness.post("/v1/auth/line", json: ["idToken": web.token, "rawNonce": web.nonce])
            #expect(signedIn.status == 200, "\(signedIn.text)")

            let forged = try await Self.webLoginToken(harness, secret: "another-secret-0123456789abcdef01")
            let refused = try await harness.post("/v1/auth/line", json: ["idToken": forged.token, "rawNonce": forged.nonce])
            #expect(refused.status == 401 && refused.error == "invalid_signature", "\(refused.text)")

            // The app SDK's token with its kid taken out names no key, and ES256 has no shared secret.
            let subjects = try await ProviderEndToEndTests.newUser(harness)
            let sdk = try await ProviderContractTests.body("line", .idToken, harness, subjects: subjects)
            let parts = try #require(sdk["idToken"] as? String).split(separator: ".")
            let header = base64URL(Array(#"{"alg":"ES256","typ":"JWT"}"#.utf8))
            let withoutKeyID = try await harness.post("/v1/auth/line", json: ["idToken": "\(header).\(parts[1]).\(parts[2])", "rawNonce": sdk["rawNonce"]])
            #expect(withoutKeyID.status == 401 && withoutKeyID.error == "malformed_token", "\(withoutKeyID.text)")

            // The same kind of token for the generic OpenID Connect provider: HS256 is not among its algorithms.
            let oidc = try await harness.post("/v1/auth/oidc", json: ["idToken": web.token, "rawNonce": web.nonce])
            #expect(oidc.status == 401 && oidc.error == "unsupported_algorithm", "\(oidc.text)")
        }
    }
}
