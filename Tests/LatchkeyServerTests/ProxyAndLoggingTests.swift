import Configuration
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Logging
import Synchronization
import Testing

@Suite("Server: clients behind proxies, request ids and logs")
struct ProxyAndLoggingTests {
    @Test(
        "the client is the right-most address no trusted proxy added",
        arguments: [
            // (trusted proxies, peer, X-Forwarded-For, client)
            (["1"], "10.0.0.1", ["203.0.113.7"], "203.0.113.7"),
            (["1"], "10.0.0.1", ["spoofed", "203.0.113.7"], "203.0.113.7"),
            (["2"], "10.0.0.2", ["spoofed", "203.0.113.7", "10.0.0.1"], "203.0.113.7"),
            (["2"], "10.0.0.2", ["203.0.113.7"], "10.0.0.2"),  // fewer entries than proxies: the request did not come through them
            (["0"], "198.51.100.1", ["spoofed"], "198.51.100.1"),
            (["10.0.0.0/8"], "10.0.0.2", ["spoofed", "203.0.113.7", "10.1.2.3"], "203.0.113.7"),
            (["10.0.0.0/8", "fd00::/8"], "fd00::1", ["203.0.113.7", "10.9.9.9"], "203.0.113.7"),
            (["10.0.0.0/8"], "198.51.100.1", ["spoofed"], "198.51.100.1"),  // not from a trusted proxy: its header proves nothing
            (["192.0.2.7"], "192.0.2.7", ["192.0.2.7"], "192.0.2.7"),  // everything trusted: the left-most is all there is
            (["10.0.0.0/8"], "::ffff:10.0.0.2", ["203.0.113.7"], "203.0.113.7"),  // a dual-stack listener's IPv4 peer
        ])
    func clientAddress(proxies: [String], peer: String, forwarded: [String], client: String) throws {
        #expect(try TrustedProxies(parsing: proxies).clientAddress(peer: peer, forwardedFor: forwarded) == client)
    }

    @Test("bad http.trustedProxies values are refused with the setting's name", arguments: [["17"], ["10.0.0.0/33"], ["proxy.example.com"], ["-1"]])
    func badProxySettings(values: [String]) throws {
        #expect(throws: LatchkeyError.self) { try TrustedProxies(parsing: values) }
        let reader = ConfigReader(provider: InMemoryProvider(values: ["http.trustedProxies": .init(.string(values.joined(separator: ",")), isSecret: false)]))
        #expect { try ServerConfiguration(reading: reader) } throws: { ($0 as? LatchkeyError)?.reason.contains("http.trustedProxies") == true }
    }

    @Test("http.trustForwardedFor still works, as one hop, and says it is deprecated")
    func deprecatedTrustForwardedFor() throws {
        let reader = ConfigReader(provider: InMemoryProvider(values: ["http.trustForwardedFor": .init(.string("true"), isSecret: false)]))
        let configuration = try ServerConfiguration(reading: reader)
        #expect(configuration.trustedProxies == .hops(1))
        #expect(configuration.warnings.count == 1)
        #expect(configuration.warnings.first?.contains("http.trustedProxies") == true)
        let both = ConfigReader(
            provider: InMemoryProvider(values: [
                "http.trustForwardedFor": .init(.string("true"), isSecret: false), "http.trustedProxies": .init(.string("10.0.0.0/8"), isSecret: false),
            ]))
        #expect(try ServerConfiguration(reading: both).trustedProxies == .networks([try #require(IPNetwork(cidr: "10.0.0.0/8"))]))
    }

    @Test("behind trusted proxies a spoofed left-most X-Forwarded-For entry does not change the rate-limit bucket", arguments: [1, 2])
    func spoofedForwardedFor(hops: Int) async throws {
        try await ServerHarness.with(configure: {
            $0.rateLimit.perClientIP = 3
            $0.trustedProxies = .hops(hops)
        }) { harness in
            let statuses = try await withStatuses(
                harness, hops: hops, ["spoof-0, 203.0.113.7", "spoof-1, 203.0.113.7", "spoof-2, 203.0.113.7", "spoof-new, 203.0.113.7", "203.0.113.7"])
            #expect(statuses == [400, 400, 400, 429, 429])
            // Another client has its own bucket.
            #expect(try await withStatuses(harness, hops: hops, ["198.51.100.9"]) == [400])
        }
    }

    /// Sends one refused refresh per forwarded chain; the loopback peer is the last proxy, and with two hops the
    /// first proxy's entry stands right of the client's.
    private func withStatuses(_ harness: ServerHarness, hops: Int, _ chains: [String]) async throws -> [Int] {
        var statuses: [Int] = []
        for forwarded in chains {
            let chain = hops == 2 ? forwarded + ", 10.0.0.1" : forwarded
            let answer = try await harness.send(
                "POST", "/v1/token", body: "grant_type=refresh_token", contentType: "application/x-www-form-urlencoded", headers: [("X-Forwarded-For", chain)]
            )
            statuses.append(answer.status)
        }
        return statuses
    }

    @Test("every answer carries X-Request-Id; a plain id from a proxy is kept, anything else replaced")
    func requestIDs() async throws {
        try await ServerHarness.with { harness in
            let fresh = try await harness.send("GET", "/healthz")
            #expect((fresh.headers["x-request-id"]?.count ?? 0) >= 16)
            #expect(try await harness.send("GET", "/healthz", headers: [("X-Request-Id", "lb-7f3a.42_x")]).headers["x-request-id"] == "lb-7f3a.42_x")
            let injected = try await harness.send("GET", "/nowhere", headers: [("X-Request-Id", "a\" level=critical")])
            #expect(injected.status == 404)
            #expect(injected.headers["x-request-id"] != nil)
            #expect(injected.headers["x-request-id"] != "a\" level=critical")
        }
    }

    @Test("at trace level, the whole lifecycle logs one access line per request and never a token, code, nonce or key")
    func noSecretsInLogs() async throws {
        let lines = LogCapture()
        var logger = Logger(label: "latchkey.test") { label in lines.handler(label: label) }
        logger.logLevel = .trace
        var secrets: [String] = []
        try await ServerHarness.with(logger: logger) { harness in
            secrets.append(harness.encryptionKey)
            let sub = try await harness.emulator.createUser()
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("raw-nonce-for-the-log-test"), scopes: ["name", "email"])
            secrets += [apple.identityToken, apple.code, "raw-nonce-for-the-log-test"]
            let signIn = try await harness.post(
                "/v1/auth/apple", json: ["identityToken": apple.identityToken, "authorizationCode": apple.code, "rawNonce": "raw-nonce-for-the-log-test"])
            #expect(signIn.status == 200)
            let tokens = try signIn.decode(SignInResponse.self)
            secrets += [tokens.accessToken, tokens.refreshToken, RefreshTokens.hash(tokens.refreshToken)]
            // What the store keeps sealed or hashed stays out of the log too (SQLKit logs bound values at debug level).
            let identity = try #require(try await harness.store.identity(provider: "apple", subject: sub))
            secrets.append(try #require(try await harness.store.providerGrant(identityID: identity.id)).sealedRefreshToken)
            secrets += try await harness.store.signingKeys().map(\.sealedPrivateKey)
            let pair = try await harness.refresh(tokens.refreshToken).decode(TokenPairResponse.self)
            secrets += [pair.accessToken, pair.refreshToken]
            #expect(try await harness.refresh(tokens.refreshToken).status == 200)  // a retry within the grace window
            #expect(try await harness.send("GET", "/v1/me", bearer: pair.accessToken).status == 200)
            #expect(try await harness.send("GET", "/v1/me", bearer: "not-a-token").status == 401)
            #expect(try await harness.send("GET", "/v1/me/sessions", bearer: pair.accessToken).status == 200)
            #expect(try await harness.send("DELETE", "/v1/me", bearer: pair.accessToken).status == 200)
        }
        let log = lines.all
        #expect(log.contains { $0.contains("http.route=/v1/auth/apple") && $0.contains("http.status=200") && $0.contains("request.id=") })
        #expect(log.filter { $0.contains("message=request ") }.count == 7)
        for secret in secrets {
            // Whole, and the signature (or a long run) of it, must appear nowhere.
            let probe = String(secret.split(separator: ".").last ?? Substring(secret)).prefix(24)
            #expect(!log.contains { $0.contains(secret) || $0.contains(probe) }, "a secret reached the log: \(probe)…")
        }
        #expect(!log.contains { $0.contains("eyJ") }, "a JWT reached the log")
        #expect(!log.contains { $0.contains("PRIVATE KEY") })
    }
}

/// Every line logged, as `label level message=… key=value…`, from all loggers made through it.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }

    func handler(label: String) -> some LogHandler { Handler(label: label, capture: self) }

    struct Handler: LogHandler {
        let label: String
        let capture: LogCapture
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = metadata.merging(event.metadata ?? [:]) { $1 }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            let line = ([label, event.level.rawValue, "message=\(event.message)"] + fields).joined(separator: " ")
            capture.lines.withLock { $0.append(line) }
        }
    }
}
