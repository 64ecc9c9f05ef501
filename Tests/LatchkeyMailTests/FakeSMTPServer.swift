import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import Testing

/// An SMTP server on 127.0.0.1 that plays a script and records what the client sent: each command line, and each
/// message's lines as they came over the wire (still dot-stuffed).
final class FakeSMTPServer: Sendable {
    struct Script: Sendable {
        /// The greeting; nil never answers anything.
        var greeting: String? = "220 fake.test ESMTP ready"
        /// The EHLO reply's extension lines (STARTTLS is added when `tls` is set).
        var extensions: [String] = ["AUTH PLAIN LOGIN", "8BITMIME"]
        /// Replies by command verb (`MAIL`, `RCPT`, `DATA`, `AUTH`, `EHLO`, …), instead of the usual one.
        var replies: [String: String] = [:]
        /// The server's TLS, offered with STARTTLS (or from the first byte with `implicitTLS`).
        var tls: NIOSSLContext?
        var implicitTLS = false
        /// Close the connection after the first line of the message.
        var closeDuringData = false
        /// Send every reply this long after its command (the greeting after the connection), instead of at once.
        var replyDelay: TimeAmount?
    }

    struct Record: Sendable {
        var commands: [String] = []
        var messages: [[String]] = []
        var tlsStarted = false
    }

    let script: Script
    let record = Mutex(Record())
    private let channel: Mutex<(any Channel)?> = Mutex(nil)

    init(_ script: Script = Script()) {
        self.script = script
    }

    var commands: [String] { record.withLock { $0.commands } }
    var messages: [[String]] { record.withLock { $0.messages } }
    var tlsStarted: Bool { record.withLock { $0.tlsStarted } }

    /// Starts listening and returns the port.
    func start() async throws -> Int {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    if script.implicitTLS, let tls = script.tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    }
                    try channel.pipeline.syncOperations.addHandler(FakeSMTPHandler(server: self))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        channel.withLock { $0 = server }
        return try #require(server.localAddress?.port)
    }

    func stop() async {
        let server = channel.withLock { $0 }
        try? await server?.close()
    }

    /// Runs `body` with a started server's port, then stops the server.
    static func with<T>(_ script: Script = Script(), _ body: (FakeSMTPServer, Int) async throws -> T) async throws -> T {
        let server = FakeSMTPServer(script)
        let port = try await server.start()
        do {
            let result = try await body(server, port)
            await server.stop()
            return result
        } catch {
            await server.stop()
            throw error
        }
    }
}

/// One connection's side of the script.
private final class FakeSMTPHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let server: FakeSMTPServer
    private var pending: [UInt8] = []
    private var message: [String]?
    private var authLogin = 0

    init(server: FakeSMTPServer) {
        self.server = server
    }

    func channelActive(context: ChannelHandlerContext) {
        if let greeting = server.script.greeting { reply(greeting, context) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        pending += buffer.readableBytesView
        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
            var line = Array(pending[..<newline])
            pending.removeSubrange(...newline)
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            handle(String(decoding: line, as: UTF8.self), context)
            guard context.channel.isActive else { return }
        }
    }

    private func handle(_ line: String, _ context: ChannelHandlerContext) {
        let script = server.script
        if var lines = message {
            if line == "." {
                server.record.withLock { $0.messages.append(lines) }
                message = nil
                reply("250 2.0.0 queued", context)
            } else {
                lines.append(line)
                message = lines
                if script.closeDuringData { context.close(promise: nil) }
            }
            return
        }
        server.record.withLock { $0.commands.append(line) }
        guard script.greeting != nil else { return }
        if authLogin > 0 {
            authLogin += 1
            reply(authLogin == 2 ? "334 UGFzc3dvcmQ6" : "235 2.7.0 accepted", context)
            if authLogin == 3 { authLogin = 0 }
            return
        }
        let verb = String(line.prefix { $0 != " " }).uppercased()
        if let scripted = script.replies[verb] {
            reply(scripted, context)
            return
        }
        switch verb {
        case "EHLO":
            let tls = script.tls != nil && !script.implicitTLS && !server.tlsStarted
            let lines = ["fake.test greets you"] + script.extensions + (tls ? ["STARTTLS"] : [])
            reply(lines.enumerated().map { "250\($0.offset == lines.count - 1 ? " " : "-")\($0.element)" }.joined(separator: "\r\n"), context)
        case "STARTTLS":
            guard let tls = script.tls else { return reply("502 5.5.1 no TLS here", context) }
            reply("220 2.0.0 go ahead", context)
            server.record.withLock { $0.tlsStarted = true }
            try? context.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls), position: .first)
        case "AUTH" where line.uppercased().hasPrefix("AUTH LOGIN"):
            authLogin = 1
            reply("334 VXNlcm5hbWU6", context)
        case "AUTH": reply("235 2.7.0 accepted", context)
        case "MAIL", "RCPT": reply("250 2.1.0 ok", context)
        case "DATA":
            message = []
            reply("354 end with .", context)
        case "QUIT":
            reply("221 2.0.0 bye", context)
            context.close(promise: nil)
        default: reply("500 5.5.2 unknown command", context)
        }
    }

    private func reply(_ text: String, _ context: ChannelHandlerContext) {
        let buffer = wrapOutboundOut(ByteBuffer(string: text + "\r\n"))
        guard let delay = server.script.replyDelay else { return context.writeAndFlush(buffer, promise: nil) }
        let loop = context.eventLoop.assumeIsolated()
        loop.scheduleTask(in: delay) { context.writeAndFlush(buffer, promise: nil) }
    }
}
