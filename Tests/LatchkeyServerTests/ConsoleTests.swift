import Foundation
import LatchkeyCore
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// The admin console at `/admin/`: its page and headers, and its session: a cookie that is not the admin key, checked
/// on every request, ended by revoking the key or signing out; writes through it only from the server's own origin.
@Suite("Server: the admin console")
struct ConsoleTests {
    /// The issuer of ``RouterHarness``'s default configuration: `http://host:port`.
    static let origin = "http://127.0.0.1:8080"

    /// Signs in with `key` and returns the `Set-Cookie` header and the `name=value` pair to send back.
    static func signIn(_ harness: RouterHarness, key: String, origin: String? = ConsoleTests.origin) async throws -> (setCookie: String, cookie: String) {
        let answer = try await harness.send(
            "POST", "/admin/session", body: #"{"key": "\#(key)"}"#, headers: origin.map { [("Origin", $0)] } ?? [])
        #expect(answer.status == 200, "\(answer.text)")
        let setCookie = try #require(answer.headers["set-cookie"])
        return (setCookie, String(setCookie.prefix { $0 != ";" }))
    }

    @Test("the page: 404 while no admin key exists; then served with a strict CSP, nosniff and no-store, its script and style from /admin/")
    func page() async throws {
        try await RouterHarness.with { harness in
            let off = try await harness.send("GET", "/admin/")
            #expect(off.status == 404 && off.headers["content-type"]?.hasPrefix("text/html") == true && off.text.contains("admin-keys create"))
            for path in ["/admin/console.js", "/admin/console.css", "/admin/session"] {
                #expect(try await harness.send("GET", path).status == 404, "\(path)")
            }
            #expect(try await harness.send("POST", "/admin/session", body: #"{"key": "lka_x"}"#).status == 404)

            _ = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: false)
            for path in ["/admin/", "/admin"] {
                let page = try await harness.send("GET", path)
                #expect(page.status == 200)
                #expect(page.headers["content-type"] == "text/html; charset=utf-8")
                let csp = try #require(page.headers["content-security-policy"])
                for directive in [
                    "default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'self'",
                    "base-uri 'none'",
                ] {
                    #expect(csp.contains(directive), "\(csp)")
                }
                #expect(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"))
                #expect(page.headers["x-content-type-options"] == "nosniff")
                #expect(page.headers["cache-control"] == "no-store")
                #expect(page.headers["referrer-policy"] == "no-referrer")
                // Nothing inline for the CSP to allow: the one script and the one style sheet are the server's files.
                #expect(page.text.contains(#"<html lang="en">"#))
                #expect(page.text.components(separatedBy: "<script").count == 2 && page.text.contains(#"<script src="/admin/console.js" defer></script>"#))
                #expect(!page.text.contains("<style") && !page.text.contains(" style="))
                #expect(page.text.range(of: #" on[a-z]+="#, options: .regularExpression) == nil, "an inline event handler")
            }
            let script = try await harness.send("GET", "/admin/console.js")
            #expect(script.status == 200 && script.headers["content-type"] == "text/javascript; charset=utf-8")
            #expect(script.headers["x-content-type-options"] == "nosniff" && script.text.hasPrefix("\"use strict\";"))
            // Everything shown is set as text: no HTML parsing of what the API answers.
            #expect(!script.text.contains("innerHTML") && !script.text.contains("eval("))
            let style = try await harness.send("GET", "/admin/console.css")
            #expect(style.status == 200 && style.headers["content-type"] == "text/css; charset=utf-8")
        }
    }

    @Test("signing in sets an HttpOnly, SameSite=Strict cookie on /admin for 12 hours, not the key; Secure unless the issuer is loopback http")
    func cookieFlags() async throws {
        for (publicURL, secure) in [
            (nil, false), ("http://localhost:9000", false), ("http://[::1]:9000", false), ("https://auth.example.com", true),
            ("http://auth.internal.example", true),
        ] as [(String?, Bool)] {
            try await RouterHarness.with(configure: { $0.publicURL = publicURL }) { harness in
                let origin = harness.server.configuration.issuer
                let key = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: false).secret
                let (setCookie, cookie) = try await Self.signIn(harness, key: key, origin: nil)
                let attributes = setCookie.components(separatedBy: "; ")
                #expect(cookie.hasPrefix("latchkey_admin=v1."))
                #expect(!setCookie.contains(key) && !setCookie.contains(AdminKeys.hash(key)))
                #expect(attributes.contains("HttpOnly") && attributes.contains("SameSite=Strict") && attributes.contains("Path=/admin"))
                #expect(attributes.contains("Max-Age=43200"))
                #expect(attributes.contains("Secure") == secure, "\(publicURL ?? "no publicUrl"): \(setCookie)")
                // The cookie signs the console in; its origin is the issuer's.
                let session = try await harness.send("GET", "/admin/session", headers: [("Cookie", cookie)]).decode(ConsoleSessionResponse.self)
                #expect(session.name == "ops" && !session.readOnly)
                #expect(abs(session.expiresAt.timeIntervalSince(harness.clock.now) - 43_200) < 2)
                let write = try await harness.send("POST", "/admin/v1/invites", body: "{}", headers: [("Cookie", cookie), ("Origin", origin)])
                #expect(write.status == 201, "\(origin): \(write.text)")
            }
        }
    }

    @Test("a form sign-in is sent on to the console; a missing or malformed key is 400, a wrong or revoked one 401, and nothing is set")
    func signInRefusals() async throws {
        try await RouterHarness.with { harness in
            let keys = AdminKeys(store: harness.store)
            let key = try await keys.create(name: "ops", readOnly: false).secret
            let revoked = try await keys.create(name: "old", readOnly: false).secret
            #expect(try await harness.store.revokeAdminKey(name: "old", at: harness.clock.now))

            let form = try await harness.send(
                "POST", "/admin/session", body: "key=\(key)", contentType: "application/x-www-form-urlencoded", headers: [("Origin", Self.origin)])
            #expect(form.status == 303 && form.headers["location"] == "/admin/" && form.headers["set-cookie"]?.hasPrefix("latchkey_admin=v1.") == true)

            for wrong in [revoked, String(key.dropLast()) + "A", "lka_" + String(repeating: "A", count: 43), "not a key", ""] {
                let answer = try await harness.send("POST", "/admin/session", body: #"{"key": "\#(wrong)"}"#)
                #expect((answer.status, answer.error) == (401, "invalid_token"), "\(wrong.prefix(8)): \(answer.text)")
                #expect(answer.headers["set-cookie"] == nil)
            }
            for (body, contentType) in [
                ("{}", "application/json"), ("[]", "application/json"), ("key=", "application/x-www-form-urlencoded"),
                ("key=\(key)&other=1", "application/x-www-form-urlencoded"), (key, "text/plain"),
            ] {
                let answer = try await harness.send("POST", "/admin/session", body: body, contentType: contentType)
                #expect((answer.status, answer.error) == (400, "invalid_request"), "\(body.prefix(12)) \(contentType): \(answer.text)")
            }
            // An admin key in Authorization is not a console session.
            let bearer = try await harness.send("GET", "/admin/session", headers: [("Authorization", "Bearer \(key)")])
            #expect((bearer.status, bearer.error) == (401, "invalid_token"))
        }
    }

    @Test("the cookie is checked on every request: forged, expired, or its key revoked, it is 401")
    func sessionChecked() async throws {
        try await RouterHarness.with { harness in
            let key = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: false).secret
            _ = try await AdminKeys(store: harness.store).create(name: "other", readOnly: false)
            let (_, cookie) = try await Self.signIn(harness, key: key)
            #expect(try await harness.send("GET", "/admin/v1/users", headers: [("Cookie", "theme=dark; " + cookie)]).status == 200)

            let value = String(cookie.dropFirst("latchkey_admin=".count))
            var tampered = Array(value)
            tampered[tampered.count / 2] = tampered[tampered.count / 2] == "A" ? "B" : "A"
            for forged in ["latchkey_admin=\(String(tampered))", "latchkey_admin=v1.AAAA", "latchkey_admin=\(key)", "latchkey_admin="] {
                let answer = try await harness.send("GET", "/admin/v1/users", headers: [("Cookie", forged)])
                #expect((answer.status, answer.error) == (401, "invalid_token"), "\(forged.prefix(24))")
            }
            // A cookie sealed by another server (another encryption key) opens nowhere else.
            try await RouterHarness.with { other in
                _ = try await AdminKeys(store: other.store).create(name: "ops", readOnly: false)
                #expect(try await other.send("GET", "/admin/v1/users", headers: [("Cookie", cookie)]).status == 401)
            }

            harness.clock.advance(12 * 3600 - 60)
            #expect(try await harness.send("GET", "/admin/session", headers: [("Cookie", cookie)]).status == 200)
            harness.clock.advance(120)
            let expired = try await harness.send("GET", "/admin/v1/users", headers: [("Cookie", cookie)])
            #expect((expired.status, expired.error) == (401, "invalid_token"))
            #expect(expired.headers["www-authenticate"]?.contains(#"realm="latchkey-admin""#) == true)

            let (_, fresh) = try await Self.signIn(harness, key: key)
            #expect(try await harness.send("GET", "/admin/v1/audit", headers: [("Cookie", fresh)]).status == 200)
            #expect(try await harness.store.revokeAdminKey(name: "ops", at: harness.clock.now))
            let ended = try await harness.send("GET", "/admin/v1/audit", headers: [("Cookie", fresh)])
            #expect((ended.status, ended.error) == (401, "invalid_token"))
            #expect(try await harness.send("GET", "/admin/session", headers: [("Cookie", fresh)]).status == 401)
        }
    }

    @Test("a write through the cookie needs this server's Origin (403 invalid_origin without it); an admin key in Authorization needs none")
    func originChecked() async throws {
        try await RouterHarness.with { harness in
            let key = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: false).secret
            let (_, cookie) = try await Self.signIn(harness, key: key)
            for origin in [nil, "https://evil.example", "http://127.0.0.1:8081", "http://localhost:8080", "null"] as [String?] {
                let headers = [("Cookie", cookie)] + (origin.map { [("Origin", $0)] } ?? [])
                for (method, path) in [("POST", "/admin/v1/invites"), ("POST", "/admin/v1/keys/rotate"), ("DELETE", "/admin/v1/sessions/none")] {
                    let answer = try await harness.send(method, path, body: method == "POST" ? "{}" : nil, headers: headers)
                    #expect((answer.status, answer.error) == (403, "invalid_origin"), "\(method) \(path) from \(origin ?? "nowhere"): \(answer.text)")
                }
            }
            #expect(try await harness.store.invites().isEmpty)
            #expect(try await harness.send("GET", "/admin/v1/invites", headers: [("Cookie", cookie)]).status == 200)
            let same = try await harness.send("POST", "/admin/v1/invites", body: "{}", headers: [("Cookie", cookie), ("Origin", Self.origin)])
            #expect(same.status == 201)
            let api = try await harness.send("POST", "/admin/v1/invites", body: "{}", headers: [("Authorization", "Bearer \(key)")])
            #expect(api.status == 201)
            // Signing in and out from another origin is refused too.
            let elsewhere = try await harness.send("POST", "/admin/session", body: #"{"key": "\#(key)"}"#, headers: [("Origin", "https://evil.example")])
            #expect((elsewhere.status, elsewhere.error) == (403, "invalid_origin"))
            #expect(elsewhere.headers["set-cookie"] == nil)
            let logout = try await harness.send("POST", "/admin/session/logout", headers: [("Cookie", cookie), ("Origin", "https://evil.example")])
            #expect(logout.status == 403)
        }
    }

    @Test("a read-only key's console reads, and its writes through the cookie get 403 insufficient_scope")
    func readOnly() async throws {
        try await RouterHarness.with { harness in
            let reader = try await AdminKeys(store: harness.store).create(name: "support", readOnly: true).secret
            let (_, cookie) = try await Self.signIn(harness, key: reader)
            let session = try await harness.send("GET", "/admin/session", headers: [("Cookie", cookie)]).decode(ConsoleSessionResponse.self)
            #expect(session.name == "support" && session.readOnly)
            for path in ["/admin/v1/users", "/admin/v1/audit", "/admin/v1/keys", "/admin/v1/findings", "/admin/v1/webhooks/deliveries"] {
                #expect(try await harness.send("GET", path, headers: [("Cookie", cookie)]).status == 200, "\(path)")
            }
            let headers = [("Cookie", cookie), ("Origin", Self.origin)]
            for (method, path) in [
                ("POST", "/admin/v1/invites"), ("POST", "/admin/v1/keys/rotate"), ("DELETE", "/admin/v1/users/u"), ("PUT", "/admin/v1/users/u/claims"),
                ("POST", "/admin/v1/users/u/disable"), ("DELETE", "/admin/v1/sessions/s"), ("POST", "/admin/v1/webhooks/deliveries/d/retry"),
            ] {
                let answer = try await harness.send(method, path, body: method == "DELETE" ? nil : "{}", headers: headers)
                #expect((answer.status, answer.error) == (403, "insufficient_scope"), "\(method) \(path): \(answer.text)")
            }
            #expect(try await harness.store.signingKeys().count == 1)
        }
    }

    @Test("signing out clears the cookie and is audited, as signing in is")
    func signOut() async throws {
        try await RouterHarness.with { harness in
            let key = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: false).secret
            let (_, cookie) = try await Self.signIn(harness, key: key)
            let out = try await harness.send("POST", "/admin/session/logout", headers: [("Cookie", cookie), ("Origin", Self.origin)])
            #expect(out.status == 204)
            let cleared = try #require(out.headers["set-cookie"])
            #expect(cleared.hasPrefix("latchkey_admin=; Path=/admin; Max-Age=0;") && cleared.contains("HttpOnly"))
            // The browser drops the cookie; without it the console is signed out. Signing out again changes nothing.
            #expect(try await harness.send("GET", "/admin/session").status == 401)
            #expect(try await harness.send("POST", "/admin/session/logout").status == 204)
            let events = try await harness.store.auditEvents(AuditSearch(limit: 10)).map { "\($0.kind) \($0.detail)" }
            #expect(events.contains("admin_console_signed_in key=ops") && events.contains("admin_console_signed_out key=ops"), "\(events)")
        }
    }
}
