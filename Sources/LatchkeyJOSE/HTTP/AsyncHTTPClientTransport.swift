public import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
import Tracing

/// ``HTTPTransport`` over AsyncHTTPClient, with a cap on the response size.
public struct AsyncHTTPClientTransport: HTTPTransport {
    public let client: HTTPClient
    /// Responses larger than this are refused; provider answers are a few KiB.
    public let maximumResponseBytes: Int

    /// The client provider calls share: `HTTPClient.shared`'s settings, except that a refused connection fails at once
    /// instead of being retried until the request's deadline. A provider that is down then costs one round trip
    /// per attempt, and the caller's retry policy (attempts, backoff) decides what happens next.
    public static let providerClient: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.connectionPool.retryConnectionEstablishment = false
        // Spans come from ``AsyncHTTPClientTransport`` itself: AsyncHTTPClient's own would record the query, where a
        // provider call may carry a token.
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// The client webhook deliveries share: like ``providerClient``, and never redirected (a signed event goes where it
    /// was configured to, or nowhere).
    public static let webhookClient: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.tracing.tracer = nil
        configuration.redirectConfiguration = .disallow
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    public init(client: HTTPClient = AsyncHTTPClientTransport.providerClient, maximumResponseBytes: Int = 1 << 20) {
        self.client = client
        self.maximumResponseBytes = maximumResponseBytes
    }

    /// Sends `request` and reads its answer, all within `request.timeout`: a server that sends its head at once and
    /// then drips its body fails at the deadline like one that never answers.
    public func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
        let host = URL(string: request.url)?.host ?? "the provider"
        let limit = maximumResponseBytes
        do {
            try Self.check(request.url)
            return try await Self.within(request.timeout, on: client.eventLoopGroup.next()) {
                let response = try await execute(request)
                let body = try await response.body.collect(upTo: limit)
                var headers: [String: String] = [:]
                for (name, value) in response.headers { headers[name.lowercased()] = value }
                return OutboundResponse(status: Int(response.status.code), headers: headers, body: Array(buffer: body))
            }
        } catch let error as NIOTooManyBytesError {
            _ = error
            throw LatchkeyError(.invalidProviderResponse, "\(host) answered with more than \(maximumResponseBytes) bytes")
        } catch {
            throw LatchkeyError(.providerUnavailable, "could not reach \(host): \(Self.shortDescription(error))")
        }
    }

    /// Sends `request` and answers only its status: the body is read up to ``maximumResponseBytes`` and dropped, and a
    /// longer one does not make the answer fail (a webhook endpoint's 2xx counts whatever page comes with it). The
    /// whole exchange, head and body, ends within `request.timeout`.
    public func status(of request: OutboundRequest) async throws(LatchkeyError) -> Int {
        let limit = maximumResponseBytes
        do {
            try Self.check(request.url)
            return try await Self.within(request.timeout, on: client.eventLoopGroup.next()) {
                let response = try await execute(request)
                _ = try? await response.body.collect(upTo: limit)
                try Task.checkCancellation()
                return Int(response.status.code)
            }
        } catch {
            throw LatchkeyError(.providerUnavailable, "could not reach \(URL(string: request.url)?.host ?? "the endpoint"): \(Self.shortDescription(error))")
        }
    }

    /// Configured URLs were checked at start-up; a URL made later (a discovery document's) is checked before the call,
    /// since a port above 65535 on an IP-literal host traps inside the client instead of failing. It is checked before
    /// the deadline starts, so that a busy machine cannot turn its refusal into a timeout.
    private static func check(_ url: String) throws {
        if let problem = OutboundURL.problem(url) { throw InvalidURL(problem: problem) }
    }

    private func execute(_ request: OutboundRequest) async throws -> HTTPClientResponse {
        var outbound = HTTPClientRequest(url: request.url)
        outbound.method = HTTPMethod(rawValue: request.method)
        for header in request.headers { outbound.headers.add(name: header.name, value: header.value) }
        if let body = request.body { outbound.body = .bytes(ByteBuffer(bytes: body)) }
        let url = URL(string: request.url)
        let timeout = TimeAmount(request.timeout)
        // A client span per call, its W3C traceparent passed on. Only the host and path are recorded: a query may hold a
        // token (Facebook's debug_token takes one).
        return try await withSpan("\(request.method) \(url?.host ?? "")", ofKind: .client) { span in
            span.attributes["http.request.method"] = request.method
            span.attributes["server.address"] = url?.host
            span.attributes["url.path"] = url?.path
            InstrumentationSystem.instrument.inject(ServiceContext.current ?? .topLevel, into: &outbound.headers, using: HTTPHeadersInjector())
            let response = try await client.execute(outbound, timeout: timeout)
            span.attributes["http.response.status_code"] = Int(response.status.code)
            return response
        }
    }

    private struct HTTPHeadersInjector: Injector {
        func inject(_ value: String, forKey key: String, into headers: inout HTTPHeaders) { headers.replaceOrAdd(name: key, value: value) }
    }

    private struct InvalidURL: Error { let problem: String }
    private struct DeadlineExceeded: Error { let timeout: Duration }

    /// Runs `operation` in a task of its own, cancelled (and failed) when it takes longer than `timeout`. AsyncHTTPClient's
    /// own deadline ends once the head arrives; this one covers reading the body too.
    ///
    /// The deadline is a task scheduled on `eventLoop` and cancelled with the answer. A `Task.sleep` in a task group did
    /// the same, but a cancelled sleep stays scheduled, with a task of its own, until its deadline: each call left both
    /// behind for its whole timeout (1.5 MB of the heap under the bench's load of Apple sign-ins, by heaptrack).
    static func within<T: Sendable>(
        _ timeout: Duration, on eventLoop: any EventLoop, _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let task = Task { try await operation() }
        let expired = ExpiryFlag()
        let deadline = eventLoop.scheduleTask(in: TimeAmount(timeout)) {
            expired.set()
            task.cancel()
        }
        defer { deadline.cancel() }
        do {
            return try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch {
            if expired.isSet { throw DeadlineExceeded(timeout: timeout) }
            throw error
        }
    }

    private final class ExpiryFlag: Sendable {
        private let flag = Atomic(false)
        func set() { flag.store(true, ordering: .releasing) }
        var isSet: Bool { flag.load(ordering: .acquiring) }
    }

    private static func shortDescription(_ error: any Error) -> String {
        if let error = error as? HTTPClientError { return error.shortDescription }
        if let error = error as? InvalidURL { return "the URL is unusable: \(error.problem)" }
        if let error = error as? DeadlineExceeded { return "no whole answer within \(error.timeout)" }
        return String(describing: type(of: error))
    }
}
