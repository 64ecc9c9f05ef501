import Foundation
import HTTPTypes
public import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyStore
import Logging
import NIOCore
import NIOHTTP1

/// Hummingbird's request context with the client's address, for rate limits.
public struct LatchkeyRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public let clientAddress: String?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        clientAddress = source.channel.remoteAddress?.ipAddress
    }
}

/// An error answered with an RFC 6749-style body: `{"error": …, "error_description": …}`.
struct APIError: Error {
    let status: HTTPResponse.Status
    let code: String
    let description: String
    var headers: HTTPFields = [:]
    /// `identity_in_use` answered to a guest, who may merge instead.
    var mergeable: Bool? = nil

    static func invalidRequest(_ description: String) -> APIError { APIError(status: .badRequest, code: "invalid_request", description: description) }
}

enum JSONBody {
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "application/json; charset=utf-8"
        if fields[.cacheControl] == nil { fields[.cacheControl] = "no-store" }
        let bytes = (try? LeanJSONEncoder().encode(value)) ?? Array("{}".utf8)
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func error(_ error: APIError) -> Response {
        var headers = error.headers
        headers[.init("Pragma")!] = "no-cache"
        return response(
            OAuthErrorResponse(error: error.code, errorDescription: error.description, mergeable: error.mergeable), status: error.status, headers: headers)
    }
}

/// Maps every error to a JSON body with a 4xx (or, for Latchkey's own faults, a 5xx that reveals nothing).
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = LatchkeyRequestContext
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch {
            response = JSONBody.error(Self.apiError(error, logger: context.logger))
        }
        metrics.request(route: context.endpointPath ?? "unmatched", status: Int(response.status.code))
        return response
    }

    static func apiError(_ error: any Error, logger: Logger) -> APIError {
        switch error {
        case let error as APIError:
            return error
        case let error as LatchkeyError:
            return apiError(error)
        case is NIOTooManyBytesError:
            return APIError(status: .contentTooLarge, code: "invalid_request", description: "the request body is too large")
        case is HTTPParserError:
            // The client's bytes are not HTTP/1.1 (a chunk size that is not hexadecimal, say): its fault, not ours.
            return .invalidRequest("the request is not well-formed HTTP/1.1 (its body's chunked encoding, say)")
        case let error as HTTPError:
            return APIError(
                status: error.status, code: error.status == .notFound ? "not_found" : "invalid_request", description: error.body ?? error.status.reasonPhrase)
        case is DecodingError:
            return .invalidRequest("the body is not the JSON this endpoint takes (see /openapi.json)")
        case let error as AuthStoreError:
            logger.error("the database failed", metadata: ["error": "\(error)"])
            switch error {
            case .unavailable:
                return APIError(
                    status: .serviceUnavailable, code: "temporarily_unavailable", description: "the database is unavailable; try again shortly",
                    headers: [.retryAfter: "5"])
            case .duplicate, .notFound:
                // A record changed under a request (a concurrent sign-in or deletion); the retry sees the new state.
                return APIError(
                    status: .serviceUnavailable, code: "temporarily_unavailable", description: "the account changed while this request ran; try again",
                    headers: [.retryAfter: "1"])
            }
        default:
            logger.error("request failed", metadata: ["error.type": "\(String(describing: type(of: error)))"])
            return APIError(status: .internalServerError, code: "server_error", description: "the server could not complete the request")
        }
    }

    static func apiError(_ error: LatchkeyError) -> APIError {
        switch error.code {
        case .invalidToken:
            return APIError(
                status: .unauthorized, code: "invalid_token", description: error.reason, headers: [.wwwAuthenticate: #"Bearer error="invalid_token""#])
        case .invalidGrant:
            return APIError(status: .badRequest, code: error.errorCode, description: error.reason)
        case .temporarilyUnavailable, .providerUnavailable, .providerRateLimited, .keysUnavailable:
            return APIError(status: .serviceUnavailable, code: "temporarily_unavailable", description: error.reason, headers: [.retryAfter: "30"])
        case .invalidClient:
            // A provider refusing this server's client is the operator's problem; the details stay in the operator's tools.
            return APIError(
                status: .badGateway, code: "invalid_client",
                description: "the provider did not accept this server's client credentials; the operator should run `latchkey doctor --live`")
        case .invalidRequest, .unsupportedGrantType, .invalidScope, .unauthorizedClient, .invalidProviderResponse, .invalidConfiguration, .invalidKey:
            // Apple's objections to our own requests, and our own configuration, are not the caller's fault.
            return APIError(status: .badGateway, code: error.errorCode, description: error.reason)
        case .notFound:
            return APIError(status: .notFound, code: "not_found", description: error.reason)
        case .rateLimited:
            return APIError(status: .tooManyRequests, code: "rate_limited", description: error.reason)
        case .malformedRequest:
            return APIError(status: .badRequest, code: "invalid_request", description: error.reason)
        case .identityInUse, .lastIdentity, .mergeNotAllowed:
            return APIError(status: .conflict, code: error.errorCode, description: error.reason)
        case .signupClosed, .accountDisabled, .appleTransferIncomplete:
            return APIError(status: .forbidden, code: error.errorCode, description: error.reason)
        case .invalidCredential, .credentialCloneSuspected:
            return APIError(status: .unauthorized, code: error.errorCode, description: error.reason)
        case .challengeExpired, .invalidDPoPProof, .useDPoPNonce:
            return APIError(status: .badRequest, code: error.errorCode, description: error.reason)
        case .invalidAttestation:
            return APIError(status: .unauthorized, code: error.errorCode, description: error.reason)
        case .invalidNotification:
            return APIError(status: .badRequest, code: "invalid_request", description: error.reason)
        case .malformedToken, .tokenTooLarge, .unsupportedAlgorithm, .unsupportedCriticalHeader, .unknownKeyID, .invalidSignature, .missingClaim,
            .duplicateClaim, .invalidClaim, .unexpectedIssuer, .unexpectedAudience, .tokenExpired, .tokenNotYetValid, .issuedInFuture, .nonceMissing,
            .nonceMismatch, .nonceRequired, .tokenAlreadyUsed, .codeHashMismatch, .accessTokenHashMismatch:
            // Identity-token verification failures: the code says which check failed.
            return APIError(status: .unauthorized, code: error.errorCode, description: error.reason)
        }
    }
}

/// Per-IP limits on every route that may call a provider: sign-ins, refreshes (the daily grant check), the browser flow,
/// linking and unlinking, and account deletion (revocations); and on the passkey routes that write a challenge or a
/// credential. One session must not be able to make this server hammer a provider, or fill its store, however valid
/// its token.
struct RateLimitMiddleware: RouterMiddleware {
    typealias Context = LatchkeyRequestContext
    let limiter: RateLimiter
    /// Whose `X-Forwarded-For` entries are believed.
    let trustedProxies: TrustedProxies

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // The matched route, not the raw path: the router also serves `//v1/token` and `/v1/token/` there.
        let path = context.endpointPath ?? request.uri.path
        if Self.isLimited(request.method, path) {
            let client = trustedProxies.clientAddress(request, context) ?? "unknown"
            if let wait = limiter.check("ip:" + client) {
                throw APIError(
                    status: .tooManyRequests, code: "rate_limited", description: "too many requests from this address; retry in \(wait) s",
                    headers: [.retryAfter: String(wait)])
            }
        }
        return try await next(request, context)
    }

    /// Whether the route (its template, as matched) may call a provider, or writes a passkey challenge or credential.
    static func isLimited(_ method: HTTPRequest.Method, _ path: String) -> Bool {
        switch method {
        case .post:
            path.hasPrefix("/v1/auth/") || path == "/v1/token" || path.hasPrefix("/v1/me/identities/") || path.hasPrefix("/oauth2/")
                || path.hasPrefix("/v1/me/passkeys")
        case .delete: path == "/v1/me" || path.hasPrefix("/v1/me/identities/")
        default: path.hasPrefix("/oauth2/")
        }
    }

}

extension TrustedProxies {
    /// The client of `request`: the connection's peer, or behind these proxies the address they forwarded.
    func clientAddress(_ request: Request, _ context: LatchkeyRequestContext) -> String? {
        guard self != .none else { return context.clientAddress }
        let forwarded = request.headers[values: .xForwardedFor].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        return clientAddress(peer: context.clientAddress, forwardedFor: forwarded)
    }
}

extension HTTPField.Name {
    static let xForwardedFor = Self("X-Forwarded-For")!
    static let xRequestID = Self("X-Request-Id")!
}

/// One info line per request — method, route template, status, duration, request id — and the id in `X-Request-Id`.
/// Never the query string, a body or a header value: those carry codes and tokens.
struct AccessLogMiddleware: RouterMiddleware {
    typealias Context = LatchkeyRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let id = Self.requestID(request.headers[.xRequestID])
        var context = context
        context.logger[metadataKey: "request.id"] = .string(id)
        let start = ContinuousClock.now
        var response = try await next(request, context)
        response.headers[.xRequestID] = id
        if context.logger.logLevel <= .info {
            let elapsed = ContinuousClock.now - start
            let microseconds = elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
            context.logger.info(
                "request",
                metadata: [
                    "http.method": .string(request.method.rawValue), "http.route": .string(context.endpointPath ?? "unmatched"),
                    "http.status": .stringConvertible(Int(response.status.code)), "duration_ms": .stringConvertible(Double(microseconds / 10) / 100),
                ]
            )
        }
        return response
    }

    /// A proxy's id when it is short and plain (so it cannot smuggle anything into logs), else a new one.
    static func requestID(_ incoming: String?) -> String {
        if let incoming, (1...64).contains(incoming.utf8.count),
            incoming.utf8.allSatisfy({
                $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || ($0 >= 0x30 && $0 <= 0x39)
                    || (($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A)
            })
        {
            return incoming
        }
        return newIdentifier()
    }
}

/// CORS for an allow-list of origins: the matching origin is echoed, preflights are answered here.
struct CORSAllowListMiddleware: RouterMiddleware {
    typealias Context = LatchkeyRequestContext
    let origins: Set<String>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = request.headers[.origin], origins.contains(origin) else { return try await next(request, context) }
        var response: Response
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil {
            response = Response(status: .noContent)
            response.headers[.accessControlAllowMethods] = "GET, POST, DELETE, OPTIONS"
            response.headers[.accessControlAllowHeaders] = "Authorization, Content-Type"
            response.headers[.accessControlMaxAge] = "600"
        } else {
            response = try await next(request, context)
        }
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.vary] = "Origin"
        return response
    }
}

extension Request {
    /// The body, refused above `limit` bytes.
    func bytes(limit: Int) async throws -> [UInt8] {
        Array(buffer: try await body.collect(upTo: limit))
    }

    /// The token of `Authorization: Bearer <token>`.
    var bearerToken: String? {
        guard let (scheme, token) = authorization, scheme == .bearer else { return nil }
        return token
    }

    /// The scheme and token of `Authorization: Bearer <token>` or `Authorization: DPoP <token>` (RFC 9449 §7.1).
    /// Byte-level on purpose: Foundation's trimming takes the slow UTF-16 path and was a quarter of the cost of an
    /// authenticated request.
    var authorization: (AuthorizationScheme, String)? {
        guard let value = headers[.authorization] else { return nil }
        let bytes = value.utf8
        let scheme: AuthorizationScheme
        let name: Int
        if bytes.count > 7, bytes.prefix(6).map({ $0 | 0x20 }).elementsEqual("bearer".utf8) {
            (scheme, name) = (.bearer, 6)
        } else if bytes.count > 5, bytes.prefix(4).map({ $0 | 0x20 }).elementsEqual("dpop".utf8) {
            (scheme, name) = (.dpop, 4)
        } else {
            return nil
        }
        guard bytes.dropFirst(name).first == UInt8(ascii: " ") else { return nil }
        let token = bytes.dropFirst(name + 1).drop { $0 == UInt8(ascii: " ") }
        let end = token.lastIndex { $0 != UInt8(ascii: " ") }.map { token.index(after: $0) } ?? token.startIndex
        let trimmed = token[token.startIndex..<end]
        return trimmed.isEmpty ? nil : (scheme, String(decoding: trimmed, as: UTF8.self))
    }
}

/// How an access token is presented.
enum AuthorizationScheme: Sendable { case bearer, dpop }
