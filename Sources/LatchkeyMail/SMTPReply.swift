import Foundation
import NIOCore

/// One SMTP reply: a three-digit code and its text lines (RFC 5321 §4.2). A multiline reply (`250-…` lines, then `250 …`)
/// is one reply.
struct SMTPReply: Sendable, Equatable {
    var code: Int
    var lines: [String]

    /// The reply's text, bounded and on one line, with every secret replaced: for errors, never for logs.
    func quotedText(redacting secrets: [String]) -> String {
        var text = lines.joined(separator: " ")
        for secret in secrets where !secret.isEmpty {
            text = text.replacingOccurrences(of: secret, with: "<redacted>")
        }
        let printable = text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : String($0) }.joined()
        return printable.count > 200 ? String(printable.prefix(200)) + "…" : printable
    }

    /// The EHLO reply's extension keywords, upper-cased, with their parameters (`AUTH` → `["PLAIN", "LOGIN"]`).
    var extensions: [String: [String]] {
        var result: [String: [String]] = [:]
        for line in lines.dropFirst() {
            // Some servers still write the pre-RFC 4954 form `AUTH=PLAIN LOGIN`.
            let words = line.uppercased().split(whereSeparator: { $0 == " " || $0 == "=" }).map(String.init)
            guard let keyword = words.first else { continue }
            result[keyword, default: []].append(contentsOf: words.dropFirst())
        }
        return result
    }
}

/// A reply line did not have the form RFC 5321 §4.2 gives it.
struct SMTPProtocolError: Error, CustomStringConvertible {
    var description: String
}

/// Splits the server's bytes into replies: lines end with CRLF (a bare LF is accepted), and `NNN-text` lines continue
/// the reply that `NNN text` (or a bare `NNN`) ends.
struct SMTPReplyDecoder: ByteToMessageDecoder {
    typealias InboundOut = SMTPReply

    /// RFC 5321 §4.5.3.1.5 allows 512 octets a reply line; a server sending much more is not speaking SMTP.
    static let maximumLineLength = 4096
    static let maximumLines = 200

    private var pending: SMTPReply?

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > Self.maximumLineLength {
                throw SMTPProtocolError(description: "a reply line is longer than \(Self.maximumLineLength) bytes")
            }
            return .needMoreData
        }
        let length = newline - buffer.readerIndex + 1
        guard length <= Self.maximumLineLength + 2, var bytes = buffer.readBytes(length: length) else {
            throw SMTPProtocolError(description: "a reply line is longer than \(Self.maximumLineLength) bytes")
        }
        bytes.removeLast()
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        let digits = bytes.prefix(3)
        guard digits.count == 3, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let code = Int(String(decoding: digits, as: UTF8.self)), (200...599).contains(code)
        else { throw SMTPProtocolError(description: "a reply line does not start with a reply code") }
        let separator = bytes.count > 3 ? bytes[3] : UInt8(ascii: " ")
        guard separator == UInt8(ascii: " ") || separator == UInt8(ascii: "-") else {
            throw SMTPProtocolError(description: "a reply code is not followed by a space or a hyphen")
        }
        let text = bytes.count > 4 ? String(decoding: bytes[4...], as: UTF8.self) : ""
        var reply = pending ?? SMTPReply(code: code, lines: [])
        guard reply.code == code else { throw SMTPProtocolError(description: "a multiline reply changes its code from \(reply.code) to \(code)") }
        guard reply.lines.count < Self.maximumLines else { throw SMTPProtocolError(description: "a reply has more than \(Self.maximumLines) lines") }
        reply.lines.append(text)
        if separator == UInt8(ascii: "-") {
            pending = reply
        } else {
            pending = nil
            context.fireChannelRead(wrapInboundOut(reply))
        }
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A reply cut off by the end of the connection is no reply: the client sees the stream end instead.
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}
