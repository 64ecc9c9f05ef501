import Foundation
import LatchkeyCore
public import LatchkeyJOSE
import NIOCore

/// The reverse proxies in front of the server, and so which address of a request is its client's.
///
/// Each proxy appends the address it received the request from to `X-Forwarded-For`; everything left of
/// what the trusted proxies added was written by the client and proves nothing. So the client is the
/// right-most address that no trusted proxy added: with `.hops(n)`, the n-th address from the right of the
/// chain (the `X-Forwarded-For` entries followed by the connection's peer); with `.networks`, the right-most
/// address outside them.
public enum TrustedProxies: Sendable, Equatable {
    /// No proxy: the connection's peer is the client, and `X-Forwarded-For` is ignored.
    case none
    /// This many proxies, each adding one entry.
    case hops(Int)
    /// Proxies at these addresses.
    case networks([IPNetwork])

    /// Parses `["2"]` (a hop count) or CIDRs such as `["10.0.0.0/8", "fd00::/8", "192.0.2.7"]`.
    public init(parsing values: [String]) throws(LatchkeyError) {
        if values.count == 1, let hops = Int(values[0]) {
            guard (0...16).contains(hops) else { throw LatchkeyError(.invalidConfiguration, "a hop count must be between 0 and 16") }
            self = hops == 0 ? .none : .hops(hops)
            return
        }
        var networks: [IPNetwork] = []
        for value in values {
            guard let network = IPNetwork(cidr: value) else {
                throw LatchkeyError(.invalidConfiguration, "\"\(value.prefix(60))\" is neither a hop count nor a CIDR such as 10.0.0.0/8 or fd00::/8")
            }
            networks.append(network)
        }
        self = networks.isEmpty ? .none : .networks(networks)
    }

    /// The client's address given the connection's `peer` and the `X-Forwarded-For` entries, oldest first.
    public func clientAddress(peer: String?, forwardedFor: [String]) -> String? {
        switch self {
        case .none:
            return peer
        case .hops(let hops):
            let chain = forwardedFor + [peer ?? "unknown"]
            let index = chain.count - 1 - hops
            // Fewer entries than proxies: the request did not come through them, so only the peer is known.
            return index >= 0 ? chain[index] : peer
        case .networks(let networks):
            var chain = forwardedFor + [peer ?? "unknown"]
            while chain.count > 1, let last = chain.last, let address = IPAddressBytes(last), networks.contains(where: { $0.contains(address) }) {
                chain.removeLast()
            }
            return chain.last
        }
    }
}

/// An IPv4 or IPv6 network in CIDR notation.
public struct IPNetwork: Sendable, Equatable, CustomStringConvertible {
    let address: IPAddressBytes
    let prefixLength: Int

    /// `10.0.0.0/8`, `fd00::/8`, or a single address.
    public init?(cidr: String) {
        let parts = cidr.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddressBytes(String(parts[0])) else { return nil }
        let maximum = address.bytes.count * 8
        let length = parts.count == 2 ? Int(parts[1]) : maximum
        guard let length, (0...maximum).contains(length) else { return nil }
        self.address = address
        self.prefixLength = length
    }

    public var description: String { "\(address)/\(prefixLength)" }

    func contains(_ other: IPAddressBytes) -> Bool {
        guard other.bytes.count == address.bytes.count else { return false }
        var remaining = prefixLength
        for (mine, theirs) in zip(address.bytes, other.bytes) where remaining > 0 {
            let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
            guard mine & mask == theirs & mask else { return false }
            remaining -= 8
        }
        return true
    }
}

/// The bytes of an IPv4 (4) or IPv6 (16) address, parsed by NIO.
struct IPAddressBytes: Sendable, Equatable, CustomStringConvertible {
    let bytes: [UInt8]
    let description: String

    init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let address = try? SocketAddress(ipAddress: trimmed, port: 0) else { return nil }
        switch address {
        case .v4(let v4): bytes = withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6):
            let raw = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            // A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d; match them against IPv4 networks.
            bytes = raw.prefix(10).allSatisfy { $0 == 0 } && raw[10] == 0xFF && raw[11] == 0xFF ? Array(raw.suffix(4)) : raw
        default: return nil
        }
        description = trimmed
    }
}
