import Foundation

/// One outbound HTTP request, as Latchkey's provider clients make them.
public struct OutboundRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]?
    public var timeout: Duration

    public init(method: String = "GET", url: String, headers: [(name: String, value: String)] = [], body: [UInt8]? = nil, timeout: Duration = .seconds(10)) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }

    /// A `POST` of `application/x-www-form-urlencoded` fields, the only body Apple's token endpoints take.
    public static func form(url: String, fields: [(String, String)], headers: [(name: String, value: String)] = [], timeout: Duration = .seconds(10))
        -> OutboundRequest
    {
        OutboundRequest(
            method: "POST",
            url: url,
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")] + headers,
            body: Array(formURLEncoded(fields).utf8),
            timeout: timeout
        )
    }
}

/// The answer to an ``OutboundRequest``.
public struct OutboundResponse: Sendable {
    public var status: Int
    /// Header names are lowercased.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        self.body = body
    }
}

/// How provider clients reach the network. The default is ``AsyncHTTPClientTransport``;
/// tests hand in an in-memory transport or point the default at the loopback emulator.
public protocol HTTPTransport: Sendable {
    /// Sends `request`. Throws `provider_unavailable` when no answer arrives (connection, timeout, size cap).
    func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse
}

/// Percent-encodes form fields (`application/x-www-form-urlencoded`).
public func formURLEncoded(_ fields: [(String, String)]) -> String {
    fields.map { "\(formEscape($0.0))=\(formEscape($0.1))" }.joined(separator: "&")
}

private let formAllowed: CharacterSet = {
    var set = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
    set.insert(charactersIn: "-._*")
    return set
}()

/// One value percent-encoded as a form field's: what RFC 6749 §2.3.1 asks of a client id and secret in a Basic header.
package func formEscape(_ value: String) -> String {
    value.addingPercentEncoding(withAllowedCharacters: formAllowed) ?? ""
}
