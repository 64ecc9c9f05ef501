public import Foundation
import LatchkeyCore
import LatchkeyJOSE
public import LatchkeyModels
import LatchkeyProviders

/// The checks of a set-up that need neither the command line's configuration reader nor the network: shared by
/// `latchkey doctor` and `GET /admin/v1/findings`.
public enum SetupChecks {
    public static func finding(_ status: String, _ check: String, _ message: String, fix: String? = nil) -> SetupFinding {
        SetupFinding(status: status, check: check, message: message, fix: fix)
    }

    static func finding(_ provider: ProviderFinding) -> SetupFinding {
        let status =
            switch provider.level {
            case .ok: "ok"
            case .warning: "warning"
            case .error: "error"
            }
        return finding(status, provider.key, provider.message, fix: provider.fix)
    }

    /// E-mail codes: where they go, and App Review addresses that have expired or will within 7 days. `describe`
    /// writes an instant for people.
    public static func email(_ email: EmailSettings, now: Date, describe: (Date) -> String) -> [SetupFinding] {
        var findings: [SetupFinding] = []
        if email.smtpURL != nil {
            findings.append(finding("ok", "email", "sign-in codes are sent by SMTP from \(email.from)"))
        } else {
            findings.append(
                finding(
                    "warning", "email", "no email.smtp.url: sign-in codes go to the development mailbox only", fix: "set email.smtp.url to your SMTP server"))
        }
        for access in email.policy.reviewAccess {
            let days = Int((access.expiresAt.timeIntervalSince(now) / 86_400).rounded(.down))
            if access.expiresAt <= now {
                findings.append(
                    finding(
                        "error", "email.reviewAccess", "the App Review access of \(access.address) expired",
                        fix: "set a new expiresAt and code, and update the review notes"))
            } else if days < 7 {
                findings.append(
                    finding(
                        "warning", "email.reviewAccess", "the App Review access of \(access.address) expires in \(days) day(s)",
                        fix: "move expiresAt past the review, or App Review cannot sign in"))
            } else {
                findings.append(finding("ok", "email.reviewAccess", "App Review signs in as \(access.address) until \(describe(access.expiresAt))"))
            }
        }
        return findings
    }

    /// What each webhook endpoint receives (its URL and secret were checked as the configuration was read).
    public static func webhooks(_ configuration: ServerConfiguration) -> [SetupFinding] {
        configuration.webhooks.enumerated().map { index, endpoint in
            let events = endpoint.events.map { $0.map(\.rawValue).sorted().joined(separator: ", ") } ?? "every event type"
            return finding("ok", "webhooks[\(index)]", "\(endpoint.url) receives \(events); `latchkey webhooks test \(index)` sends it a signed test event")
        }
    }

    /// The browser flow: each registered client, and the callback each provider must accept.
    public static func browserFlow(_ configuration: ServerConfiguration) -> [SetupFinding] {
        var findings = configuration.clients.map { client in
            finding(
                "ok", "clients",
                "\(client.clientID): \(client.kind.rawValue) client, \(client.redirectURIs.count) redirect URI(s), providers \((client.providers ?? configuration.providerNames.filter { $0 != "facebook" }).joined(separator: ", "))"
            )
        }
        for module in configuration.providerModules where configuration.clients.contains(where: { $0.allows(provider: type(of: module).name) }) {
            let callback = LatchkeyServer.callbackURL(issuer: configuration.issuer, provider: type(of: module).name)
            findings += module.callbackFindings(callback).map(finding)
        }
        return findings
    }
}

extension LatchkeyServer {
    /// A signing key older than this is worth rotating.
    static let signingKeyAgeWarning: TimeInterval = 180 * 86_400

    /// What `latchkey doctor` would find about this server, as far as it can tell from inside: its settings as read,
    /// its signing keys, admin keys and webhook deliveries. Not the configuration file itself (the server holds what
    /// was read from it, not the file), the providers' live answers (`doctor --live`), or the host's clock.
    func setupFindings() async throws -> [SetupFinding] {
        let now = timeSource.now
        let iso = Date.ISO8601FormatStyle()
        let describe = { (date: Date) in date.formatted(iso) }
        var findings: [SetupFinding] = []
        func add(_ status: String, _ check: String, _ message: String, fix: String? = nil) {
            findings.append(SetupChecks.finding(status, check, message, fix: fix))
        }
        let production = configuration.mode == .production
        add("ok", "mode", "\(configuration.mode.rawValue); the issuer is \(configuration.issuer)")
        for warning in configuration.warnings { add("warning", "config", warning, fix: "change the setting it names") }

        // Providers: each module's settings as read, the generic OpenID Connect providers', and who may sign up.
        if configuration.providerNames.isEmpty {
            add(
                production ? "error" : "warning", "providers", "no sign-in provider is configured: POST /v1/auth/{provider} answers 503",
                fix: "set apple.* or another provider's settings")
        } else {
            add("ok", "providers", "configured: \(configuration.providerNames.joined(separator: ", "))")
        }
        findings += configuration.providerModules.flatMap(\.findings).map(SetupChecks.finding)
        findings += configuration.openIDProviders.flatMap(\.findings).map(SetupChecks.finding)
        if configuration.signUp == .invite { add("ok", "signup.mode", "invite: new users need a code from `latchkey invites create`") }
        findings += SetupChecks.browserFlow(configuration)

        // Secrets at rest and the public URL.
        if configuration.encryptionKey != nil {
            add("ok", "encryptionKey", "set; Apple refresh tokens and signing keys are sealed with it")
        } else {
            add(
                "warning", "encryptionKey", "not set; development mode keeps a generated key in latchkey-data/",
                fix: "set encryptionKeyFile to a file holding `openssl rand -base64 32`")
        }
        if let url = configuration.publicURL, url.hasPrefix("https://") {
            add("ok", "publicUrl", url)
        } else if production {
            add("error", "publicUrl", "production needs the HTTPS URL clients reach the server at", fix: "set publicUrl, e.g. https://auth.example.com")
        } else {
            add(
                "warning", "publicUrl", "\(configuration.publicURL ?? "not set"): fine for development; production needs https",
                fix: "set publicUrl to the server's https URL before going to production")
        }

        // Signing keys: one active, and not too old.
        let keys = try await store.signingKeys()
        let active = keys.filter { $0.state == .active }.sorted { $0.createdAt < $1.createdAt }
        if let newest = active.last {
            let days = Int(now.timeIntervalSince(newest.createdAt) / 86_400)
            if now.timeIntervalSince(newest.createdAt) > Self.signingKeyAgeWarning {
                add(
                    "warning", "signingKeys", "the active key \(newest.keyID) is \(days) days old",
                    fix: "rotate it: POST /admin/v1/keys/rotate, or `latchkey keys rotate`")
            } else {
                add(
                    "ok", "signingKeys",
                    "the active key \(newest.keyID) was made \(describe(newest.createdAt)) (\(days) day(s) ago); \(keys.filter { $0.state == .retiring }.count) retiring"
                )
            }
        } else {
            add("error", "signingKeys", "no active signing key", fix: "restart the server, or run `latchkey keys rotate`")
        }

        // Admin keys: who can use this API.
        let adminKeys = try await store.adminKeys().filter { $0.revokedAt == nil }
        add(
            "ok", "adminKeys",
            "\(adminKeys.count) admin key(s) in use (\(adminKeys.filter(\.readOnly).count) read-only): \(adminKeys.map(\.name).joined(separator: ", "))")

        // Webhooks: each endpoint, and the deliveries that gave up.
        findings += SetupChecks.webhooks(configuration)
        for count in try await store.webhookDeliveryCounts() where count.status == .failed && count.count > 0 {
            add(
                "warning", "webhooks", "\(count.count) deliveries to \(count.endpoint) failed",
                fix: "fix the endpoint, then retry them (the console's webhook deliveries, or `latchkey webhooks retry`)")
        }

        // E-mail codes and the App Review address.
        if let email = configuration.email { findings += SetupChecks.email(email, now: now, describe: describe) }

        // Passkeys: the pages this server serves must be on the relying party's domain.
        if let passkeys = configuration.passkeys {
            let host = URLComponents(string: configuration.issuer)?.host ?? ""
            if host == passkeys.rpID || host.hasSuffix("." + passkeys.rpID) {
                add("ok", "passkeys.rpId", "\(passkeys.rpID); origins \(passkeys.origins.joined(separator: ", "))")
            } else {
                add(
                    "warning", "passkeys.rpId",
                    "\(passkeys.rpID) is not the issuer's host (\(host)) or a parent of it: passkeys work in the apps and on \(passkeys.origins.joined(separator: ", ")), not on this server's own pages",
                    fix: "set passkeys.rpId to the registrable domain of publicUrl if the browser flow should offer passkeys")
            }
        } else {
            add("ok", "passkeys", "off (passkeys.rpId is not set)")
        }
        return findings
    }
}
