import Foundation

/// The one check every URL Latchkey calls out to passes (webhook endpoints, provider and discovery URLs, issuers):
/// read once at start-up so that no configured URL can fail, or crash, only when it is first used.
public enum OutboundURL {
    /// What is wrong with `url` as an address to send requests to, or nil: it must be `http` or `https`, name a host,
    /// and have no port or a port from 1 to 65535.
    public static func problem(_ url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
            let host = components.host, !host.isEmpty
        else { return "not an http or https URL with a host" }
        guard hasPortOrNone(url) else { return "its port is not a port (1 to 65535)" }
        return nil
    }

    /// Whether the authority of `uri` has no port, or a port: 1 to 65535 in ASCII digits, with no sign and not empty
    /// after its colon. Read from the text itself: Foundation's parser lets `:99999999999999999999` through, and a port
    /// above 65535 on an IP-literal host traps inside the HTTP client.
    package static func hasPortOrNone(_ uri: String) -> Bool {
        guard let start = uri.range(of: "://")?.upperBound else { return false }
        var authority = uri[start...].prefix { !"/?#".contains($0) }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let port: Substring
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return false }
            let rest = authority[authority.index(after: close)...]
            if rest.isEmpty { return true }
            guard rest.first == ":" else { return false }
            port = rest.dropFirst()
        } else {
            guard let colon = authority.firstIndex(of: ":") else { return true }
            port = authority[authority.index(after: colon)...]
        }
        let digits = port.utf8
        guard (1...5).contains(digits.count), digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }), let value = Int(port)
        else { return false }
        return (1...65_535).contains(value)
    }
}
