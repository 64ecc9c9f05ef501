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

/// One name or value of an `application/x-www-form-urlencoded` body decoded: `+` is a space, `%XX` a byte. Nil for a
/// `%` not followed by two hex digits, or bytes that are not UTF-8: what Foundation's `removingPercentEncoding` (after
/// replacing `+`) answered, without its UTF-16 round trip.
package func formDecoded(_ text: Substring) -> String? {
    let utf8 = text.utf8
    guard utf8.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else { return String(text) }
    func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(utf8.count)
    var index = utf8.startIndex
    while index != utf8.endIndex {
        let byte = utf8[index]
        index = utf8.index(after: index)
        switch byte {
        case UInt8(ascii: "+"):
            bytes.append(UInt8(ascii: " "))
        case UInt8(ascii: "%"):
            guard index != utf8.endIndex, let high = hexValue(utf8[index]) else { return nil }
            index = utf8.index(after: index)
            guard index != utf8.endIndex, let low = hexValue(utf8[index]) else { return nil }
            index = utf8.index(after: index)
            bytes.append(high << 4 | low)
        default:
            bytes.append(byte)
        }
    }
    // Decoding repairs bytes that are not UTF-8 (String(validating:) needs iOS 18): a repaired string differs.
    let decoded = String(decoding: bytes, as: UTF8.self)
    return decoded.utf8.elementsEqual(bytes) ? decoded : nil
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
