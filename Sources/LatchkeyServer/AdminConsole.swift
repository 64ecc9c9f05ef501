import Foundation
import HTTPTypes
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels

/// The admin console at `/admin/`: a page, its script and its style, all served from here, over the admin API.
/// One signs in by pasting an admin key; `POST /admin/session` checks it and sets a cookie holding a sealed session
/// (the key's name and hash and an expiry, never the key), which the admin API then accepts as it accepts the key
/// itself. Writes through the cookie must come from this server's own origin. While no admin key exists every
/// console path answers 404, as the admin API does.
extension LatchkeyServer {
    /// The console's cookie; its path is `/admin`, so the browser sends it to the console and the admin API only.
    static let consoleCookie = "latchkey_admin"
    /// How long a console session lasts.
    static let consoleSessionLifetime: TimeInterval = 12 * 3600

    func addConsoleRoutes(to router: Router<LatchkeyRequestContext>) {
        router.get("/admin/") { _, _ in
            guard try await !store.adminKeys().isEmpty else { return AdminConsolePage.off() }
            return AdminConsolePage.page()
        }
        router.get("/admin/console.js") { _, _ in
            try await requireConsoleOn()
            return AdminConsolePage.asset(AdminConsolePage.script, contentType: "text/javascript; charset=utf-8")
        }
        router.get("/admin/console.css") { _, _ in
            try await requireConsoleOn()
            return AdminConsolePage.asset(AdminConsolePage.style, contentType: "text/css; charset=utf-8")
        }
        router.get("/admin/session") { request, _ in try await showConsoleSession(request) }
        router.post("/admin/session") { request, _ in try await startConsoleSession(request) }
        router.post("/admin/session/logout") { request, _ in try await endConsoleSession(request) }
    }

    /// 404, as every admin path answers, while no admin key exists.
    private func requireConsoleOn() async throws {
        if try await store.adminKeys().isEmpty { throw Self.adminOff }
    }

    static let adminOff = APIError(
        status: .notFound, code: "not_found", description: "no such endpoint (the admin API is off until `latchkey admin-keys create`)")

    // MARK: - Sessions

    /// `GET /admin/session`: who the console's cookie signs in as.
    func showConsoleSession(_ request: Request) async throws -> Response {
        let (authentication, expiresAt) = try await consoleAuthentication(request)
        switch authentication {
        case .disabled: throw Self.adminOff
        case .refused: throw Self.consoleSessionEnded
        case .key(let key): return JSONBody.response(ConsoleSessionResponse(name: key.name, readOnly: key.readOnly, expiresAt: expiresAt ?? timeSource.now))
        }
    }

    /// `POST /admin/session`: checks the admin key (JSON `{"key": "lka_…"}` or the form field `key`) and sets the
    /// console's cookie. A form is answered with a redirect to the console.
    func startConsoleSession(_ request: Request) async throws -> Response {
        try await requireConsoleOn()
        try checkConsoleOrigin(request, required: false)
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        let form = contentType.hasPrefix("application/x-www-form-urlencoded")
        let secret: String
        if form {
            let fields = try Self.formFields(bytes)
            try Self.allowOnly(["key"], in: fields)
            guard let key = fields["key"], !key.isEmpty else { throw APIError.invalidRequest("the form's key is missing") }
            secret = key
        } else if contentType.hasPrefix("application/json") {
            secret = try decodeJSON(ConsoleSignInRequest.self, bytes).key
        } else {
            throw APIError.invalidRequest("send application/json ({\"key\": \"lka_…\"}) or a form with the field key")
        }
        guard case .key(let key) = try await adminKeys.authenticate(secret.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw APIError(
                status: .unauthorized, code: "invalid_token", description: "that is not an admin key, or it was revoked",
                headers: [.wwwAuthenticate: #"Bearer realm="latchkey-admin", error="invalid_token""#])
        }
        let expiresAt = timeSource.now.addingTimeInterval(Self.consoleSessionLifetime)
        let sealed = try consoleBox.seal("\(key.keyHash) \(Int(expiresAt.timeIntervalSince1970)) \(key.name)")
        try await administration.record("admin_console_signed_in", by: .key(key.name))
        let cookie = consoleCookieHeader(value: sealed, maxAge: Int(Self.consoleSessionLifetime))
        if form {
            return Response(status: .seeOther, headers: [.location: "/admin/", .setCookie: cookie, .cacheControl: "no-store"])
        }
        return JSONBody.response(
            ConsoleSessionResponse(
                name: key.name, readOnly: key.readOnly, expiresAt: Date(timeIntervalSince1970: expiresAt.timeIntervalSince1970.rounded(.down))),
            headers: [.setCookie: cookie])
    }

    /// `POST /admin/session/logout`: clears the cookie.
    func endConsoleSession(_ request: Request) async throws -> Response {
        try await requireConsoleOn()
        try checkConsoleOrigin(request, required: false)
        if case (.key(let key), _) = try await consoleAuthentication(request) {
            try await administration.record("admin_console_signed_out", by: .key(key.name))
        }
        return Response(status: .noContent, headers: [.setCookie: consoleCookieHeader(value: "", maxAge: 0), .cacheControl: "no-store"])
    }

    static let consoleSessionEnded = APIError(
        status: .unauthorized, code: "invalid_token",
        description: "the console session has ended (signed out, expired, or its admin key was revoked): sign in again",
        headers: [.wwwAuthenticate: #"Bearer realm="latchkey-admin", error="invalid_token""#])

    /// What the request's console cookie proves: no cookie, a forged or expired one, or one whose admin key was revoked
    /// (or renamed) is `.refused`; and when the session ends.
    func consoleAuthentication(_ request: Request) async throws -> (AdminKeys.Authentication, Date?) {
        if let value = Self.cookie(Self.consoleCookie, in: request), let opened = try? consoleBox.open(value) {
            let parts = opened.split(separator: " ", maxSplits: 2).map(String.init)
            if parts.count == 3, let seconds = Int(parts[1]) {
                let expiresAt = Date(timeIntervalSince1970: TimeInterval(seconds))
                if timeSource.now < expiresAt, let key = try await store.adminKey(hash: parts[0]), key.revokedAt == nil, key.name == parts[2] {
                    return (.key(key), expiresAt)
                }
            }
        }
        return (try await store.adminKeys().isEmpty ? .disabled : .refused, nil)
    }

    /// Seals console sessions with a key of their own, derived from the encryption key.
    private var consoleBox: SecretBox { SecretBox(key: box.derivedKey(purpose: "latchkey admin console session v1")) }

    /// `Secure` unless the issuer is plain `http` on loopback (a development server), where a browser would drop it.
    var consoleCookieIsSecure: Bool {
        guard let components = URLComponents(string: configuration.issuer), components.scheme?.lowercased() == "http" else { return true }
        return !OAuthClient.loopbackHosts.contains(components.host?.lowercased() ?? "")
    }

    func consoleCookieHeader(value: String, maxAge: Int) -> String {
        "\(Self.consoleCookie)=\(value); Path=/admin; Max-Age=\(maxAge); HttpOnly; SameSite=Strict" + (consoleCookieIsSecure ? "; Secure" : "")
    }

    /// The value of the cookie `name`, from every `Cookie` header of the request.
    static func cookie(_ name: String, in request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name {
                    let value = parts[1].trimmingCharacters(in: .whitespaces)
                    return value.isEmpty ? nil : value
                }
            }
        }
        return nil
    }

    /// This server's origin, as browsers send it in `Origin`: the issuer's scheme, host and port (none when it is the
    /// scheme's default).
    var consoleOrigin: String {
        guard let components = URLComponents(string: configuration.issuer), let scheme = components.scheme?.lowercased(),
            let host = components.percentEncodedHost?.lowercased()
        else { return configuration.issuer }
        let hostPart = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        let port = components.port.flatMap { (scheme, $0) == ("https", 443) || (scheme, $0) == ("http", 80) ? nil : $0 }
        return "\(scheme)://\(hostPart)" + (port.map { ":\($0)" } ?? "")
    }

    /// A write through the console's cookie must come from the console: its `Origin` is this server's (a browser sends
    /// one with every `fetch` that is not a `GET`). `required` false: only an `Origin` that differs is refused.
    func checkConsoleOrigin(_ request: Request, required: Bool) throws {
        let origin = request.headers[.origin]
        if origin == nil && !required { return }
        guard let origin, origin.lowercased() == consoleOrigin else {
            throw APIError(
                status: .forbidden, code: "invalid_origin",
                description: "a console write must come from \(consoleOrigin) (Origin: \(origin.map { String($0.prefix(100)) } ?? "none"))")
        }
    }
}
