import LatchkeyCore
import LatchkeyJOSE
import Testing

@Suite("Browser-flow clients: redirect URI matching")
struct OAuthClientRedirectTests {
    static let client = OAuthClient(
        clientID: "com.example.app",
        redirectURIs: ["http://127.0.0.1/callback", "http://[::1]/callback", "http://localhost:53121/callback", "com.example.app:/oauth2redirect"])

    @Test(
        "a loopback redirect URI matches at any port (RFC 8252 §7.3)",
        arguments: [
            "http://127.0.0.1:8080/callback", "http://[::1]:8080/callback", "http://127.0.0.1/callback", "http://[::1]/callback",
            "http://127.0.0.1:1/callback", "http://127.0.0.1:65535/callback", "http://localhost:8080/callback", "http://localhost/callback",
        ])
    func anyPort(uri: String) {
        #expect(Self.client.allowsRedirect(to: uri))
        #expect(OAuthClient.isLoopback(uri))
    }

    @Test(
        "a loopback redirect URI whose port is not a port (out of range, signed, empty, not ASCII digits) matches nothing",
        arguments: [
            ":99999999999999999999", ":65536", ":0", ":00000", ":-1", ":+80", ":", ":８０８０", ":80:80", ":8080a", ":0x50", ": 80",
        ])
    func notAPort(port: String) {
        for host in ["127.0.0.1", "[::1]", "localhost"] {
            let uri = "http://\(host)\(port)/callback"
            #expect(!Self.client.allowsRedirect(to: uri), "\(uri)")
            #expect(!OAuthClient.isLoopback(uri), "\(uri)")
        }
    }

    @Test("other URIs match exactly: another path, host or scheme is refused")
    func exact() {
        #expect(Self.client.allowsRedirect(to: "com.example.app:/oauth2redirect"))
        for uri in [
            "http://127.0.0.1:8080/other", "http://127.0.0.2:8080/callback", "https://127.0.0.1:8080/callback", "com.example.app:/other",
            "http://127.0.0.1:8080/callback#fragment",
        ] {
            #expect(!Self.client.allowsRedirect(to: uri), "\(uri)")
        }
    }
}
