import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import LatchkeyTestSupport
import Logging
import NIOCore

/// Latchkey's routes answered in process through Hummingbird's router testing, for contract tests that only need a
/// request's answer: no socket, no emulator, a temporary SQLite store. Every provider is configured, but a provider call reaches
/// a transport that refuses it and counts it (``providerCalls``), so a test can show it needed none. Tests of
/// connections, timing, concurrency across connections or the emulator's callbacks keep ``ServerHarness``.
struct RouterHarness: Sendable {
    let client: any TestClientProtocol
    let providers: InMemoryTransport
    let store: SQLAuthStore
    let server: LatchkeyServer
    /// The server's clock, which only tests move.
    let clock: MutableClock

    static func with(configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: @Sendable (RouterHarness) async throws -> Void) async throws {
        var configuration = ServerConfiguration()
        let nowhere = "http://providers.invalid"
        configuration.apple = .init(
            teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8, clientIDs: [Fixtures.bundleID, Fixtures.servicesID],
            baseURL: nowhere)
        configuration.providerModules += [
            GoogleModule(.google(clientIDs: [EmulatorHarness.googleClientID], discoveryURL: nowhere + "/.well-known/openid-configuration"))
        ]
        configuration.passkeys = PasskeySettings(rpID: "example.com", origins: ["https://example.com"])
        configuration.rateLimit.perClientIP = 10_000
        configuration.rateLimit.perSubject = 10_000
        configure(&configuration)
        var logger = Logger(label: "latchkey.test")
        logger.logLevel = .critical
        let providers = InMemoryTransport.answering(503, "")
        try await withTemporaryStore { store in
            let clock = MutableClock(Date())
            let server = try await LatchkeyServer.make(
                configuration: configuration, store: store, encryptionKey: SecretBox.generateKey(), transport: providers, timeSource: clock.source,
                logger: logger)
            try await server.makeApplication().test(.router) { client in
                try await body(RouterHarness(client: client, providers: providers, store: store, server: server, clock: clock))
            }
        }
    }

    /// The number of calls the server tried to make to a provider.
    var providerCalls: Int { providers.count }

    func send(
        _ method: String, _ path: String, body: String? = nil, contentType: String = "application/json", headers: [(String, String)] = []
    ) async throws -> ServerHarness.Answer {
        var fields = HTTPFields()
        for (name, value) in headers {
            guard let name = HTTPField.Name(name) else { throw HarnessError("not a header name: \(name)") }
            fields.append(HTTPField(name: name, value: value))
        }
        if body != nil { fields[.contentType] = contentType }
        guard let method = HTTPRequest.Method(method) else { throw HarnessError("not a method: \(method)") }
        return try await client.execute(uri: path, method: method, headers: fields, body: body.map { ByteBuffer(string: $0) }) { response in
            var answerHeaders: [String: String] = [:]
            for field in response.headers { answerHeaders[field.name.canonicalName] = field.value }
            return ServerHarness.Answer(status: Int(response.status.code), headers: answerHeaders, body: Array(buffer: response.body))
        }
    }
}
