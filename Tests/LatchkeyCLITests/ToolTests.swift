import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("CLI: client-secret, pkce, token inspect and verify")
struct ToolTests {
    static let key = Fixtures.path("AuthKey_TESTKEY123.p8")

    @Test("client-secret prints a secret that verifies with the key's public half")
    func clientSecret() async throws {
        let result = try await CLI.run([
            "client-secret", "--team-id", Fixtures.teamID, "--key-id", Fixtures.keyID, "--key-file", Self.key, "--client-id", Fixtures.bundleID, "--lifetime",
            "180d",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let secret = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = secret.split(separator: ".")
        #expect(parts.count == 3)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: base64URLDecoded(parts[2]))
        #expect(try P256.Signing.PublicKey(pemRepresentation: Fixtures.p8PublicKey).isValidSignature(signature, for: Array("\(parts[0]).\(parts[1])".utf8)))
        #expect(result.stderr.contains("expires"))
        let json = try await CLI.run([
            "client-secret", "--team-id", Fixtures.teamID, "--key-id", Fixtures.keyID, "--key-file", Self.key, "--client-id", Fixtures.servicesID, "--json",
        ]).json
        #expect(json["clientId"] as? String == Fixtures.servicesID)
        #expect((json["expiresAt"] as? Int ?? 0) - (json["issuedAt"] as? Int ?? 0) == 3600)
    }

    @Test("client-secret refuses a lifetime over six months and explains why")
    func lifetime() async throws {
        let result = try await CLI.run([
            "client-secret", "--team-id", Fixtures.teamID, "--key-id", Fixtures.keyID, "--key-file", Self.key, "--client-id", Fixtures.bundleID, "--lifetime",
            "200d",
        ])
        #expect(result.status == 1)
        #expect(result.stderr.contains("15777000"))
        #expect(result.stdout.isEmpty)
    }

    @Test(
        "client-secret names the wrong input",
        arguments: [
            (["--team-id", "short"], "team id"), (["--key-id", "KEY-1"], "key id"),
            (["--key-file", Fixtures.path("p384.p8")], "P-384"), (["--key-file", "/nonexistent.p8"], "cannot read"), (["--client-id", ""], "client id"),
        ])
    func clientSecretErrors(override: [String], mention: String) async throws {
        var options = ["--team-id": Fixtures.teamID, "--key-id": Fixtures.keyID, "--key-file": Self.key, "--client-id": Fixtures.bundleID]
        options[override[0]] = override[1]
        let result = try await CLI.run(["client-secret"] + options.flatMap { [$0.key, $0.value] })
        #expect(result.status == 1)
        #expect(result.stderr.contains(mention), "\(result.stderr)")
    }

    @Test("pkce prints the Appendix B challenge; refuses a bad verifier")
    func pkce() async throws {
        let json = try await CLI.run(["pkce", "--verifier", "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "--json"]).json
        #expect(json["codeChallenge"] as? String == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
        let fresh = try await CLI.run(["pkce"])
        #expect(fresh.status == 0)
        #expect(fresh.stdout.contains("code_challenge_method: S256"))
        #expect(try await CLI.run(["pkce", "--verifier", "too-short"]).status == 1)
    }

    static var appleToken: String {
        Fixtures.appleKey.sign(claims: appleClaims(issuedAt: Date(), extra: ["nonce": sha256Hex("raw"), "transfer_sub": "760417.ebbf.1827"]))
    }

    @Test("token inspect decodes without verifying, says so, and flags what matters for Apple")
    func inspect() async throws {
        let result = try await CLI.run(["token", "inspect", Self.appleToken])
        #expect(result.status == 0)
        #expect(result.stdout.contains("UNVERIFIED"))
        #expect(result.stdout.contains("UTC"))
        #expect(result.stdout.contains("expires in"))
        #expect(result.stdout.contains("issued to client id \(Fixtures.bundleID)"))
        #expect(result.stdout.contains("private relay"))
        #expect(result.stdout.contains("likely a real person"))
        #expect(result.stdout.contains("transfer_sub"))
        #expect(result.stdout.contains("SHA-256 hex"))
        // Apple's newer relay domain is a relay address too, whatever is_private_email says.
        let icloud = Fixtures.appleKey.sign(
            claims: appleClaims(issuedAt: Date(), extra: ["email": "ab12cd34ef@private.icloud.com", "is_private_email": "false"]))
        #expect(try await CLI.run(["token", "inspect", icloud]).stdout.contains("private relay"))
        let own = Fixtures.appleKey.sign(claims: appleClaims(issuedAt: Date(), extra: ["email": "jane@icloud.com", "is_private_email": "false"]))
        #expect(try await CLI.run(["token", "inspect", own]).stdout.contains("e-mail jane@icloud.com"))
        let expired = Fixtures.appleKey.sign(claims: appleClaims(issuedAt: Date().addingTimeInterval(-4 * 3600)))
        #expect(try await CLI.run(["token", "inspect", expired]).stdout.contains("ago — expired"))
        let piped = try await CLI.run(["token", "inspect", "-", "--json"], stdin: Self.appleToken + "\n").json
        #expect(piped["verified"] as? Bool == false)
        #expect((piped["claims"] as? [String: Any])?["aud"] as? String == Fixtures.bundleID)
        let bad = try await CLI.run(["token", "inspect", "not-a-jwt"])
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("three"))
    }

    func withJWKSFile(_ body: (String) async throws -> Void) async throws {
        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/apple-keys.json"
        try jwks(Fixtures.appleKey).write(toFile: path, atomically: true, encoding: .utf8)
        try await body(path)
    }

    @Test("token verify offline with --jwks: verified identity and exit 0")
    func verify() async throws {
        try await withJWKSFile { keys in
            let result = try await CLI.run([
                "token", "verify", Self.appleToken, "--provider", "apple", "--audience", Fixtures.bundleID, "--jwks", keys, "--nonce", "raw",
            ])
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains("verified"))
            #expect(result.stdout.contains("000123."))
            let json = try await CLI.run(
                ["token", "verify", "-", "--provider", "apple", "--audience", Fixtures.bundleID, "--jwks", keys, "--json"], stdin: Self.appleToken
            ).json
            #expect(json["verified"] as? Bool == true)
            #expect(json["subject"] as? String == "000123.0123456789abcdef0123456789abcdef.0456")
        }
    }

    @Test(
        "token verify exits 1 with the exact reason",
        arguments: [
            (["--audience", "com.other.app"], "unexpected_audience"),
            (["--audience", Fixtures.bundleID, "--nonce", "other"], "nonce_mismatch"),
            (["--audience", Fixtures.bundleID, "--at", "2099-01-01T00:00:00Z"], "token_expired"),
            (["--audience", Fixtures.bundleID, "--at", "1000000000"], "issued_in_future"),
        ])
    func verifyRefusals(extra: [String], code: String) async throws {
        try await withJWKSFile { keys in
            let result = try await CLI.run(["token", "verify", Self.appleToken, "--provider", "apple", "--jwks", keys] + extra)
            #expect(result.status == 1)
            #expect(result.stdout.contains(code), "\(result.stdout)")
            #expect(result.stdout.contains("refused"))
        }
    }

    @Test("token verify --provider facebook checks a Limited Login token; --jwks with an issuer URL fetches nothing; code-only providers are named")
    func verifyOtherProviders() async throws {
        try await withJWKSFile { keys in
            let now = Int(Date().timeIntervalSince1970)
            let limited = Fixtures.appleKey.sign(claims: [
                "iss": "https://www.facebook.com", "aud": "1234567890", "sub": "10158000000000000", "iat": now, "exp": now + 3600,
                "nonce": sha256Hex("raw"), "jti": "j-1",
            ])
            let facebook = try await CLI.run([
                "token", "verify", limited, "--provider", "facebook", "--audience", "1234567890", "--jwks", keys, "--nonce", "raw", "--json",
            ])
            #expect(facebook.status == 0, "\(facebook.stdout)\(facebook.stderr)")
            #expect(facebook.json["subject"] as? String == "10158000000000000")
            let otherApp = try await CLI.run(["token", "verify", limited, "--provider", "facebook", "--audience", "999", "--jwks", keys])
            #expect(otherApp.status == 1 && otherApp.stdout.contains("unexpected_audience"), "\(otherApp.stdout)")

            // Nothing listens on the discard port: a discovery fetch fails, as the run without --jwks shows.
            let issuer = "http://127.0.0.1:9/tenant"
            let token = Fixtures.appleKey.sign(claims: ["iss": issuer, "aud": "my-client", "sub": "u-1", "iat": now, "exp": now + 600])
            let offline = try await CLI.run(["token", "verify", token, "--provider", issuer, "--audience", "my-client", "--jwks", keys])
            #expect(offline.status == 0, "\(offline.stdout)\(offline.stderr)")
            let online = try await CLI.run(["token", "verify", token, "--provider", issuer, "--audience", "my-client"])
            #expect(online.status == 1 && online.stdout.contains("could not reach 127.0.0.1"), "\(online.stdout)")

            let github = try await CLI.run(["token", "verify", token, "--provider", "github", "--audience", "a", "--jwks", keys])
            #expect(github.status == 1 && github.stdout.contains("no ID tokens"), "\(github.stdout)")

            // Every module that issues ID tokens is named by its module: Slack's are RS256 from https://slack.com.
            let slackToken = Fixtures.appleKey.sign(claims: ["iss": "https://slack.com", "aud": "123.456", "sub": "U0123456789", "iat": now, "exp": now + 600])
            let slack = try await CLI.run(["token", "verify", slackToken, "--provider", "slack", "--audience", "123.456", "--jwks", keys, "--json"])
            #expect(slack.status == 0 && slack.json["subject"] as? String == "U0123456789", "\(slack.stdout)\(slack.stderr)")

            // LINE's app SDK signs with ES256 only: an RS256 token for LINE's issuer is refused by its algorithm.
            let lineToken = Fixtures.appleKey.sign(claims: [
                "iss": "https://access.line.me", "aud": "1657000000", "sub": "U" + String(repeating: "a", count: 32), "iat": now, "exp": now + 600,
            ])
            let line = try await CLI.run(["token", "verify", lineToken, "--provider", "line", "--audience", "1657000000", "--jwks", keys])
            #expect(line.status == 1 && line.stdout.contains("unsupported_algorithm"), "\(line.stdout)")
        }
    }

    @Test("token verify needs an audience, a known provider and readable keys")
    func verifyUsage() async throws {
        try await withJWKSFile { keys in
            let noAudience = try await CLI.run(["token", "verify", Self.appleToken, "--provider", "apple", "--jwks", keys])
            #expect(noAudience.status == 64)
            #expect(noAudience.stderr.contains("--audience"))
            #expect(try await CLI.run(["token", "verify", Self.appleToken, "--provider", "yahoo", "--audience", "a", "--jwks", keys]).status == 1)
            #expect(
                try await CLI.run(["token", "verify", Self.appleToken, "--provider", "apple", "--audience", "a", "--jwks", "/nonexistent.json"]).stdout
                    .contains(
                        "keys_unavailable"))
            #expect(
                try await CLI.run(["token", "verify", Self.appleToken, "--provider", "apple", "--audience", "a", "--jwks", keys, "--at", "yesterday"]).status
                    == 64)
        }
    }
}
