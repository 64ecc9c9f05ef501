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

/// One value percent-encoded as a form field's: what RFC 6749 §2.3.1 asks of a client id and secret in a Basic header.
/// ASCII letters, digits and `-._*` stay; every other UTF-8 byte is `%XX`. Byte by byte: Foundation's
/// `addingPercentEncoding`, which gave the same, walked UTF-16 through a character set, about 200,000 instructions for
/// the fields of one Apple code exchange.
package func formEscape(_ value: String) -> String {
    func allowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "*"): true
        default: false
        }
    }
    guard !value.utf8.allSatisfy(allowed) else { return value }
    let digits = Array("0123456789ABCDEF".utf8)
    var escaped: [UInt8] = []
    escaped.reserveCapacity(value.utf8.count * 3)
    for byte in value.utf8 {
        if allowed(byte) {
            escaped.append(byte)
        } else {
            escaped += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
        }
    }
    return String(decoding: escaped, as: UTF8.self)
}
