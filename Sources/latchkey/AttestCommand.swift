import ArgumentParser
import ExtrasBase64
import Foundation
import LatchkeyWebAuthn

/// `latchkey attest verify`: one App Attest attestation checked offline, like `token verify`.
struct AttestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attest",
        abstract: "Check App Attest attestations offline.",
        subcommands: [Verify.self]
    )

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check one App Attest attestation (read from standard input) against Apple's rules.",
            discussion: """
                The attestation is read from standard input: base64 as DCAppAttestService hands it over, or its raw CBOR
                bytes. Each check prints one line; the leaf certificate is judged at --at (default: now), since leaves
                live from a day to a year.
                Examples:
                  latchkey attest verify --app-id ABCDE12345.com.example.app --key-id KEYID --client-data-hash HASH < attestation.b64
                  latchkey attest verify --app-id … --key-id … --client-data-hash … --environment development --at 2024-06-27T12:00:00Z < a.b64
                Exit codes: 0 every check passed, 1 one failed (named on the last line), 64 usage.
                """
        )

        @Option(name: .customLong("app-id"), help: "The App ID, TEAMID.bundle.id.") var appID: String
        @Option(name: .customLong("key-id"), help: "The key id, base64 (as generateKey returned it).") var keyID: String
        @Option(name: .customLong("client-data-hash"), help: "The client data hash given to attestKey, base64.") var clientDataHash: String
        @Option(help: "production (default) or development.") var environment = "production"
        @Option(help: "The time to judge the certificates at: ISO 8601 (2024-06-27T12:00:00Z) or Unix seconds. Default: now.") var at: String?
        @Option(help: "A PEM file with the root CA to trust instead of Apple's App Attestation Root CA (the emulator's, say).") var root: String?
        @Flag(help: "Print a JSON object instead.") var json = false

        func run() throws {
            let printer = Printer(json: json)
            guard let keyID = decodeBase64(keyID) else { throw ValidationError("--key-id is not base64") }
            guard let clientDataHash = decodeBase64(clientDataHash) else { throw ValidationError("--client-data-hash is not base64") }
            guard let environment = AppAttestEnvironment(rawValue: environment) else { throw ValidationError("--environment is production or development") }
            let time = try at.map(parseInstant) ?? Date()
            let verifier: AppAttestVerifier
            do {
                let rootPEM = try root.map { try String(contentsOfFile: $0, encoding: .utf8) } ?? AppAttestVerifier.appleRootCertificatePEM
                verifier = try AppAttestVerifier(appIDs: [appID], environment: environment, rootCertificatePEM: rootPEM)
            } catch {
                throw ValidationError("--root is not a readable PEM certificate")
            }
            let input = FileHandle.standardInput.readDataToEndOfFile()
            let text = String(decoding: input, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            let attestation = decodeBase64(text) ?? Array(input)
            let (results, _) = verifier.checkAttestation(attestation, keyID: keyID, clientDataHash: clientDataHash, at: time)
            let failed = results.first { !$0.passed }
            if json {
                printer.emit([
                    "valid": failed == nil, "firstFailure": failed.map { $0.check.rawValue as Any } ?? NSNull(),
                    "checks": results.map { ["check": $0.check.rawValue, "passed": $0.passed, "reason": $0.failure.map { $0 as Any } ?? NSNull()] },
                ])
            } else {
                for result in results {
                    print(
                        result.passed
                            ? printer.green("ok    ") + result.check.rawValue : printer.red("FAIL  ") + "\(result.check.rawValue): \(result.failure ?? "")")
                }
                print(failed.map { printer.red("invalid: the \($0.check.rawValue) check failed") } ?? printer.green("valid: every check passed"))
            }
            if failed != nil { throw ExitStatus.failure }
        }
    }
}

/// Standard base64 or base64url, padded or not; nil for anything else.
func decodeBase64(_ text: String) -> [UInt8]? {
    let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
    guard !trimmed.isEmpty else { return nil }
    if let bytes = try? Base64.decode(string: trimmed) { return bytes }
    return try? Base64.decode(string: trimmed.trimmingCharacters(in: CharacterSet(charactersIn: "=")), options: [.base64UrlAlphabet, .omitPaddingCharacter])
}
