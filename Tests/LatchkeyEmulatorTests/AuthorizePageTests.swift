import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Testing

@Suite("Emulator: /auth/authorize")
struct AuthorizePageTests {
    static let redirect = EmulatorHarness.redirectURI

    static func query(_ items: [(String, String)]) -> String {
        "?" + items.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }.joined(separator: "&")
    }

    static let refused: [(String, [(String, String)], String)] = [
        ("missing client id", [("redirect_uri", redirect), ("response_type", "code")], "invalid_request"),
        ("unknown client id", [("client_id", "com.unknown"), ("redirect_uri", redirect), ("response_type", "code")], "invalid_client"),
        ("no redirect_uri", [("client_id", Fixtures.servicesID), ("response_type", "code")], "unauthorized_client"),
        (
            "unregistered redirect_uri", [("client_id", Fixtures.servicesID), ("redirect_uri", "https://evil.example/cb"), ("response_type", "code")],
            "unauthorized_client"
        ),
        (
            "localhost redirect_uri", [("client_id", Fixtures.servicesID), ("redirect_uri", "https://localhost/cb"), ("response_type", "code")],
            "invalid_request"
        ),
        ("IP redirect_uri", [("client_id", Fixtures.servicesID), ("redirect_uri", "https://127.0.0.1/cb"), ("response_type", "code")], "invalid_request"),
        (
            "plain HTTP redirect_uri", [("client_id", Fixtures.servicesID), ("redirect_uri", "http://app.example.com/callback"), ("response_type", "code")],
            "invalid_request"
        ),
        (
            "id_token alone", [("client_id", Fixtures.servicesID), ("redirect_uri", redirect), ("response_type", "id_token"), ("response_mode", "fragment")],
            "invalid_request"
        ),
        ("id_token by query", [("client_id", Fixtures.servicesID), ("redirect_uri", redirect), ("response_type", "code id_token")], "invalid_request"),
        (
            "scopes without form_post",
            [("client_id", Fixtures.servicesID), ("redirect_uri", redirect), ("response_type", "code"), ("scope", "name email"), ("response_mode", "query")],
            "invalid_request"
        ),
        (
            "unknown scope",
            [("client_id", Fixtures.servicesID), ("redirect_uri", redirect), ("response_type", "code"), ("scope", "phone"), ("response_mode", "form_post")],
            "invalid_scope"
        ),
    ]

    @Test("bad authorization requests are refused with a 400 JSON error", arguments: refused)
    func refusedRequests(name: String, items: [(String, String)], error: String) async throws {
        try await EmulatorHarness.with { harness in
            let answer = try await harness.send("GET", "/auth/authorize" + Self.query(items))
            #expect(answer.status == 400, "\(name)")
            #expect(answer.json["error"] as? String == error, "\(name): \(answer.text)")
        }
    }

    static let good: [(String, String)] = [
        ("client_id", Fixtures.servicesID), ("redirect_uri", redirect), ("response_type", "code id_token"), ("scope", "name email"),
        ("response_mode", "form_post"), ("state", "s-1"), ("nonce", "web-nonce"),
    ]

    @Test("a valid request shows a consent page with Continue, Cancel and Hide My Email")
    func page() async throws {
        try await EmulatorHarness.with { harness in
            let answer = try await harness.send("GET", "/auth/authorize" + Self.query(Self.good))
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"]?.hasPrefix("text/html") == true)
            #expect(answer.text.contains("Continue"))
            #expect(answer.text.contains("Cancel"))
            #expect(answer.text.contains("Hide My Email"))
        }
    }

    func field(_ name: String, in html: String) -> String? {
        guard let range = html.range(of: #"name="\#(name)" value=""#) else { return nil }
        let rest = html[range.upperBound...]
        return rest.prefix(while: { $0 != "\"" }).replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&amp;", with: "&")
    }

    @Test("Continue answers by form_post with code, id_token, state and the user JSON on the first sign-in only")
    func formPost() async throws {
        try await EmulatorHarness.with { harness in
            let decision =
                Self.good + [("email", "web@example.com"), ("given_name", "Web"), ("family_name", "User"), ("hide_my_email", "on"), ("action", "continue")]
            let first = try await harness.send("POST", "/auth/authorize", form: decision)
            #expect(first.status == 200)
            #expect(first.text.contains(#"action="\#(Self.redirect)""#))
            let code = try #require(field("code", in: first.text))
            let idToken = try #require(field("id_token", in: first.text))
            #expect(field("state", in: first.text) == "s-1")
            let user = try #require(field("user", in: first.text))
            let userJSON = try JSONSerialization.jsonObject(with: Data(user.utf8)) as? [String: Any]
            #expect((userJSON?["email"] as? String)?.hasSuffix("@privaterelay.appleid.com") == true)
            #expect((userJSON?["name"] as? [String: String])?["firstName"] == "Web")
            let identity = try await harness.verifier.verify(idToken, expecting: .init(rawNonce: "web-nonce", authorizationCode: code))
            #expect(identity.audience == Fixtures.servicesID)
            #expect(identity.realUserStatus == nil)
            // The web code is redeemed with the Services ID and the same redirect_uri.
            await #expect(throws: LatchkeyError(.invalidGrant, "")) { _ = try await harness.apple.exchangeCode(code, clientID: Fixtures.servicesID) }
            let second = try await harness.send("POST", "/auth/authorize", form: decision)
            #expect(field("user", in: second.text) == nil)
            let secondCode = try #require(field("code", in: second.text))
            _ = try await harness.apple.exchangeCode(secondCode, clientID: Fixtures.servicesID, redirectURI: Self.redirect)
        }
    }

    @Test("query and fragment modes redirect; Cancel answers user_cancelled_authorize")
    func redirects() async throws {
        try await EmulatorHarness.with { harness in
            let base: [(String, String)] = [("client_id", Fixtures.servicesID), ("redirect_uri", Self.redirect), ("response_type", "code"), ("state", "xyz")]
            let query = try await harness.send("POST", "/auth/authorize", form: base + [("response_mode", "query"), ("action", "continue")])
            #expect(query.status == 302)
            #expect(query.headers["location"]?.hasPrefix(Self.redirect + "?code=c") == true)
            #expect(query.headers["location"]?.hasSuffix("&state=xyz") == true)
            let fragment = try await harness.send("POST", "/auth/authorize", form: base + [("response_mode", "fragment"), ("action", "continue")])
            #expect(fragment.headers["location"]?.hasPrefix(Self.redirect + "#code=") == true)
            let cancel = try await harness.send("POST", "/auth/authorize", form: base + [("action", "cancel")])
            #expect(cancel.headers["location"] == Self.redirect + "?error=user_cancelled_authorize&state=xyz")
        }
    }
}
