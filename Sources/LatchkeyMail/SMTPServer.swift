import Foundation

/// Where and how to send: parsed from `smtp://user:password@host:port` (STARTTLS, port 587 unless given) or
/// `smtps://user:password@host:port` (TLS from the first byte, port 465 unless given).
///
/// The user name and password are percent-decoded. The password is kept private: ``description`` and the mirror that
/// `dump` and string interpolation read never show it.
///
/// ```swift
/// let server = try SMTPServer(url: "smtps://codes%40example.com@smtp.example.com", password: "s3cret")
/// ```
public struct SMTPServer: Sendable, CustomStringConvertible, CustomReflectable {
    /// The server's host name or IP address (an IPv6 address without its brackets).
    public var host: String
    /// The server's TCP port.
    public var port: Int
    /// Whether TLS starts with the connection (`smtps`) rather than after STARTTLS (`smtp`).
    public var implicitTLS: Bool
    /// The user name for AUTH; no AUTH when nil.
    public var username: String?
    let password: String?

    /// Reads a server URL.
    ///
    /// - Parameters:
    ///   - url: `smtp://` or `smtps://`, then optionally `user:password@`, a host, and optionally `:port`. A trailing `/`
    ///     is allowed; a path, query or fragment is not.
    ///   - password: The password, overriding the URL's: read from a file (`email.smtp.passwordFile`) so that it stays
    ///     out of the URL.
    /// - Throws: ``MailError`` `invalid_server_url`, whose reason never quotes the URL.
    public init(url: String, password: String? = nil) throws(MailError) {
        guard let separator = url.range(of: "://") else { throw .invalidServerURL("does not start with smtp:// or smtps://") }
        switch url[..<separator.lowerBound].lowercased() {
        case "smtp": (implicitTLS, port) = (false, 587)
        case "smtps": (implicitTLS, port) = (true, 465)
        default: throw .invalidServerURL("has a scheme other than smtp or smtps")
        }
        var authority = url[separator.upperBound...]
        if let end = authority.firstIndex(where: { "/?#".contains($0) }) {
            guard authority[end...] == "/" else { throw .invalidServerURL("has a path, query or fragment") }
            authority = authority[..<end]
        }
        var urlPassword: String?
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            authority = authority[authority.index(after: at)...]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let user = String(parts[0]).removingPercentEncoding else { throw .invalidServerURL("has a user name that is not percent-encoded") }
            username = user.isEmpty ? nil : user
            if parts.count == 2 {
                guard let secret = String(parts[1]).removingPercentEncoding else { throw .invalidServerURL("has a password that is not percent-encoded") }
                urlPassword = secret
            }
        } else {
            username = nil
        }
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalidServerURL("has an IPv6 address without its closing bracket") }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let rest = authority[authority.index(after: close)...]
            guard rest.isEmpty || rest.first == ":" else { throw .invalidServerURL("has text after its IPv6 address") }
            portText = rest.isEmpty ? nil : rest.dropFirst()
        } else if let colon = authority.firstIndex(of: ":") {
            host = String(authority[..<colon])
            portText = authority[authority.index(after: colon)...]
        } else {
            host = String(authority)
            portText = nil
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && !$0.isWhitespace && $0 != "@" }) else {
            throw .invalidServerURL("names no host, or a host that is not ASCII")
        }
        if let portText {
            // Read from the text: Foundation's URL parser lets a port such as `99999999999999999999` through.
            guard (1...5).contains(portText.count), portText.allSatisfy({ ("0"..."9").contains($0) }), let value = Int(portText),
                (1...65_535).contains(value)
            else { throw .invalidServerURL("has a port that is not a number from 1 to 65535") }
            port = value
        }
        self.password = password ?? urlPassword
    }

    /// The server as a URL without its password: `smtps://codes%40example.com@smtp.example.com:465`.
    public var description: String {
        var userAllowed = CharacterSet.urlUserAllowed
        userAllowed.remove(charactersIn: "@:")
        let user = username.map { "\($0.addingPercentEncoding(withAllowedCharacters: userAllowed) ?? "")@" } ?? ""
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(implicitTLS ? "smtps" : "smtp")://\(user)\(shownHost):\(port)"
    }

    /// The public properties only, so that `dump` never shows the password.
    public var customMirror: Mirror {
        Mirror(self, children: ["host": host, "port": port, "implicitTLS": implicitTLS, "username": username as Any], displayStyle: .struct)
    }

    /// Whether `host` is this machine: `localhost`, 127.0.0.0/8 or ::1. Mail to any other host goes over TLS.
    var isLoopback: Bool {
        let name = host.lowercased()
        if name == "localhost" || name == "localhost." { return true }
        if name == "::1" || name == "0:0:0:0:0:0:0:1" { return true }
        let octets = name.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }
}
