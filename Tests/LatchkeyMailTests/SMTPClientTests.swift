import Foundation
import Logging
import NIOSSL
import Synchronization
import Testing

@testable import LatchkeyMail

@Suite("SMTP client against a fake server on loopback", .timeLimit(.minutes(1)))
struct SMTPClientTests {
    static let password = "s3cret-pa55"
    static let message = MailMessage(
        from: "codes@example.com", to: "ada@example.org", subject: "Your sign-in code", text: "Your code is 123456.", html: "<p>Your code is <b>123456</b>.</p>"
    )

    func client(
        port: Int, scheme: String = "smtp", host: String = "127.0.0.1", user: String? = "codes@example.com", timeout: Duration = .seconds(60),
        tls: TLSConfiguration = .makeClientConfiguration(), requiresTLS: Bool? = nil, logger: Logger? = nil
    ) throws -> SMTPClient {
        let userInfo = user.map { "\($0.replacingOccurrences(of: "@", with: "%40"))@" } ?? ""
        let server = try SMTPServer(url: "\(scheme)://\(userInfo)\(host):\(port)", password: Self.password)
        return SMTPClient(
            server: server, heloName: "latchkey", timeout: timeout, eventLoopGroup: .singletonMultiThreadedEventLoopGroup, tlsConfiguration: tls,
            logger: logger, requiresTLS: requiresTLS ?? !server.isLoopback)
    }

    func sendError(_ client: SMTPClient, _ message: MailMessage = Self.message) async -> MailError? {
        do {
            try await client.send(message)
            return nil
        } catch {
            return error
        }
    }

    static func base64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }

    @Test("a plain session on loopback: EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT")
    func plainSessionWithAuthPlain() async throws {
        try await FakeSMTPServer.with { server, port in
            try await client(port: port).send(Self.message)
            #expect(
                server.commands == [
                    "EHLO latchkey", "AUTH PLAIN \(Self.base64("\0codes@example.com\0\(Self.password)"))", "MAIL FROM:<codes@example.com>",
                    "RCPT TO:<ada@example.org>", "DATA", "QUIT",
                ])
            let lines = try #require(server.messages.first)
            #expect(lines.contains("Subject: Your sign-in code"))
            #expect(lines.contains("Your code is 123456."))
            #expect(!server.tlsStarted)
        }
    }

    @Test("AUTH LOGIN when the server offers only LOGIN: user name, then password, each base64")
    func authLogin() async throws {
        var script = FakeSMTPServer.Script()
        script.extensions = ["AUTH LOGIN"]
        try await FakeSMTPServer.with(script) { server, port in
            try await client(port: port).send(Self.message)
            #expect(Array(server.commands.prefix(4)) == ["EHLO latchkey", "AUTH LOGIN", Self.base64("codes@example.com"), Self.base64(Self.password)])
            #expect(server.messages.count == 1)
        }
    }

    @Test("no AUTH without a user name, even when the server offers it")
    func noUserNoAuth() async throws {
        try await FakeSMTPServer.with { server, port in
            try await client(port: port, user: nil).send(Self.message)
            #expect(server.commands == ["EHLO latchkey", "MAIL FROM:<codes@example.com>", "RCPT TO:<ada@example.org>", "DATA", "QUIT"])
        }
    }

    @Test("a server with no AUTH Latchkey speaks: authentication_unavailable, permanent, before MAIL")
    func noUsableAuth() async throws {
        var script = FakeSMTPServer.Script()
        script.extensions = ["AUTH CRAM-MD5 XOAUTH2"]
        try await FakeSMTPServer.with(script) { server, port in
            let error = try #require(await sendError(try client(port: port)))
            #expect(error.errorCode == "authentication_unavailable")
            #expect(!error.isTemporary)
            #expect(error.reason.contains("AUTH CRAM-MD5 XOAUTH2"))
            #expect(server.commands == ["EHLO latchkey"])
        }
    }

    @Test("451 to MAIL FROM is temporary")
    func temporaryFailure() async throws {
        var script = FakeSMTPServer.Script()
        script.replies["MAIL"] = "451 4.3.0 try again later"
        try await FakeSMTPServer.with(script) { _, port in
            let error = try #require(await sendError(try client(port: port)))
            #expect(error.errorCode == "temporary_failure")
            #expect(error.isTemporary)
            #expect(error.replyCode == 451)
            #expect(error.reason == "the server deferred MAIL FROM with 451: 4.3.0 try again later; try again later")
        }
    }

    @Test("550 to RCPT TO is permanent")
    func permanentFailure() async throws {
        var script = FakeSMTPServer.Script()
        script.replies["RCPT"] = "550 5.1.1 no such user"
        try await FakeSMTPServer.with(script) { server, port in
            let error = try #require(await sendError(try client(port: port)))
            #expect(error.errorCode == "permanent_failure")
            #expect(!error.isTemporary)
            #expect(error.replyCode == 550)
            #expect(error.reason == "the server refused RCPT TO with 550: 5.1.1 no such user")
            #expect(!server.commands.contains("DATA"))
        }
    }

    @Test("535 to AUTH: authentication_failed, and the reply's echo of the credentials is redacted")
    func authenticationFailedRedacted() async throws {
        let payload = Self.base64("\0codes@example.com\0\(Self.password)")
        var script = FakeSMTPServer.Script()
        script.replies["AUTH"] = "535 5.7.8 bad credentials \(payload) \(Self.password)"
        try await FakeSMTPServer.with(script) { _, port in
            let error = try #require(await sendError(try client(port: port)))
            #expect(error.errorCode == "authentication_failed")
            #expect(!error.isTemporary)
            #expect(error.reason.contains("<redacted>"))
            #expect(!error.description.contains(Self.password))
            #expect(!error.description.contains(payload))
            #expect(!String(reflecting: error).contains(Self.password))
        }
    }

    @Test("a server that never answers: timed_out, the step's timeout ending the wait rather than the server")
    func timeout() async throws {
        var script = FakeSMTPServer.Script()
        script.greeting = nil
        try await FakeSMTPServer.with(script) { _, port in
            let clock = ContinuousClock()
            let start = clock.now
            let error = try #require(await sendError(try client(port: port, timeout: .milliseconds(500))))
            // Liveness, not speed: the server never answers, so only the timeout (500 ms, the whole send at most 1.5 s)
            // ends the wait; a generous bound keeps a loaded machine from failing it.
            #expect(clock.now - start < .seconds(30))
            #expect(error.errorCode == "timed_out")
            #expect(error.isTemporary)
            #expect(error.reason.contains("the greeting"))
        }
    }

    @Test("a server that answers every step just within the step's timeout: timed_out once the whole send passes three times it")
    func slowServerMeetsTheWholeSendDeadline() async throws {
        var script = FakeSMTPServer.Script()
        script.replyDelay = .milliseconds(900)
        try await FakeSMTPServer.with(script) { _, port in
            // Eight replies 0.9 s apart: each step is within its 2 s, but the send would take 7.2 s against its 6 s, so
            // without the whole-send deadline it succeeds. Which deadline ends it is not checked: on a machine too busy
            // to send a reply within 2 s, a step's ends it first, and that is a timeout too.
            let error = try #require(await sendError(try client(port: port, timeout: .seconds(2))))
            #expect(error.errorCode == "timed_out", "\(error.reason)")
        }
    }

    @Test("a server that closes the connection in the middle of DATA: connection_closed, temporary")
    func closedDuringData() async throws {
        var script = FakeSMTPServer.Script()
        script.closeDuringData = true
        try await FakeSMTPServer.with(script) { _, port in
            let error = try #require(await sendError(try client(port: port)))
            #expect(error.errorCode == "connection_closed")
            #expect(error.isTemporary)
            #expect(error.reason.contains("the message"))
        }
    }

    @Test("nothing listening: connection_failed, temporary")
    func connectionRefused() async throws {
        let port = try await FakeSMTPServer.with { _, port in port }
        let error = try #require(await sendError(try client(port: port)))
        #expect(error.errorCode == "connection_failed")
        #expect(error.isTemporary)
    }

    @Test("a server that does not speak SMTP: unexpected_reply")
    func notSMTP() async throws {
        var script = FakeSMTPServer.Script()
        script.greeting = "HTTP/1.1 400 Bad Request"
        try await FakeSMTPServer.with(script) { _, port in
            let error = try #require(await sendError(try client(port: port)))
            #expect(error.errorCode == "unexpected_reply")
        }
    }

    @Test("a line starting with . goes over the wire dot-stuffed")
    func dotStuffing() async throws {
        var message = Self.message
        message.html = nil
        message.text = "first\n.hidden\n..two\n."
        try await FakeSMTPServer.with { server, port in
            try await client(port: port).send(message)
            let lines = try #require(server.messages.first)
            let body = Array(lines.drop { !$0.isEmpty }.dropFirst())
            #expect(body == ["first", "..hidden", "...two", ".."])
        }
    }

    @Test("dot-stuffing adds a . before each line that starts with one, and ends the data with CRLF . CRLF")
    func dotStuffedBytes() {
        let stuffed = SMTPClient.dotStuffed(Array(".a\r\nb\r\n.\r\nc.d".utf8))
        #expect(String(decoding: stuffed, as: UTF8.self) == "..a\r\nb\r\n..\r\nc.d\r\n.\r\n")
    }

    @Test("a server that is not loopback and offers no STARTTLS is refused before AUTH")
    func noSTARTTLSRefused() async throws {
        try await FakeSMTPServer.with { server, port in
            let error = try #require(await sendError(try client(port: port, requiresTLS: true)))
            #expect(error.errorCode == "tls_required")
            #expect(!error.isTemporary)
            #expect(server.commands == ["EHLO latchkey"])
        }
    }

    @Test("STARTTLS: a real handshake with the server's certificate for localhost, then EHLO again and AUTH inside TLS")
    func startTLS() async throws {
        let certificate = try TestCertificate()
        var script = FakeSMTPServer.Script()
        script.tls = try certificate.serverContext()
        try await FakeSMTPServer.with(script) { server, port in
            try await client(port: port, host: "localhost", tls: certificate.clientConfiguration, requiresTLS: true).send(Self.message)
            #expect(server.tlsStarted)
            #expect(Array(server.commands.prefix(4)).map { $0.prefix(10) } == ["EHLO latch", "STARTTLS", "EHLO latch", "AUTH PLAIN"])
            #expect(server.messages.count == 1)
        }
    }

    @Test("STARTTLS with a certificate the client does not trust: tls_failed, and no AUTH is sent")
    func startTLSUntrusted() async throws {
        let certificate = try TestCertificate()
        var script = FakeSMTPServer.Script()
        script.tls = try certificate.serverContext()
        try await FakeSMTPServer.with(script) { server, port in
            let error = try #require(await sendError(try client(port: port, host: "localhost", requiresTLS: true)))
            #expect(error.errorCode == "tls_failed", "\(error)")
            #expect(server.commands == ["EHLO latchkey", "STARTTLS"])
        }
    }

    @Test("smtps: TLS from the first byte")
    func implicitTLS() async throws {
        let certificate = try TestCertificate()
        var script = FakeSMTPServer.Script()
        script.tls = try certificate.serverContext()
        script.implicitTLS = true
        try await FakeSMTPServer.with(script) { server, port in
            try await client(port: port, scheme: "smtps", host: "localhost", tls: certificate.clientConfiguration).send(Self.message)
            #expect(Array(server.commands.prefix(2)).map { $0.prefix(10) } == ["EHLO latch", "AUTH PLAIN"])
            #expect(server.messages.count == 1)
        }
    }

    @Test("an invalid address is refused before connecting", arguments: ["ada", "ada@example.org\r\nBcc: eve@example.net", "<ada@example.org>", "a@b@c", ""])
    func invalidAddress(_ address: String) async throws {
        var message = Self.message
        message.to = address
        let error = try #require(await sendError(try client(port: 9), message))
        #expect(error.errorCode == "invalid_address")
        #expect(!error.isTemporary)
    }

    @Test("debug logs name each step and reply code, never the password, the AUTH payload or the message")
    func logsHoldNoSecrets() async throws {
        let sink = LogSink()
        var logger = Logger(label: "smtp-test") { _ in sink }
        logger.logLevel = .trace
        for extensions in [["AUTH PLAIN"], ["AUTH LOGIN"]] {
            var script = FakeSMTPServer.Script()
            script.extensions = extensions
            try await FakeSMTPServer.with(script) { _, port in
                try await client(port: port, logger: logger).send(Self.message)
            }
        }
        let logs = sink.lines.joined(separator: "\n")
        #expect(logs.contains("AUTH PLAIN"))
        #expect(logs.contains("AUTH LOGIN"))
        #expect(logs.contains("MAIL FROM"))
        for secret in [
            Self.password, Self.base64(Self.password), Self.base64("\0codes@example.com\0\(Self.password)"), "123456", "Your sign-in code",
        ] {
            #expect(!logs.contains(secret), "the logs show \(secret)")
        }
    }
}

/// Collects every log line with its metadata.
final class LogSink: LogHandler, @unchecked Sendable {
    // Sendable: `lines` is behind the mutex; `metadata` and `logLevel` are set only before the logger is shared.
    private let storage = Mutex<[String]>([])
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    var lines: [String] { storage.withLock { $0 } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        storage.withLock { $0.append("\(event.message) \(event.metadata ?? [:])") }
    }
}
