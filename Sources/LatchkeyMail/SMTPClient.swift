import Foundation
public import Logging
public import NIOCore
public import NIOPosix
public import NIOSSL
import Synchronization

/// Sends messages through one SMTP server (RFC 5321), one connection a message.
///
/// Credentials and mail never cross the network in the clear: the client starts TLS with STARTTLS (or speaks TLS from
/// the first byte for `smtps`), and refuses a server that does not offer STARTTLS, unless the server is this machine
/// (`localhost`, 127.0.0.0/8, ::1).
///
/// ```swift
/// let server = try SMTPServer(url: "smtp://codes%40example.com@smtp.example.com:587", password: "s3cret")
/// let client = SMTPClient(server: server, heloName: "auth.example.com", timeout: .seconds(10))
/// try await client.send(MailMessage(from: "codes@example.com", to: "ada@example.org", subject: "Your code", text: "123456", html: nil))
/// ```
public struct SMTPClient: Sendable {
    let server: SMTPServer
    let heloName: String
    let timeout: Duration
    let eventLoopGroup: any EventLoopGroup
    let tlsConfiguration: TLSConfiguration
    let logger: Logger?
    /// Whether the conversation must be encrypted before AUTH and MAIL: true unless the server is loopback. Tests set it
    /// to hold a fake server on loopback to the rule for other hosts.
    let requiresTLS: Bool

    /// A client for `server`.
    ///
    /// - Parameters:
    ///   - server: Where to send, and the credentials.
    ///   - heloName: The client's name in EHLO; the public host name of the Latchkey server is a good one.
    ///   - timeout: The longest wait for each step; the whole send has three times as long.
    ///   - eventLoopGroup: Where the connection runs.
    ///   - tlsConfiguration: How TLS checks the server: the system's trust roots and full verification by default.
    ///   - logger: Where each step is logged at `debug`: the command and the reply code, never the AUTH exchange's
    ///     payload or the message.
    public init(
        server: SMTPServer, heloName: String = "latchkey", timeout: Duration = .seconds(10),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, tlsConfiguration: TLSConfiguration = .makeClientConfiguration(),
        logger: Logger? = nil
    ) {
        self.init(
            server: server, heloName: heloName, timeout: timeout, eventLoopGroup: eventLoopGroup, tlsConfiguration: tlsConfiguration, logger: logger,
            requiresTLS: !server.isLoopback)
    }

    init(
        server: SMTPServer, heloName: String, timeout: Duration, eventLoopGroup: any EventLoopGroup, tlsConfiguration: TLSConfiguration, logger: Logger?,
        requiresTLS: Bool
    ) {
        self.server = server
        self.heloName = heloName
        self.timeout = timeout
        self.eventLoopGroup = eventLoopGroup
        self.tlsConfiguration = tlsConfiguration
        self.logger = logger
        self.requiresTLS = requiresTLS
    }

    /// Sends one message: connects, reads the greeting, EHLO, STARTTLS and EHLO again (for `smtp`), AUTH PLAIN or LOGIN
    /// (when the server has a user name), MAIL FROM, RCPT TO, DATA with the message dot-stuffed, QUIT.
    ///
    /// Each step waits at most ``timeout``; the whole send at most three times that.
    ///
    /// - Throws: ``MailError``: temporary for a 4xx reply, a failed or closed connection, and a timeout; permanent for a
    ///   5xx reply, a server that offers no STARTTLS or no usable AUTH, and an invalid address.
    public func send(_ message: MailMessage) async throws(MailError) {
        for (role, address) in [("sender", message.from), ("recipient", message.to)] {
            if let problem = MailMessage.addressProblem(address) {
                throw MailError(.invalidAddress, "the \(role)'s address \(problem)", isTemporary: false)
            }
        }
        let watchdog = Watchdog()
        let deadline = NIODeadline.now() + TimeAmount(timeout * 3)
        do {
            let sslContext = try NIOSSLContext(configuration: tlsConfiguration)
            let serverHostname = server.sniHostname
            let implicitTLS = server.implicitTLS
            let serverName = "\(server.host):\(server.port)"
            logger?.debug("SMTP connecting", metadata: ["smtp.server": "\(server)"])
            let channel = try await ClientBootstrap(group: eventLoopGroup)
                .connectTimeout(TimeAmount(timeout))
                .connect(host: server.host, port: server.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if implicitTLS {
                            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                        }
                        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(SMTPReplyDecoder()))
                        try channel.pipeline.syncOperations.addHandler(TLSFailureRecorder(watchdog: watchdog, server: serverName))
                        // The wait for the greeting starts here, on the event loop, as the connection opens: started once
                        // this task resumes, a busy machine's delay would count against the whole send instead.
                        watchdog.start(deadline: deadline, channel: channel, timeout: timeout)
                        watchdog.arm(step: Self.greeting)
                        return try NIOAsyncChannel<SMTPReply, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            try await withTaskCancellationHandler {
                try await channel.executeThenClose { inbound, outbound in
                    var conversation = SMTPConversation(
                        replies: inbound.makeAsyncIterator(), outbound: outbound, channel: channel.channel, watchdog: watchdog, logger: logger)
                    try await run(&conversation, message: message, sslContext: sslContext)
                }
            } onCancel: {
                watchdog.abort(MailError(.cancelled, "the send was cancelled", isTemporary: true))
            }
            watchdog.stop()
        } catch {
            watchdog.stop()
            throw mailError(for: error, watchdog: watchdog)
        }
    }

    private static let greeting = "the greeting"

    private func run(_ conversation: inout SMTPConversation, message: MailMessage, sslContext: NIOSSLContext) async throws {
        try await conversation.expect(220, step: Self.greeting, command: nil)
        var extensions = try await conversation.expect(250, step: "EHLO", command: "EHLO \(heloName)").extensions
        if !server.implicitTLS {
            if extensions["STARTTLS"] != nil {
                try await conversation.expect(220, step: "STARTTLS", command: "STARTTLS")
                try await conversation.startTLS(context: sslContext, serverHostname: server.sniHostname)
                extensions = try await conversation.expect(250, step: "EHLO", command: "EHLO \(heloName)").extensions
            } else if requiresTLS {
                throw MailError(
                    .tlsRequired,
                    "the server \(server.host):\(server.port) does not offer STARTTLS, and Latchkey sends credentials and mail in the clear only to loopback; "
                        + "use smtps:// if the server speaks TLS on another port", isTemporary: false)
            }
        }
        if let username = server.username {
            try await authenticate(&conversation, username: username, password: server.password ?? "", offered: extensions["AUTH"])
        }
        try await conversation.expect(250, step: "MAIL FROM", command: "MAIL FROM:<\(message.from)>")
        try await conversation.expect([250, 251], step: "RCPT TO", command: "RCPT TO:<\(message.to)>")
        try await conversation.expect(354, step: "DATA", command: "DATA")
        let domain = message.from.split(separator: "@").last.map(String.init) ?? heloName
        let content = Self.dotStuffed(message.rendered(date: Date(), messageID: "\(UUID().uuidString.lowercased())@\(domain)"))
        try await conversation.expect(250, step: "the message", bytes: content)
        // The message is accepted: a failed QUIT changes nothing.
        _ = try? await conversation.expect(221, step: "QUIT", command: "QUIT")
    }

    private func authenticate(_ conversation: inout SMTPConversation, username: String, password: String, offered: [String]?) async throws {
        let offered = offered ?? []
        if offered.contains("PLAIN") {
            let payload = Data("\0\(username)\0\(password)".utf8).base64EncodedString()
            conversation.secrets = [password, payload]
            try await conversation.expect(235, step: "AUTH PLAIN", command: "AUTH PLAIN \(payload)", logged: "AUTH PLAIN")
        } else if offered.contains("LOGIN") {
            let user = Data(username.utf8).base64EncodedString()
            let secret = Data(password.utf8).base64EncodedString()
            conversation.secrets = [password, secret]
            try await conversation.expect(334, step: "AUTH LOGIN", command: "AUTH LOGIN")
            try await conversation.expect(334, step: "AUTH LOGIN (user name)", command: user, logged: "AUTH LOGIN user name")
            try await conversation.expect(235, step: "AUTH LOGIN (password)", command: secret, logged: "AUTH LOGIN password")
        } else {
            let offers = offered.isEmpty ? "no AUTH" : "AUTH \(offered.joined(separator: " "))"
            throw MailError(
                .authenticationUnavailable, "the server offers \(offers), and Latchkey speaks AUTH PLAIN and LOGIN; remove the user name if it needs none",
                isTemporary: false)
        }
    }

    /// The message with a `.` added before every line that starts with one (RFC 5321 §4.5.2), ending in CRLF `.` CRLF.
    static func dotStuffed(_ message: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(message.count + 64)
        var atLineStart = true
        for byte in message {
            if atLineStart && byte == UInt8(ascii: ".") { output.append(UInt8(ascii: ".")) }
            output.append(byte)
            atLineStart = byte == UInt8(ascii: "\n")
        }
        if !output.isEmpty && !(output.suffix(2) == [13, 10]) { output += [13, 10] }
        return output + Array(".\r\n".utf8)
    }

    private func mailError(for error: any Error, watchdog: Watchdog) -> MailError {
        if let failure = watchdog.failure { return failure }
        if let error = error as? MailError { return error }
        if error is NIOSSLError || error is NIOSSLExtraError || error is BoringSSLError {
            return MailError(.tlsFailed, "TLS with \(server.host):\(server.port) failed: \(error)", isTemporary: true)
        }
        if let error = error as? SMTPProtocolError {
            return MailError(.unexpectedReply, "the server at \(server.host):\(server.port) does not speak SMTP: \(error)", isTemporary: true)
        }
        if let error = error as? ChannelError, case .connectTimeout = error {
            return MailError(.timedOut, "connecting to \(server.host):\(server.port) took longer than \(timeout)", isTemporary: true)
        }
        return MailError(.connectionFailed, "the connection to \(server.host):\(server.port) failed: \(error)", isTemporary: true)
    }
}

extension SMTPServer {
    /// The name sent in TLS's SNI and checked against the certificate; none for an IP address, which SNI cannot carry.
    var sniHostname: String? {
        (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }
}

/// The client's side of one connection: writes a command, then waits at most the timeout for its reply.
struct SMTPConversation {
    var replies: NIOAsyncChannelInboundStream<SMTPReply>.AsyncIterator
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    let channel: any Channel
    let watchdog: Watchdog
    let logger: Logger?
    /// What a reply quoted in an error must not show: the password and the AUTH payloads.
    var secrets: [String] = []

    @discardableResult
    mutating func expect(_ code: Int, step: String, command: String?, logged: String? = nil) async throws -> SMTPReply {
        try await expect([code], step: step, bytes: command.map { Array("\($0)\r\n".utf8) }, logged: logged ?? command)
    }

    @discardableResult
    mutating func expect(_ code: Int, step: String, bytes: [UInt8]) async throws -> SMTPReply {
        try await expect([code], step: step, bytes: bytes, logged: "<message, \(bytes.count) bytes>")
    }

    @discardableResult
    mutating func expect(_ codes: Set<Int>, step: String, command: String) async throws -> SMTPReply {
        try await expect(codes, step: step, bytes: Array("\(command)\r\n".utf8), logged: command)
    }

    private mutating func expect(_ codes: Set<Int>, step: String, bytes: [UInt8]?, logged: String?) async throws -> SMTPReply {
        watchdog.arm(step: step)
        defer { watchdog.disarm() }
        let next: SMTPReply?
        do {
            if let bytes {
                logger?.debug("SMTP command", metadata: ["smtp.command": "\(logged ?? step)"])
                try await outbound.write(ByteBuffer(bytes: bytes))
            }
            next = try await replies.next()
        } catch let error as IOError {
            throw watchdog.failure ?? MailError(.connectionClosed, "the connection broke during \(step): \(error)", isTemporary: true)
        } catch let error as ChannelError {
            throw watchdog.failure ?? MailError(.connectionClosed, "the connection broke during \(step): \(error)", isTemporary: true)
        }
        guard let reply = next else {
            throw watchdog.failure ?? MailError(.connectionClosed, "the server closed the connection before it answered \(step)", isTemporary: true)
        }
        logger?.debug("SMTP reply", metadata: ["smtp.step": "\(step)", "smtp.code": "\(reply.code)"])
        guard codes.contains(reply.code) else { throw MailError.reply(reply, to: step, redacting: secrets) }
        return reply
    }

    /// Puts TLS under the conversation, after the server's 220 to STARTTLS; the next write waits for the handshake.
    func startTLS(context: NIOSSLContext, serverHostname: String?) async throws {
        logger?.debug("SMTP starting TLS", metadata: ["smtp.sni": "\(serverHostname ?? "")"])
        let channel = self.channel
        try await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverHostname), position: .first)
        }.get()
    }
}

/// Closes the connection when a step or the whole send runs out of time, or the send is cancelled, and remembers why, so
/// that the error says so instead of "connection closed".
final class Watchdog: Sendable {
    private struct State {
        var channel: (any Channel)?
        var timeout: Duration = .zero
        /// The step whose reply is awaited, and its timeout.
        var step: (name: String, timeout: Scheduled<Void>)?
        var deadline: Scheduled<Void>?
        var reason: MailError?
        var tlsFailure: MailError?
    }

    private let state = Mutex(State())

    /// Why the connection was closed (a timeout, cancellation) or failed (TLS), if it was.
    var failure: MailError? { state.withLock { $0.reason ?? $0.tlsFailure } }

    /// Keeps the first TLS failure: the channel closes right after it, and a read or write then sees only the closing.
    func recordTLSFailure(_ failure: MailError) {
        state.withLock { $0.tlsFailure = $0.tlsFailure ?? failure }
    }

    func start(deadline: NIODeadline, channel: any Channel, timeout: Duration) {
        let task = channel.eventLoop.scheduleTask(deadline: deadline) { [self] in
            abort(MailError(.timedOut, "the send took longer than \(timeout * 3), three times the timeout", isTemporary: true))
        }
        let cancelled = state.withLock {
            $0.channel = channel
            $0.timeout = timeout
            $0.deadline = task
            return $0.reason != nil
        }
        if cancelled { channel.close(promise: nil) }
    }

    /// Starts the wait for `step`'s reply; a wait already running for the same step (the greeting's, armed as the
    /// connection opened) keeps its start.
    func arm(step: String) {
        state.withLock { state in
            guard let channel = state.channel, state.step?.name != step else { return }
            let timeout = state.timeout
            state.step?.timeout.cancel()
            state.step = (
                step,
                channel.eventLoop.scheduleTask(in: TimeAmount(timeout)) { [self] in
                    abort(MailError(.timedOut, "the server did not answer \(step) within \(timeout)", isTemporary: true))
                }
            )
        }
    }

    func disarm() {
        state.withLock {
            $0.step?.timeout.cancel()
            $0.step = nil
        }
    }

    func stop() {
        state.withLock {
            $0.step?.timeout.cancel()
            $0.deadline?.cancel()
            $0.step = nil
            $0.deadline = nil
        }
    }

    /// Records the first reason and closes the connection.
    func abort(_ reason: MailError) {
        let channel = state.withLock { state -> (any Channel)? in
            if state.reason == nil { state.reason = reason }
            return state.channel
        }
        channel?.close(promise: nil)
    }
}

/// Passes TLS errors on and hands the first to the watchdog, so that the send fails with `tls_failed` rather than with
/// the closed connection that follows.
final class TLSFailureRecorder: ChannelInboundHandler, Sendable {
    typealias InboundIn = SMTPReply
    typealias InboundOut = SMTPReply

    private let watchdog: Watchdog
    private let server: String

    init(watchdog: Watchdog, server: String) {
        self.watchdog = watchdog
        self.server = server
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A peer that closes without close_notify has broken the connection, not TLS.
        let uncleanShutdown = (error as? NIOSSLError).map { if case .uncleanShutdown = $0 { true } else { false } } ?? false
        if !uncleanShutdown && (error is NIOSSLError || error is NIOSSLExtraError || error is BoringSSLError) {
            watchdog.recordTLSFailure(MailError(.tlsFailed, "TLS with \(server) failed: \(error)", isTemporary: true))
        }
        context.fireErrorCaught(error)
    }
}
