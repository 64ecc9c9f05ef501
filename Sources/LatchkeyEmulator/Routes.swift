import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

extension Emulator {
    func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: FaultMiddleware(state: state))
        for profile in ProviderProfiles.all { profile.addRoutes(self, router) }
        addControlRoutes(to: router)
        addAppAttestRoutes(to: router)
        return router
    }
}

/// Largest request body the emulator reads; Apple's forms are a few KiB.
let maximumBodySize = 64 * 1024

enum HTTPAnswer {
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, noStore: Bool = false) -> Response {
        let data = (try? JSONEncoder.sorted.encode(value)) ?? Data("{}".utf8)
        var headers: HTTPFields = [.contentType: "application/json;charset=UTF-8"]
        if noStore {
            headers[.cacheControl] = "no-store"
            headers[.init("Pragma")!] = "no-cache"
        }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func html(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ location: String) -> Response {
        Response(status: .found, headers: [.location: location, .cacheControl: "no-store"])
    }

    /// Apple's error answer: 400, `{"error": code}`, never cached.
    static func appleError(_ code: String) -> Response { json(["error": code], status: .badRequest, noStore: true) }

    static func empty(_ status: HTTPResponse.Status = .ok) -> Response { Response(status: status) }
}

/// Reads an `application/x-www-form-urlencoded` body. A repeated parameter is reported, as Apple refuses
/// them; a body that is not form encoding yields `malformed` (and whatever fields could be read).
func readForm(_ request: Request) async throws -> (fields: [String: String], duplicate: String?, malformed: Bool) {
    let buffer = try await request.body.collect(upTo: maximumBodySize)
    return parseForm(String(buffer: buffer))
}

func parseForm(_ body: String) -> (fields: [String: String], duplicate: String?, malformed: Bool) {
    var fields: [String: String] = [:]
    var duplicate: String?
    var malformed = false
    for pair in body.split(separator: "&", omittingEmptySubsequences: true) {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard let name = decodeFormComponent(parts[0]), let value = decodeFormComponent(parts.count > 1 ? parts[1] : "") else {
            malformed = true
            continue
        }
        if fields[name] != nil { duplicate = name }
        fields[name] = value
    }
    return (fields, duplicate, malformed)
}

/// The bytes a form component may hold, built once rather than for each component of every form.
private let formAlphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~*+%!'()".utf8)

/// Decodes one form component: `+` is a space, `%XX` a byte; anything outside the form alphabet is refused.
private func decodeFormComponent(_ component: Substring) -> String? {
    guard component.utf8.allSatisfy({ formAlphabet.contains($0) }) else { return nil }
    return component.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
}

extension Request {
    /// `http://host:port` as the client addressed the emulator.
    var baseURL: String { "http://\(head.authority ?? "127.0.0.1")" }

    var bearerToken: String? {
        guard let value = headers[.authorization], value.lowercased().hasPrefix("bearer ") else { return nil }
        return String(value.dropFirst(7)).trimmingCharacters(in: .whitespaces)
    }

    func query(_ name: String) -> String? { uri.queryParameters.get(name) }

    /// Every query parameter; of one sent twice, the last.
    var queryDictionary: [String: String] {
        var parameters: [String: String] = [:]
        for (name, value) in uri.queryParameters { parameters[String(name)] = String(value) }
        return parameters
    }

    /// `client_id` and `client_secret` sent as HTTP Basic credentials (RFC 6749 §2.3.1: each form-encoded).
    var basicCredentials: (id: String, secret: String)? {
        guard let value = headers[.authorization], value.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(value.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let pair = String(data: decoded, encoding: .utf8), let colon = pair.firstIndex(of: ":")
        else { return nil }
        let fields = parseForm("id=\(pair[..<colon])&secret=\(pair[pair.index(after: colon)...])").fields
        guard let id = fields["id"], let secret = fields["secret"] else { return nil }
        return (id, secret)
    }
}

extension Emulator {
    /// Runs an endpoint of a provider other than Apple: logs the call (its path, `clientID`, `grantType`, status
    /// and error) and answers a ``ProviderOAuthError`` with its status and JSON body, never cached.
    func providerEndpoint(
        _ request: Request, clientID: String? = nil, grantType: String? = nil, _ body: () async throws(ProviderOAuthError) -> Response
    ) async -> Response {
        var entry = RequestRecord(
            time: await state.now, method: request.method.rawValue, endpoint: request.uri.path, clientId: clientID, grantType: grantType, status: 200)
        entry.traceparent = request.headers[HTTPField.Name("traceparent")!]
        let response: Response
        do throws(ProviderOAuthError) {
            response = try await body()
        } catch {
            entry.error = error.code
            entry.detail = error.description
            response = HTTPAnswer.json(error.response, status: .init(code: error.status), noStore: true)
        }
        entry.status = Int(response.status.code)
        await state.record(entry)
        return response
    }

    /// A form endpoint of a provider other than Apple (token, revoke): Basic credentials join the form, and the
    /// call is logged under the form's client id, or the client of the `token` it names.
    func providerFormEndpoint(_ request: Request, _ body: ([String: String]) async throws(ProviderOAuthError) -> Response) async throws -> Response {
        var (form, _, malformed) = try await readForm(request)
        if let (id, secret) = request.basicCredentials {
            form["client_id"] = id
            form["client_secret"] = secret
        }
        var clientID = form["client_id"]
        if clientID == nil, let token = form["token"] { clientID = await state.clientID(ofToken: token) }
        return await providerEndpoint(request, clientID: clientID, grantType: form["grant_type"]) { () throws(ProviderOAuthError) in
            if malformed { throw ProviderOAuthError(status: 400, code: "invalid_request", description: "The request body is not form encoded.") }
            return try await body(form)
        }
    }

    /// A GET endpoint (discovery, keys), logged like the others.
    func providerDocument(_ request: Request, _ document: () async throws(ProviderOAuthError) -> Response) async -> Response {
        await providerEndpoint(request) { () throws(ProviderOAuthError) in try await document() }
    }
}

/// Injects the faults set through `/emulator/faults` into provider endpoints.
struct FaultMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let state: EmulatorState

    struct DroppedConnection: Error {}

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard !path.hasPrefix("/emulator/"), let fault = await state.takeFault(for: path) else {
            return try await next(request, context)
        }
        await state.record(
            RequestRecord(
                time: await state.now, method: request.method.rawValue, endpoint: path, status: fault.status ?? 0, error: "fault:\(fault.kind.rawValue)"))
        switch fault.kind {
        case .latency:
            try await Task.sleep(for: .milliseconds(fault.latencyMilliseconds ?? 1000))
            return try await next(request, context)
        case .status:
            return HTTPAnswer.empty(.init(code: fault.status ?? 500))
        case .rateLimit:
            return Response(status: .tooManyRequests, headers: [.retryAfter: "1"])
        case .malformedJSON:
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"access_token\": ")))
        case .dropConnection:
            return Response(status: .ok, body: ResponseBody { _ in throw DroppedConnection() })
        }
    }
}
