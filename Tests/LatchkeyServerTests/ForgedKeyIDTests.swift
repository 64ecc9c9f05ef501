import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Server: identity tokens naming unknown keys", .enabled(if: loadTestsEnabled, "a load suite: LATCHKEY_LOAD_TESTS=1"))
struct ForgedKeyIDTests {
    static func keyFetches(_ harness: ServerHarness) async throws -> Int {
        try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/keys" }.count
    }

    /// Sends every body to `POST /v1/auth/apple` at once and returns the answers.
    static func signInAtOnce(_ harness: ServerHarness, _ bodies: [[String: String]]) async throws -> [ServerHarness.Answer] {
        try await withThrowingTaskGroup(of: ServerHarness.Answer.self) { group in
            for body in bodies { group.addTask { try await harness.post("/v1/auth/apple", json: body) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    /// Genuine tokens from the emulator for `count` new users, with their raw nonces.
    static func genuineTokens(_ harness: ServerHarness, count: Int) async throws -> [[String: String]] {
        try await withThrowingTaskGroup(of: [String: String].self) { group in
            for index in 0..<count {
                group.addTask {
                    let sub = try await harness.emulator.createUser(email: "user\(index)@example.com")
                    let nonce = "nonce-\(index)"
                    let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
                    return ["identityToken": apple.identityToken, "rawNonce": nonce]
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    @Test(
        "500 tokens with the kid of a key Apple just rotated in, at once, cause exactly one key fetch; 500 forged kids at once cause at most the refetch burst")
    func keyFetchesAreBounded() async throws {
        try await ServerHarness.with { harness in
            _ = try await harness.signedIn()
            let warm = try await Self.keyFetches(harness)
            #expect(warm >= 1)

            _ = try await harness.emulator.send("POST", "/emulator/keys/rotate")
            let rotated = try await Self.genuineTokens(harness, count: 500)
            let signedIn = try await Self.signInAtOnce(harness, rotated)
            #expect(signedIn.allSatisfy { $0.status == 200 }, "\(signedIn.first { $0.status != 200 }?.text ?? "")")
            let afterRotation = try await Self.keyFetches(harness)
            #expect(afterRotation - warm == 1)

            // The same genuine token, its header naming a different random key each time: the signature no longer matters,
            // the key lookup comes first.
            let template = rotated[0]["identityToken"]!.split(separator: ".")
            let forged = (0..<500).map { _ in
                let header = #"{"alg":"RS256","kid":"\#(UUID().uuidString)"}"#
                return ["identityToken": base64URL(Array(header.utf8)) + "." + template[1] + "." + template[2], "rawNonce": "nonce-0"]
            }
            let refused = try await Self.signInAtOnce(harness, forged)
            #expect(refused.allSatisfy { (400..<500).contains($0.status) && $0.error != nil }, "\(refused.first { $0.status >= 500 }?.text ?? "")")
            let floodFetches = try await Self.keyFetches(harness) - afterRotation
            let burst = JWKSCache.Configuration().unknownKeyRefetchBurst
            #expect(floodFetches >= 1 && floodFetches <= burst, "\(floodFetches) fetches for 500 forged kids")
            print("JWKS fetches: 500 tokens with a rotated kid → \(afterRotation - warm); 500 forged random kids → \(floodFetches) (burst \(burst))")
        }
    }
}
