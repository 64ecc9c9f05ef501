public import Foundation

/// One e-mail to one recipient: a plain-text body and optionally an HTML one.
///
/// ```swift
/// let message = MailMessage(
///     from: "codes@example.com", to: "ada@example.org", subject: "Your sign-in code",
///     text: "Your code is 123456.", html: "<p>Your code is <b>123456</b>.</p>")
/// ```
public struct MailMessage: Sendable {
    /// The sender's address, `codes@example.com`: the envelope's MAIL FROM and the From header.
    public var from: String
    /// The recipient's address: the envelope's RCPT TO and the To header.
    public var to: String
    /// The subject, in any script: encoded as RFC 2047 words when it is not printable ASCII.
    public var subject: String
    /// The plain-text body.
    public var text: String
    /// The HTML body; with it, the message is multipart/alternative (text first, then HTML).
    public var html: String?

    /// A message; addresses are bare (`name@example.com`, no display name) and checked when it is sent.
    public init(from: String, to: String, subject: String, text: String, html: String?) {
        self.from = from
        self.to = to
        self.subject = subject
        self.text = text
        self.html = html
    }

    /// The message as RFC 5322 bytes with CRLF line endings: Date, Message-ID, MIME-Version, Subject, From and To
    /// headers, then the body parts in quoted-printable, so that the message is 7-bit whatever the text.
    ///
    /// - Parameters:
    ///   - date: The Date header's time, written in UTC.
    ///   - messageID: The Message-ID, `unique@domain`, with or without its angle brackets.
    public func rendered(date: Date, messageID: String) -> [UInt8] {
        let id = Self.headerValue(messageID.hasPrefix("<") ? messageID : "<\(messageID)>")
        var headers = [
            "Date: \(Self.rfc5322Date(date))",
            "Message-ID: \(id)",
            "MIME-Version: 1.0",
            "Subject: \(Self.encodedSubject(subject))",
            "From: \(Self.headerValue(from))",
            "To: \(Self.headerValue(to))",
        ]
        var body: [UInt8] = []
        if let html {
            // "=_" never occurs in quoted-printable text, so no body can contain the boundary.
            let boundary = "=_latchkey_alternative"
            headers.append("Content-Type: multipart/alternative; boundary=\"\(boundary)\"")
            for (type, content) in [("text/plain", text), ("text/html", html)] {
                body += Array("--\(boundary)\r\n".utf8)
                body += Array("Content-Type: \(type); charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n".utf8)
                body += Self.quotedPrintable(content) + Array("\r\n".utf8)
            }
            body += Array("--\(boundary)--\r\n".utf8)
        } else {
            headers.append("Content-Type: text/plain; charset=utf-8")
            headers.append("Content-Transfer-Encoding: quoted-printable")
            body = Self.quotedPrintable(text) + Array("\r\n".utf8)
        }
        return Array((headers.joined(separator: "\r\n") + "\r\n\r\n").utf8) + body
    }

    /// What is wrong with `address` as a bare ASCII address (`local@domain`), or nil.
    static func addressProblem(_ address: String) -> String? {
        let parts = address.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, address.utf8.count <= 254 else {
            return "is not one address of the form name@domain"
        }
        guard address.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) && !"<>()[]\\,;:\"".unicodeScalars.contains($0) }) else {
            return "has spaces, control characters, non-ASCII letters or one of <>()[]\\,;:\""
        }
        return nil
    }

    /// A header value with control characters (CR and LF above all) dropped, so that no value can add a header.
    static func headerValue(_ value: String) -> String {
        String(String.UnicodeScalarView(value.unicodeScalars.filter { $0.properties.generalCategory != .control }))
    }

    /// The subject as it is if it is printable ASCII, else as RFC 2047 `B` encoded words of at most 75 characters, one a
    /// folded line, never splitting a character.
    static func encodedSubject(_ subject: String) -> String {
        let cleaned = String(String.UnicodeScalarView(subject.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }))
        if cleaned.unicodeScalars.allSatisfy({ (0x20...0x7E).contains($0.value) }) && !cleaned.contains("=?") && cleaned.utf8.count <= 900 {
            return cleaned
        }
        // "=?UTF-8?B?" and "?=" leave 63 characters: 60 of base64, 45 bytes.
        var words: [String] = []
        var chunk: [UInt8] = []
        for character in cleaned {
            let bytes = Array(character.utf8)
            if chunk.count + bytes.count > 45, !chunk.isEmpty {
                words.append("=?UTF-8?B?\(Data(chunk).base64EncodedString())?=")
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty || words.isEmpty { words.append("=?UTF-8?B?\(Data(chunk).base64EncodedString())?=") }
        return words.joined(separator: "\r\n ")
    }

    /// RFC 2045 §6.7 quoted-printable of the UTF-8 text: line breaks (CRLF, LF or CR) become CRLF, lines are at most 76
    /// characters with soft breaks, and `=`, non-ASCII bytes and trailing white space are encoded.
    static func quotedPrintable(_ text: String) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        var lines: [[UInt8]] = [[]]
        var previous: UInt8 = 0
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\n") where previous == UInt8(ascii: "\r"): break
            case UInt8(ascii: "\r"), UInt8(ascii: "\n"): lines.append([])
            default: lines[lines.count - 1].append(byte)
            }
            previous = byte
        }
        var output: [UInt8] = []
        for (number, line) in lines.enumerated() {
            if number > 0 { output += [13, 10] }
            var column = 0
            for (index, byte) in line.enumerated() {
                let isLast = index == line.count - 1
                let literal = ((33...126).contains(byte) && byte != UInt8(ascii: "=")) || ((byte == 32 || byte == 9) && !isLast)
                let token = literal ? [byte] : [UInt8(ascii: "="), hex[Int(byte >> 4)], hex[Int(byte & 15)]]
                if column + token.count > 75 {
                    output += [UInt8(ascii: "="), 13, 10]
                    column = 0
                }
                output += token
                column += token.count
            }
        }
        return output
    }

    /// `Thu, 01 Jan 2026 09:05:00 +0000`, RFC 5322 §3.3, in UTC whatever the locale.
    static func rfc5322Date(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.weekday, .day, .month, .year, .hour, .minute, .second], from: date)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int?) -> String { value.map { $0 < 10 ? "0\($0)" : "\($0)" } ?? "00" }
        return "\(days[(parts.weekday ?? 1) - 1]), \(two(parts.day)) \(months[(parts.month ?? 1) - 1]) \(parts.year ?? 1970) "
            + "\(two(parts.hour)):\(two(parts.minute)):\(two(parts.second)) +0000"
    }
}
