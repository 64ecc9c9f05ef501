public import LatchkeyJOSE

/// A CBOR data item (RFC 8949) of the subset WebAuthn sends: integers, byte and text strings, arrays, maps, `true`,
/// `false` and `null`.
public enum CBORValue: Sendable, Equatable {
    case unsigned(UInt64)
    /// The integer `-1 - n`.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    /// Entries in the order they came; keys are integers or text, never twice.
    case map([CBORMapEntry])
    case bool(Bool)
    case null

    /// An integer that fits `Int`, else nil.
    public var integer: Int? {
        switch self {
        case .unsigned(let value): value <= UInt64(Int.max) ? Int(value) : nil
        case .negative(let value): value < UInt64(Int.max) ? -1 - Int(value) : nil
        default: nil
        }
    }

    /// The value under `key` (an integer or text) of a map, else nil.
    public subscript(key: CBORValue) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == key }?.value
    }

    public subscript(key: Int) -> CBORValue? { self[key >= 0 ? .unsigned(UInt64(key)) : .negative(UInt64(-1 - key))] }
    public subscript(key: String) -> CBORValue? { self[.text(key)] }

    public var bytes: [UInt8]? { if case .bytes(let value) = self { value } else { nil } }
    public var text: String? { if case .text(let value) = self { value } else { nil } }
}

/// One entry of a ``CBORValue/map(_:)``.
public struct CBORMapEntry: Sendable, Equatable {
    public var key: CBORValue
    public var value: CBORValue

    public init(_ key: CBORValue, _ value: CBORValue) {
        self.key = key
        self.value = value
    }
}

/// A strict CBOR reader for what strangers send (attestation objects, COSE keys): definite lengths only, the shortest
/// encoding of every integer and length, text that is UTF-8, map keys that are integers or text and never repeat, no
/// tags and no floats, bounded nesting and size; a length is checked against the bytes left before anything is made.
/// Anything else is `LatchkeyError(.malformedRequest)` naming what is wrong.
public struct CBORReader: Sendable {
    /// The most bytes one item may take.
    public static let maximumSize = 64 * 1024
    /// The deepest nesting of arrays and maps.
    public static let maximumDepth = 16

    /// The single item `bytes` hold; trailing bytes are refused.
    public static func value(_ bytes: [UInt8]) throws(LatchkeyError) -> CBORValue {
        let (value, end) = try prefix(bytes)
        guard end == bytes.count else { throw refusal("\(bytes.count - end) bytes follow the item") }
        return value
    }

    /// The item at the start of `bytes`, and where it ends: for authenticator data, where the credential key comes
    /// before the extensions.
    public static func prefix(_ bytes: [UInt8]) throws(LatchkeyError) -> (CBORValue, end: Int) {
        guard bytes.count <= maximumSize else { throw refusal("the item is longer than \(maximumSize) bytes") }
        var reader = Cursor(bytes: bytes)
        let value = try reader.item(depth: 0)
        return (value, reader.offset)
    }

    static func refusal(_ reason: String) -> LatchkeyError {
        LatchkeyError(.malformedRequest, "invalid CBOR: \(reason)")
    }

    /// A map key, for finding repeated ones.
    private enum MapKey: Hashable {
        case unsigned(UInt64), negative(UInt64), text(String)
    }

    private struct Cursor {
        let bytes: [UInt8]
        var offset = 0

        mutating func byte() throws(LatchkeyError) -> UInt8 {
            guard offset < bytes.count else { throw refusal("the input ends inside an item") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func take(_ count: UInt64) throws(LatchkeyError) -> ArraySlice<UInt8> {
            guard count <= UInt64(bytes.count - offset) else { throw refusal("a length of \(count) runs past the end of the input") }
            defer { offset += Int(count) }
            return bytes[offset..<offset + Int(count)]
        }

        /// The argument of a head: the value of an integer, the length of a string or container. Only the shortest
        /// form is accepted (RFC 8949 §4.2.1), and 31 (indefinite length) never.
        mutating func argument(_ info: UInt8) throws(LatchkeyError) -> UInt64 {
            let value: UInt64
            switch info {
            case 0..<24: return UInt64(info)
            case 24: value = UInt64(try byte())
            case 25, 26, 27:
                let width = 1 << (info - 24)
                value = try take(UInt64(width)).reduce(0) { $0 << 8 | UInt64($1) }
                guard value >= (width == 2 ? 256 : width == 4 ? 65_536 : 4_294_967_296) else {
                    throw refusal("an integer or length is not in its shortest form")
                }
                return value
            case 31: throw refusal("indefinite lengths are not accepted")
            default: throw refusal("reserved additional information \(info)")
            }
            guard value >= 24 else { throw refusal("an integer or length is not in its shortest form") }
            return value
        }

        mutating func item(depth: Int) throws(LatchkeyError) -> CBORValue {
            guard depth <= maximumDepth else { throw refusal("items are nested deeper than \(maximumDepth)") }
            let head = try byte()
            let major = head >> 5
            let info = head & 0x1F
            switch major {
            case 0: return .unsigned(try argument(info))
            case 1: return .negative(try argument(info))
            case 2: return .bytes(Array(try take(try argument(info))))
            case 3:
                guard let text = String(validating: try take(try argument(info)), as: UTF8.self) else { throw refusal("a text string is not UTF-8") }
                return .text(text)
            case 4:
                let count = try argument(info)
                // Every item takes at least a byte: a count beyond the bytes left is refused before anything is made.
                guard count <= UInt64(bytes.count - offset) else { throw refusal("an array of \(count) items runs past the end of the input") }
                var items: [CBORValue] = []
                for _ in 0..<count { items.append(try item(depth: depth + 1)) }
                return .array(items)
            case 5:
                let count = try argument(info)
                guard count <= UInt64(bytes.count - offset) / 2 else { throw refusal("a map of \(count) entries runs past the end of the input") }
                var entries: [CBORMapEntry] = []
                // A set, not a scan of the entries so far: a large map then costs time linear in its size. Text keys
                // compare as Swift strings do (canonically equivalent spellings are one key), as look-ups compare them.
                var seen: Set<MapKey> = []
                for _ in 0..<count {
                    let key = try item(depth: depth + 1)
                    let name: MapKey
                    switch key {
                    case .unsigned(let value): name = .unsigned(value)
                    case .negative(let value): name = .negative(value)
                    case .text(let value): name = .text(value)
                    default: throw refusal("a map key is neither an integer nor text")
                    }
                    guard seen.insert(name).inserted else { throw refusal("a map has a key twice") }
                    entries.append(CBORMapEntry(key, try item(depth: depth + 1)))
                }
                return .map(entries)
            case 6: throw refusal("tags are not accepted")
            default:
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                default: throw refusal("simple value or float \(info) is not accepted")
                }
            }
        }
    }
}
