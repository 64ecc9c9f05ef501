import Foundation
public import Hummingbird
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyMail
import LatchkeyModels
public import LatchkeyProviders
import LatchkeyStore
public import Logging
public import ServiceLifecycle

/// The Latchkey server: exchanges provider sign-ins for Latchkey sessions and serves them over HTTP.
///
/// ```swift
/// let server = try await LatchkeyServer.make(configuration: configuration, store: store, encryptionKey: encryptionKey)
/// let group = ServiceGroup(services: server.services(with: server.makeApplication()), logger: logger)
/// try await group.run()
/// ```
public struct LatchkeyServer: Sendable {
    public let configuration: ServerConfiguration
    public let store: any AuthStore
    public let sessions: SessionService
    public let metrics: ServerMetrics
    public let accessKeys: AccessTokenKeys
    /// The providers users sign in with, by name.
    public let providers: ProviderRegistry
    /// The browser flow: provider sign-ins in progress and the codes apps redeem.
    public let flows: AuthorizationCodeFlow
    /// Passkeys, when `passkeys.rpId` is set.
    public let passkeys: PasskeyService?
    /// E-mail one-time codes, when `email.*` is set (and a sender is at hand).
    public let emailCodes: EmailCodes?
    /// Apps registered for the browser flow, by client id.
    let clients: [String: OAuthClient]
    /// The confidential ones among them, whose sessions `POST /v1/token` does not refresh (it takes no client credentials).
    let confidentialClients: Set<String>
    /// Verifies Apple's server-to-server notifications, when Apple is configured.
    let appleNotifications: AppleNotificationVerifier?
    let box: SecretBox
    let timeSource: TimeSource
    let logger: Logger
    let ipLimiter: RateLimiter
    let subjectLimiter: RateLimiter
    /// Sign-ins with a provider's credential, each verified account held to the per-account rate limit.
    let signInFlow: SignInFlow
    let verifiedTokens: VerifiedTokenCache
    /// DPoP proofs: checked, their nonces, their single use.
    let dpopProofs: DPoPProofs
    /// App Attest at sign-in; nil while `appAttest.mode` is off.
    let appAttestation: AppAttestation?
    let keyReloads = Cooldown(interval: 5)

    /// Loads (or, on first start, creates) signing keys and wires every component.
    /// The store must already be migrated.
    public static func make(
        configuration: ServerConfiguration,
        store: any AuthStore,
        encryptionKey: String,
        transport: any HTTPTransport = AsyncHTTPClientTransport(),
        timeSource: TimeSource = .system,
        logger: Logger = Logger(label: "latchkey"),
        emailSender: (any EmailSender)? = nil
    ) async throws -> LatchkeyServer {
        try configuration.validate()
        try configuration.validateAppAttest()
        let box = try SecretBox(base64Key: encryptionKey)
        let metrics = ServerMetrics()
        let accessKeys = AccessTokenKeys(propagationDelay: configuration.keyPropagationDelay)
        try await KeyMaintenance.ensureActiveKey(store: store, box: box, now: timeSource.now, overlap: configuration.signingKeyOverlap)
        try await accessKeys.load(try await store.signingKeys(), box: box)
        let accessTokens = AccessTokenService(
            issuer: configuration.issuer, audience: configuration.audience, lifetime: configuration.accessTokenLifetime, keys: accessKeys,
            timeSource: timeSource
        )
        let observer: ProviderCallObserver = { provider, operation, outcome in metrics.providerCall(provider, operation, outcome: outcome) }
        let context = ProviderContext(transport: transport, timeSource: timeSource, observer: observer, logger: logger, issuer: configuration.issuer)
        var providers: [any IdentityProvider] = []
        for module in configuration.providerModules { providers.append(try module.makeProvider(context)) }
        for provider in configuration.openIDProviders {
            providers.append(OpenIDProvider(configuration: provider, transport: transport, timeSource: timeSource, logger: logger, observer: observer))
        }
        // Apple's server-to-server notifications are signed with its sign-in keys, for its client ids.
        let appleNotifications = providers.lazy.compactMap { $0 as? AppleIdentityProvider }.first.map {
            AppleNotificationVerifier(keys: $0.keys, audiences: $0.client.configuration.clientIDs, timeSource: timeSource)
        }
        let registry = ProviderRegistry(providers)
        var policy = configuration.session
        policy.requireInvite = configuration.signUp == .invite
        policy.webhooks = WebhookEndpoints(configuration.webhooks)
        let sessions = SessionService(
            store: store, accessTokens: accessTokens, box: box, providerLinks: registry.links, policy: policy, timeSource: timeSource, logger: logger)
        let subjectLimiter = RateLimiter(perMinute: configuration.rateLimit.perSubject)
        let signInFlow = SignInFlow(signIns: sessions.signIns) { provider, subject in
            guard let wait = subjectLimiter.check("sub:\(provider):" + subject) else { return }
            throw APIError(
                status: .tooManyRequests, code: "rate_limited", description: "too many sign-ins for this account; retry in \(wait) s",
                headers: [.retryAfter: String(wait)])
        }
        return LatchkeyServer(
            configuration: configuration, store: store, sessions: sessions, metrics: metrics, accessKeys: accessKeys, providers: registry,
            flows: AuthorizationCodeFlow(store: store, issuer: sessions.issuer, box: box, timeSource: timeSource),
            passkeys: configuration.passkeys.map { PasskeyService(settings: $0, signIns: sessions.signIns, store: store, box: box) },
            emailCodes: try configuration.email.flatMap { settings in
                try (emailSender ?? Self.smtpSender(settings, logger: logger) ?? settings.mailboxURL.map { DevelopmentMailbox(url: $0, transport: transport) })
                    .map {
                        EmailCodes(store: store, sender: $0, policy: settings.policy, timeSource: timeSource)
                    }
            },
            clients: Dictionary(configuration.clients.map { ($0.clientID, $0) }, uniquingKeysWith: { first, _ in first }),
            confidentialClients: Set(configuration.clients.filter { $0.kind == .confidential }.map(\.clientID)),
            appleNotifications: appleNotifications, box: box, timeSource: timeSource, logger: logger,
            ipLimiter: RateLimiter(perMinute: configuration.rateLimit.perClientIP), subjectLimiter: subjectLimiter,
            signInFlow: signInFlow, verifiedTokens: VerifiedTokenCache(timeSource: timeSource),
            dpopProofs: DPoPProofs(
                policy: configuration.dpop, store: store, nonceKey: box.derivedKey(purpose: "latchkey dpop nonce v1"), timeSource: timeSource),
            appAttestation: configuration.appAttest.mode == .off
                ? nil
                : try AppAttestation(
                    policy: configuration.appAttest, store: store, challengeKey: box.derivedKey(purpose: "latchkey app attest challenge v1"),
                    timeSource: timeSource)
        )
    }

    /// The SMTP sender of `email.smtp.url`; nil without one (development: `serve --dev` passes its emulator's mailbox).
    static func smtpSender(_ settings: EmailSettings, logger: Logger) throws -> (any EmailSender)? {
        guard let url = settings.smtpURL else { return nil }
        let server: SMTPServer
        do {
            server = try SMTPServer(url: url, password: settings.smtpPassword?.revealed)
        } catch {
            throw LatchkeyError(.invalidConfiguration, "setting email.smtp.url: \(error.reason)")
        }
        return SMTPSender(client: SMTPClient(server: server, logger: logger), from: settings.from)
    }

    /// Where a provider answers a browser sign-in: `{issuer}/oauth2/callback/{provider}`.
    public static func callbackURL(issuer: String, provider: String) -> String {
        ProviderContext.callbackURL(issuer: issuer, provider: provider)
    }

    /// The router with every route and middleware.
    public func makeRouter() -> Router<LatchkeyRequestContext> {
        let router = Router(context: LatchkeyRequestContext.self)
        // Outermost first: the access log sees every answer; CORS decorates every answer, including the error bodies made just inside it.
        // A server span per request, continuing the caller's W3C traceparent; only with a tracing backend (`otel.endpoint`).
        if configuration.otel.endpoint != nil { router.add(middleware: TracingMiddleware()) }
        router.add(middleware: AccessLogMiddleware())
        if !configuration.corsAllowedOrigins.isEmpty { router.add(middleware: CORSAllowListMiddleware(origins: Set(configuration.corsAllowedOrigins))) }
        router.add(middleware: ErrorMiddleware(metrics: metrics))
        router.add(middleware: RateLimitMiddleware(limiter: ipLimiter, trustedProxies: configuration.trustedProxies))
        router.add(middleware: DPoPMiddleware(proofs: dpopProofs, issuer: configuration.issuer))
        addRoutes(to: router)
        return router
    }

    /// The HTTP application on the configured host and port.
    public func makeApplication(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        Application(
            router: makeRouter(),
            server: .latchkey(configuration.connections),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "latchkey",
                availableConnectionsDelegate: .maximum(configuration.connections.effectiveMaxConnections, logger: logger)),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? configuration.port) },
            logger: logger
        )
    }

    /// The background work, then `application`: the order a `ServiceGroup` needs. A group's graceful shutdown stops its
    /// services in reverse order, so the server stops taking requests first and the work they rely on stops after.
    public func services(with application: some Service) -> [any Service] {
        services + [application]
    }

    /// Background work: retrying owed provider revocations, sweeping expired tokens, key upkeep, providers' key refresh.
    public var services: [any Service] {
        var services: [any Service] = [MaintenanceService(server: self)]
        let caches = providers.all.flatMap(\.keyCaches)
        if !caches.isEmpty { services.append(JWKSRefreshService(caches: caches, logger: logger)) }
        if !configuration.webhooks.isEmpty { services.append(WebhookDeliveryService(dispatcher: webhookDispatcher(), logger: logger)) }
        return services
    }
}

extension LatchkeyServer {
    /// Sends this server's owed webhook deliveries (``WebhookDeliveryService`` runs it about once a second).
    public func webhookDispatcher(send: @escaping WebhookDispatcher.Send = WebhookDispatcher.httpSend) -> WebhookDispatcher {
        WebhookDispatcher(
            store: store, endpoints: configuration.webhooks, timeout: .milliseconds(Int64(configuration.webhookTimeout * 1000)), send: send,
            timeSource: timeSource, metrics: metrics, logger: logger)
    }
}

/// Development's sender: each message goes to the emulator's mailbox (`POST /emulator/mail`), where
/// `GET /emulator/mail?to=ADDRESS` and the demo page read it.
struct DevelopmentMailbox: EmailSender {
    let url: String
    let transport: any HTTPTransport

    func send(_ message: EmailCodeMessage) async throws {
        let body = try LeanJSONEncoder().encode(["to": message.to, "subject": message.subject, "text": message.text, "html": message.html])
        let answer = try await transport.send(
            OutboundRequest(method: "POST", url: url, headers: [("Content-Type", "application/json")], body: body, timeout: .seconds(5)))
        guard (200..<300).contains(answer.status) else { throw LatchkeyError(.temporarilyUnavailable, "the development mailbox answered \(answer.status)") }
    }
}

/// Sign-in codes by SMTP (`email.smtp.url`): a failure to send is `temporarily_unavailable`, and never logs the
/// message (it holds the code) or the password.
struct SMTPSender: EmailSender {
    let client: SMTPClient
    let from: String

    func send(_ message: EmailCodeMessage) async throws {
        do {
            try await client.send(MailMessage(from: from, to: message.to, subject: message.subject, text: message.text, html: message.html))
        } catch {
            throw LatchkeyError(.temporarilyUnavailable, "the SMTP server did not take the message: \(error.errorCode)")
        }
    }
}
