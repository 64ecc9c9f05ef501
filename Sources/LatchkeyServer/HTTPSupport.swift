import Foundation
public import Hummingbird
import LatchkeyCore
import LatchkeyModels
import LatchkeyStore
import Logging
import NIOCore

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

    static func invalidRequest(_ description: String) -> APIError { APIError(status: .badRequest, code: "invalid_request", description: description) }
}

enum JSONBody {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "application/json; charset=utf-8"
        if fields[.cacheControl] == nil { fields[.cacheControl] = "no-store" }
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func error(_ error: APIError) -> Response {
        var headers = error.headers
        headers[.init("Pragma")!] = "no-cache"
        return response(OAuthErrorResponse(error: error.code, errorDescription: error.description), status: error.status, headers: headers)
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
        case let error as HTTPError:
            return APIError(status: error.status, code: error.status == .notFound ? "not_found" : "invalid_request", description: error.body ?? error.status.reasonPhrase)
        case is DecodingError:
            return .invalidRequest("the body is not the JSON this endpoint takes (see /openapi.json)")
        default:
            logger.error("request failed", metadata: ["error.type": "\(String(describing: type(of: error)))"])
            return APIError(status: .internalServerError, code: "server_error", description: "the server could not complete the request")
        }
    }

    static func apiError(_ error: LatchkeyError) -> APIError {
        switch error.code {
        case .invalidToken:
            return APIError(status: .unauthorized, code: "invalid_token", description: error.reason, headers: [.wwwAuthenticate: #"Bearer error="invalid_token""#])
        case .invalidGrant, .invalidRequest, .unsupportedGrantType, .invalidScope:
            return APIError(status: .badRequest, code: error.errorCode, description: error.reason)
        case .temporarilyUnavailable, .providerUnavailable, .providerRateLimited, .keysUnavailable:
            return APIError(status: .serviceUnavailable, code: "temporarily_unavailable", description: error.reason, headers: [.retryAfter: "30"])
        case .invalidClient, .unauthorizedClient, .invalidProviderResponse, .invalidConfiguration, .invalidKey:
            // Apple refusing our client is this server's misconfiguration, not the caller's fault.
            return APIError(status: .badGateway, code: error.errorCode, description: error.reason)
        case .notFound:
            return APIError(status: .notFound, code: "not_found", description: error.reason)
        case .rateLimited:
            return APIError(status: .tooManyRequests, code: "rate_limited", description: error.reason)
        case .invalidNotification:
            return APIError(status: .badRequest, code: "invalid_request", description: error.reason)
        default:
            // Identity-token verification failures: the code says which check failed.
            return APIError(status: .unauthorized, code: error.errorCode, description: error.reason)
        }
    }
}

/// Per-IP limits on the sign-in and token endpoints.
struct RateLimitMiddleware: RouterMiddleware {
    typealias Context = LatchkeyRequestContext
    let limiter: RateLimiter

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        if request.method == .post, path.hasPrefix("/v1/auth/") || path == "/v1/token" {
            if let wait = limiter.check("ip:" + (context.clientAddress ?? "unknown")) {
                throw APIError(status: .tooManyRequests, code: "rate_limited", description: "too many requests from this address; retry in \(wait) s", headers: [.retryAfter: String(wait)])
            }
        }
        return try await next(request, context)
    }
}

extension Request {
    /// The body, refused above `limit` bytes.
    func bytes(limit: Int) async throws -> [UInt8] {
        Array(buffer: try await body.collect(upTo: limit))
    }

    var bearerToken: String? {
        guard let value = headers[.authorization] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1]).trimmingCharacters(in: .whitespaces)
    }
}
