public import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import LatchkeyCore
import LatchkeyJOSE
import Logging
import NIOCore
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// How long connections may sit or dribble, and how many may be open: what keeps idle and slow clients from holding
/// the process's file descriptors (`http.idleTimeout`, `http.readTimeout`, `http.maxConnections`).
public struct ConnectionLimits: Sendable, Equatable {
    /// A connection with no request under way is closed after this long (seconds).
    public var idleTimeout: TimeInterval = 60
    /// A request must arrive whole — head and body, from its first byte — within this long (seconds), or its connection
    /// is closed: a client dribbling a byte at a time (slowloris) cannot hold a connection for longer.
    public var readTimeout: TimeInterval = 10
    /// At most this many connections are open at once; further clients wait in the listen backlog until one closes.
    /// Nil: the process's descriptor limit less ``reservedDescriptors``, at most ``defaultMaximumConnections``.
    public var maxConnections: Int?

    public init() {}

    /// Descriptors kept for everything but client connections: the database, outbound provider calls, files, logs.
    public static let reservedDescriptors = 256
    /// The cap when none is set, on a machine whose descriptor limit is higher.
    public static let defaultMaximumConnections = 10_000

    /// The cap in force: ``maxConnections``, or one derived from the descriptor limit.
    public var effectiveMaxConnections: Int {
        if let maxConnections { return maxConnections }
        return Self.derivedMaximum(descriptorLimit: Self.descriptorLimit())
    }

    static func derivedMaximum(descriptorLimit: Int?) -> Int {
        guard let descriptorLimit else { return defaultMaximumConnections }
        return max(16, min(defaultMaximumConnections, descriptorLimit - reservedDescriptors))
    }

    /// The soft limit on open files (`RLIMIT_NOFILE`), nil when unlimited or unknown.
    static func descriptorLimit() -> Int? {
        var limit = rlimit()
        // RLIM_INFINITY is all ones; any limit past a billion files is as good as none.
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < 1_000_000_000 else { return nil }
        return Int(limit.rlim_cur)
    }

    func validate() throws(LatchkeyError) {
        guard idleTimeout.isFinite, (1...3600).contains(idleTimeout) else { throw setting("http.idleTimeout", "must be between 1 and 3600 seconds") }
        guard readTimeout.isFinite, (1...300).contains(readTimeout) else { throw setting("http.readTimeout", "must be between 1 and 300 seconds") }
        if let maxConnections {
            guard maxConnections >= 1 else { throw setting("http.maxConnections", "is \(maxConnections); it must be at least 1") }
            if let limit = Self.descriptorLimit(), maxConnections > limit - 32 {
                throw setting(
                    "http.maxConnections",
                    "is \(maxConnections), but this process may open only \(limit) files; raise the limit (ulimit -n) or lower the setting")
            }
        }
    }
}

extension HTTPServerBuilder {
    /// HTTP/1.1 with Latchkey's connection limits: Hummingbird's idle timeout, plus a deadline on reading each request.
    static func latchkey(_ limits: ConnectionLimits) -> HTTPServerBuilder {
        let idle = TimeAmount.nanoseconds(Int64(limits.idleTimeout * 1_000_000_000))
        let read = TimeAmount.nanoseconds(Int64(limits.readTimeout * 1_000_000_000))
        return .init { responder in
            RequestDeadlineChannel(base: HTTP1Channel(responder: responder, configuration: .init(idleTimeout: idle)), readTimeout: read)
        }
    }
}

/// Hummingbird's HTTP/1.1 channel, with ``RequestDeadline`` around its decoder: the deadline starts at a request's first
/// byte (seen before decoding) and ends at its decoded end.
struct RequestDeadlineChannel: ServerChildChannel {
    let base: HTTP1Channel
    let readTimeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1Channel.Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let deadline = RequestDeadline(timeout: readTimeout)
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(RequestDeadline.FirstByte(deadline), position: .first)
            try pipeline.addHandler(RequestDeadline.End(deadline), position: .after(try pipeline.handler(type: HTTP1ToHTTPServerCodec.self)))
            return value
        }
    }

    func handle(value: HTTP1Channel.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// The time one connection has left to deliver the request it started. Lives on the connection's event loop: its two
/// handlers, one on each side of the HTTP decoder, are the only ones to touch it.
final class RequestDeadline {
    let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    /// Bytes arrived: the first ones of a request start the clock.
    func bytesArrived(_ context: ChannelHandlerContext) {
        guard timer == nil else { return }
        timer = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(in: timeout) { [weak self] in
            self?.timer = nil
            // A client still sending its request: closing is all that is left (a response could interleave with one
            // being written for a pipelined request).
            context.close(promise: nil)
        }
    }

    /// The request is whole: no deadline until the next one starts.
    func requestEnded() {
        timer?.cancel()
        timer = nil
    }

    /// Sees raw bytes before the HTTP decoder.
    final class FirstByte: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        let deadline: RequestDeadline
        init(_ deadline: RequestDeadline) { self.deadline = deadline }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            deadline.bytesArrived(context)
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            deadline.requestEnded()
            context.fireChannelInactive()
        }
    }

    /// Sees decoded request parts.
    final class End: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPRequestPart
        let deadline: RequestDeadline
        init(_ deadline: RequestDeadline) { self.deadline = deadline }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if case .end = unwrapInboundIn(data) { deadline.requestEnded() }
            context.fireChannelRead(data)
        }
    }
}
