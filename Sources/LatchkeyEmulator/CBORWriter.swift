/// A CBOR data item as the App Attest stand-in writes it (RFC 8949): definite lengths, shortest heads, map
/// entries in the order given (Apple's attestation objects are not in canonical order).
indirect enum CBORItem: Sendable {
    case integer(Int)
    case bytes([UInt8])
    case text(String)
    case array([CBORItem])
    case map([(CBORItem, CBORItem)])

    /// The item's encoding.
    var encoded: [UInt8] {
        var output: [UInt8] = []
        write(into: &output)
        return output
    }

    private func write(into output: inout [UInt8]) {
        switch self {
        case .integer(let value):
            // -1 - value cannot overflow for a negative Int.
            value >= 0 ? Self.head(0, UInt64(value), into: &output) : Self.head(1, UInt64(-1 - value), into: &output)
        case .bytes(let bytes):
            Self.head(2, UInt64(bytes.count), into: &output)
            output += bytes
        case .text(let text):
            Self.head(3, UInt64(text.utf8.count), into: &output)
            output += text.utf8
        case .array(let items):
            Self.head(4, UInt64(items.count), into: &output)
            for item in items { item.write(into: &output) }
        case .map(let entries):
            Self.head(5, UInt64(entries.count), into: &output)
            for (key, value) in entries {
                key.write(into: &output)
                value.write(into: &output)
            }
        }
    }

    /// A head: the major type and its argument, in the fewest bytes (additional information 24 to 27 for 1 to 8 bytes).
    private static func head(_ major: UInt8, _ argument: UInt64, into output: inout [UInt8]) {
        guard argument >= 24 else { return output.append(major << 5 | UInt8(argument)) }
        let width = argument < 0x100 ? 1 : argument < 0x1_0000 ? 2 : argument < 0x1_0000_0000 ? 4 : 8
        output.append(major << 5 | (24 + UInt8(width.trailingZeroBitCount)))
        output += (0..<width).reversed().map { UInt8(truncatingIfNeeded: argument >> (8 * $0)) }
    }
}
