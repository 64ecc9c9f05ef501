import ArgumentParser
import Crypto
import CryptoExtras
import Foundation
import LatchkeyCore
import LatchkeyModels
import LatchkeyProviders

/// `latchkey demo`: a guided, offline tour. Everything runs in-process; nothing touches the internet.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Walk through Sign in with Apple verification offline, narrating each step.",
        discussion: "Runs entirely in-process with generated keys; needs no network and no configuration."
    )

    func run() async throws {
        let narrator = Narrator()
        narrator.step("Generating a test team: a Sign in with Apple .p8 key and a stand-in for Apple's signing key")
        let team = try AppleSigningCredentials(teamID: "DEMOTEAM01", keyID: "DEMOKEY001", privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation)
        let appleKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let keyID = "DEMOAPPLE1"
        let primitives = try appleKey.publicKey.getKeyPrimitives()
        let jwksJSON = #"{"keys":[{"kty":"RSA","kid":"\#(keyID)","use":"sig","alg":"RS256","n":"\#(base64URL(Array(primitives.modulus)))","e":"\#(base64URL(Array(primitives.publicExponent)))"}]}"#

        narrator.step("Building the ES256 client secret Apple's token endpoint requires")
        let secret = try AppleClientSecretProvider.makeSecret(credentials: team, clientID: "com.example.app", issuedAt: Date(), lifetime: 3600)
        narrator.detail("client secret: \(secret.prefix(24))… (\(secret.count) bytes, raw r||s signature, valid 1 h)")

        narrator.step("The app signs in: it hashes a fresh nonce into the request, Apple returns an identity token")
        let rawNonce = PKCE.makeVerifier()
        let now = Int(Date().timeIntervalSince1970)
        let claims = """
            {"iss":"https://appleid.apple.com","aud":"com.example.app","sub":"000123.0123456789abcdef0123456789abcdef.0456",\
            "iat":\(now),"exp":\(now + 600),"nonce":"\(lowercaseHexSHA256(rawNonce))","nonce_supported":true,\
            "email":"ab12cd34ef@privaterelay.appleid.com","email_verified":"true","is_private_email":"true","real_user_status":2}
            """
        let token = sign(header: #"{"alg":"RS256","kid":"\#(keyID)"}"#, claims: claims, key: appleKey)

        narrator.step("The server verifies it: signature via the cached JWKS, issuer, audience, expiry, nonce")
        let keys = JWKSCache(offline: try await VerificationKeySet(jwksJSON: Array(jwksJSON.utf8)))
        let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.example.app", "com.example.web"]), keys: keys)
        let identity = try await verifier.verify(token, expecting: .init(rawNonce: rawNonce))
        narrator.detail("verified: sub \(identity.subject), e-mail \(identity.email ?? "-") (private relay: \(identity.isPrivateEmail == true)), real user: \(identity.realUserStatus.map(String.init(describing:)) ?? "-")")

        narrator.step("What Latchkey says when things go wrong")
        let webOnly = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.example.web"]), keys: keys)
        for (title, attempt) in [
            ("a token for the bundle id, checked against the Services ID only", { try await webOnly.verify(token) }),
            ("the wrong nonce", { try await verifier.verify(token, expecting: .init(rawNonce: "something-else")) }),
            ("a token whose claims were altered after signing", { try await verifier.verify(tampered(token, claims: claims)) }),
        ] as [(String, () async throws -> VerifiedIdentity)] {
            do {
                _ = try await attempt()
            } catch let error as LatchkeyError {
                narrator.detail("\(title):\n      \(error.errorCode) — \(error.reason)")
            }
        }
        narrator.step("Done. Run `latchkey bench` for figures, `swift test` for the full suite.")
    }

    private func sign(header: String, claims: String, key: _RSA.Signing.PrivateKey) -> String {
        let input = base64URL(Array(header.utf8)) + "." + base64URL(Array(claims.utf8))
        let signature = try! key.signature(for: SHA256.hash(data: Array(input.utf8)), padding: .insecurePKCS1v1_5)
        return input + "." + base64URL(Array(signature.rawRepresentation))
    }

    /// The same token with `sub` changed and the original signature kept.
    private func tampered(_ token: String, claims: String) -> String {
        let parts = token.split(separator: ".")
        let altered = claims.replacingOccurrences(of: "000123.", with: "000999.")
        return "\(parts[0]).\(base64URL(Array(altered.utf8))).\(parts[2])"
    }

    private func lowercaseHexSHA256(_ text: String) -> String {
        SHA256.hash(data: Array(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

/// Prints numbered steps, in colour only on a terminal.
struct Narrator {
    private let colour = isatty(STDOUT_FILENO) == 1
    private final class Counter: @unchecked Sendable { var value = 0 }  // only used from the command's task
    private let counter = Counter()

    func step(_ text: String) {
        counter.value += 1
        print(colour ? "\u{1B}[1m\(counter.value). \(text)\u{1B}[0m" : "\(counter.value). \(text)")
    }

    func detail(_ text: String) {
        print("   " + text)
    }
}
