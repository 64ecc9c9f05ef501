import Foundation
import LatchkeyTestSupport
import Testing

/// Seeded mutations (``Mutations``) of request bodies, sent to a running server over HTTP: form and JSON decoding of
/// every endpoint that reads a body before authentication. Every answer must be a 2xx or a 4xx with its error code,
/// never a 5xx; a crash ends the test process.
@Suite("Hostile input: seeded mutations of request bodies")
struct HostileRequestTests {
    struct Target: CustomTestStringConvertible, Sendable {
        let path: String
        let contentType: String
        let corpus: [String]
        var testDescription: String { "\(path) (\(contentType))" }
    }

    static let form = "application/x-www-form-urlencoded"
    static let targets: [Target] = [
        Target(
            path: "/v1/auth/apple", contentType: "application/json",
            corpus: [
                #"{"identityToken":"eyJhbGciOiJSUzI1NiIsImtpZCI6Ilc2V2NPS0IifQ.eyJzdWIiOiJ4In0.c2ln","authorizationCode":"c1","rawNonce":"n","fullName":{"givenName":"Ann","familyName":"Lee"}}"#,
                #"{"identityToken":"a.b.c","rawNonce":"n","invite":"inv","clientId":"com.example.app"}"#,
            ]),
        Target(
            path: "/v1/auth/google", contentType: "application/json", corpus: [#"{"idToken":"a.b.c","rawNonce":"n","code":"c","codeVerifier":"v"}"#]),
        Target(
            path: "/v1/token", contentType: form,
            corpus: ["grant_type=refresh_token&refresh_token=lkr_abcdef", "grant_type=refresh_token&refresh_token=a%2Bb+c"]),
        Target(path: "/v1/token", contentType: "application/json", corpus: [#"{"grant_type":"refresh_token","refresh_token":"lkr_abcdef"}"#]),
        Target(
            path: "/oauth2/token", contentType: form,
            corpus: [
                "grant_type=authorization_code&code=abc&redirect_uri=http%3A%2F%2F127.0.0.1%3A5000%2Fcallback&code_verifier=\(String(repeating: "v", count: 43))&client_id=com.example.app",
                "grant_type=refresh_token&refresh_token=lkr_x&client_id=com.example.app&client_secret=s",
            ]),
        Target(path: "/oauth2/revoke", contentType: form, corpus: ["token=lkr_x&token_type_hint=refresh_token&client_id=com.example.app"]),
        Target(
            path: "/oauth2/callback/apple", contentType: form,
            corpus: [#"state=s1&code=c1&user=%7B%22name%22%3A%7B%22firstName%22%3A%22A%22%7D%7D"#, "error=user_cancelled_authorize&state=s"]),
        Target(path: "/v1/apple/notifications", contentType: "application/json", corpus: [#"{"payload":"eyJhbGciOiJSUzI1NiJ9.eyJldmVudHMiOiJ7fSJ9.c2ln"}"#]),
    ]

    @Test("every mutated body gets a 2xx or a 4xx with an error code, never a 5xx", arguments: targets)
    func bodies(target: Target) async throws {
        try await ServerHarness.with(configure: { $0.rateLimit.perClientIP = 1_000_000 }) { harness in
            var failures: [String] = []
            let result = try await Mutations.run(target.corpus.map { Array($0.utf8) }, standard: 300) { input in
                let answer = try await harness.send("POST", target.path, contentType: target.contentType, bytes: input)
                let isPage = answer.headers["content-type"]?.hasPrefix("text/html") == true
                if answer.status >= 500 || (answer.status >= 400 && !isPage && answer.error == nil) {
                    if failures.count < 5 { failures.append("\(answer.status) for base64 \(Data(input).base64EncodedString())") }
                }
                return answer.status < 300
            }
            #expect(failures.isEmpty, "\(target.path): \(failures)")
            #expect(result.total > target.corpus.count)
        }
    }
}
