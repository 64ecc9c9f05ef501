import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders

/// `latchkey client-secret`: prints the ES256 client secret Apple's REST API needs.
struct ClientSecretCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-secret",
        abstract: "Print the ES256 client-secret JWT for Apple's REST API.",
        discussion: """
            Examples:
              latchkey client-secret --team-id A1B2C3D4E5 --key-id ABC123DEFG --key-file AuthKey_ABC123DEFG.p8 --client-id com.example.app
              latchkey client-secret ... --client-id com.example.web --lifetime 180d --json

            The client id is the bundle id for codes from the iOS app and the Services ID for web codes:
            Apple answers invalid_client when the secret's sub differs from the client_id sent with it.
            Exit codes: 0 printed, 1 the inputs are wrong (the message names the field), 64 usage.
            """
    )

    @Option(help: "Your 10-character Team ID.") var teamID: String
    @Option(help: "The 10-character id of the Sign in with Apple key.") var keyID: String
    @Option(help: "The .p8 private key file.") var keyFile: String
    @Option(help: "The bundle id (native) or Services ID (web) the secret is for.") var clientID: String
    @Option(help: "How long the secret lives: 180d, 6h, 3600 … at most 15777000 s (about six months).") var lifetime = "1h"
    @Flag(help: "Print a JSON object instead.") var json = false

    func run() throws {
        let printer = Printer(json: json)
        let seconds = try parseDuration(lifetime)
        guard seconds <= AppleClientSecretProvider.maximumLifetime else {
            let message =
                "a lifetime of \(Int(seconds)) s is longer than Apple allows: secrets whose exp is more than 15777000 s (about 182 days) ahead of Apple's clock are refused with invalid_client. Use --lifetime 180d or less."
            throw printer.fail("invalid_configuration", message)
        }
        do {
            let keyPEM: String
            do { keyPEM = try String(contentsOfFile: keyFile, encoding: .utf8) } catch {
                throw LatchkeyError(.invalidConfiguration, "cannot read --key-file \(keyFile)")
            }
            let credentials = try AppleSigningCredentials(teamID: teamID, keyID: keyID, privateKeyPEM: keyPEM)
            let now = Date()
            let secret = try AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: clientID, issuedAt: now, lifetime: seconds)
            let expires = now.addingTimeInterval(seconds)
            if json {
                printer.emit([
                    "clientSecret": secret, "teamId": teamID, "keyId": keyID, "clientId": clientID, "issuedAt": Int(now.timeIntervalSince1970),
                    "expiresAt": Int(expires.timeIntervalSince1970),
                ])
            } else {
                print(secret)
                FileHandle.standardError.write(
                    Data("client secret for \(clientID) (team \(teamID), key \(keyID)); expires \(describeInstant(expires, now: now))\n".utf8))
            }
        } catch let error as LatchkeyError {
            throw printer.fail(error.errorCode, error.reason)
        }
    }
}

/// `latchkey pkce`: a verifier and its S256 challenge (RFC 7636).
struct PKCECommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pkce",
        abstract: "Print a PKCE verifier and its S256 challenge (RFC 7636).",
        discussion:
            "Examples:\n  latchkey pkce\n  latchkey pkce --verifier dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk --json\nExit codes: 0 printed, 1 the verifier is invalid, 64 usage."
    )

    @Option(help: "Use this verifier instead of a new random one.") var verifier: String?
    @Flag(help: "Print a JSON object instead.") var json = false

    func run() throws {
        let printer = Printer(json: json)
        let verifier = self.verifier ?? PKCE.makeVerifier()
        guard PKCE.isValidVerifier(verifier) else {
            let message = "a verifier has 43–128 characters from A–Z a–z 0–9 - . _ ~ (RFC 7636 §4.1); this one has \(verifier.count)"
            throw printer.fail("invalid_request", message)
        }
        let challenge = PKCE.challenge(for: verifier)
        if json {
            printer.emit(["codeVerifier": verifier, "codeChallenge": challenge, "codeChallengeMethod": "S256"])
        } else {
            print("code_verifier:         \(verifier)")
            print("code_challenge:        \(challenge)")
            print("code_challenge_method: S256")
        }
    }
}
