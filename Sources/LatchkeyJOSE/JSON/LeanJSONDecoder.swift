public import Foundation
public import JWTKit

/// A strict JSON decoder for the small, flat objects JOSE headers and JWT claim sets are.
///
/// It plugs into jwt-kit as a `JWTJSONDecoder` and differs from Foundation's `JSONDecoder` in two ways
/// that matter for tokens: an object naming a member twice is an error (RFC 7519 §4 lets a verifier
/// refuse such claim sets, and `JSONDecoder` silently keeps one of them), and it builds no dictionary
/// of every member, which is most of the cost of verifying an ID token. Input must be RFC 8259 JSON;
/// anything else is rejected. Nesting is limited to ``maximumDepth``. `Date`s are read as seconds since 1970,
/// as jwt-kit's own decoder reads them (`exp`, `iat`, `nbf`).
public struct LeanJSONDecoder: JWTJSONDecoder {
    /// Deepest nesting accepted; claim sets are one or two levels deep.
    public static let maximumDepth = 16
    /// The `DecodingError.dataCorrupted` description for an integer that neither an `Int64` nor a `Double` holds exactly.
    public static let inexactIntegerDescription = "an integer beyond 64 bits cannot be kept exactly; send it as a string"

    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try decode(type, from: Array(data))
    }

    /// Decodes `T` from UTF-8 JSON bytes.
    public func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        var parser = JSONParser(bytes: bytes)
        let value = try parser.parseDocument()
        return try T(from: LeanDecoder(bytes: bytes, value: value, codingPath: []))
    }
}

/// Why ``LeanJSONDecoder`` refused its input.
public enum LeanJSONError: Error, Sendable, Equatable {
    /// Not RFC 8259 JSON; the offset is where reading stopped.
    case invalidJSON(offset: Int)
    /// An object names `key` twice.
    case duplicateKey(String)
    case tooDeep
}

// MARK: - Parsing

/// A parsed value. Strings and numbers keep their byte range; containers keep their children.
enum JSONNode {
    case string(Range<Int>, escaped: Bool)
    case number(Range<Int>)
    case bool(Bool)
    case null
    case object([JSONMember])
    case array([JSONNode])

    var kind: String {
        switch self {
        case .string: "a string"
        case .number: "a number"
        case .bool: "a boolean"
        case .null: "null"
        case .object: "an object"
        case .array: "an array"
        }
    }
}

/// One member of an object. The name is a range of the input unless it had escapes.
struct JSONMember {
    let keyRange: Range<Int>
    let unescapedKey: [UInt8]?
    let value: JSONNode

    func keyEquals(_ name: UnsafeBufferPointer<UInt8>, in bytes: [UInt8]) -> Bool {
        if let unescapedKey { return unescapedKey.withUnsafeBufferPointer { Self.same($0, name) } }
        guard keyRange.count == name.count else { return false }
        return bytes.withUnsafeBufferPointer { Self.same(UnsafeBufferPointer(rebasing: $0[keyRange]), name) }
    }

    // Every claim look-up compares names; a generic `elementsEqual` was a visible part of verifying a token.
    private static func same(_ first: UnsafeBufferPointer<UInt8>, _ second: UnsafeBufferPointer<UInt8>) -> Bool {
        guard first.count == second.count else { return false }
        guard let left = first.baseAddress, let right = second.baseAddress else { return true }
        return memcmp(left, right, first.count) == 0
    }

    func key(in bytes: [UInt8]) -> String {
        String(decoding: unescapedKey ?? Array(bytes[keyRange]), as: UTF8.self)
    }
}

struct JSONParser {
    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    /// Whether a string read so far holds a byte outside ASCII: the document is then checked to be UTF-8 as a whole.
    private var sawNonASCII = false
    /// Whether the last string read held a byte outside ASCII (before unescaping).
    private var lastStringNonASCII = false

    mutating func parseDocument() throws -> JSONNode {
        let value = try parseValue(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw LeanJSONError.invalidJSON(offset: index) }
        // RFC 8259 §8.1: UTF-8 only. Checked once, and only for documents that are not plain ASCII (most tokens are).
        if sawNonASCII, String(validating: bytes, as: UTF8.self) == nil { throw LeanJSONError.invalidJSON(offset: 0) }
        return value
    }

    private mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    private func fail() -> LeanJSONError { .invalidJSON(offset: index) }

    private mutating func expect(_ literal: StaticString) throws {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw fail() }
        let matches = literal.withUTF8Buffer { literalBytes in
            (0..<count).allSatisfy { bytes[index + $0] == literalBytes[$0] }
        }
        guard matches else { throw fail() }
        index += count
    }

    private mutating func parseValue(depth: Int) throws -> JSONNode {
        guard depth <= LeanJSONDecoder.maximumDepth else { throw LeanJSONError.tooDeep }
        skipWhitespace()
        guard index < bytes.count else { throw fail() }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""):
            let (range, escaped) = try parseString()
            return .string(range, escaped: escaped)
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            return .null
        default:
            return .number(try parseNumber())
        }
    }

    private mutating func parseObject(depth: Int) throws -> JSONNode {
        index += 1
        var members: [JSONMember] = []
        members.reserveCapacity(16)
        var seen: Set<[UInt8]> = []
        var nonASCIINames = false
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail() }
            let (range, escaped) = try parseString()
            let unescaped = escaped ? Array(try unescape(range).utf8) : nil
            nonASCIINames = nonASCIINames || lastStringNonASCII || (unescaped?.contains { $0 >= 0x80 } ?? false)
            if isDuplicate(range, unescaped, among: members, seen: &seen) {
                throw LeanJSONError.duplicateKey(String(decoding: unescaped ?? Array(bytes[range]), as: UTF8.self))
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail() }
            index += 1
            members.append(JSONMember(keyRange: range, unescapedKey: unescaped, value: try parseValue(depth: depth + 1)))
            skipWhitespace()
            guard index < bytes.count else { throw fail() }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw fail() }
            index += 1
            if nonASCIINames { try refuseEquivalentNames(members) }
            return .object(members)
        }
    }

    /// Two names that differ in their scalars but are one Swift `String` (`K` and U+212A KELVIN SIGN, `é` and `e` with
    /// U+0301) would collapse into one member in any dictionary or `Decodable` made from the object: they are refused
    /// as a name given twice. Two ASCII names are equal as strings only when their bytes are, so ASCII objects skip this.
    private func refuseEquivalentNames(_ members: [JSONMember]) throws {
        var names: Set<String> = []
        for member in members {
            let name = member.key(in: bytes)
            guard names.insert(name).inserted else { throw LeanJSONError.duplicateKey(name) }
        }
    }

    /// Objects up to this size are checked for duplicate names by comparing with each earlier member, which is
    /// cheaper than hashing; larger ones switch to a set, so the check stays linear in the object's size.
    static let linearDuplicateScanLimit = 16

    private func isDuplicate(_ range: Range<Int>, _ unescaped: [UInt8]?, among members: [JSONMember], seen: inout Set<[UInt8]>) -> Bool {
        if members.count < Self.linearDuplicateScanLimit {
            let source = bytes
            let matches = { (name: UnsafeBufferPointer<UInt8>) in members.contains { $0.keyEquals(name, in: source) } }
            return unescaped.map { $0.withUnsafeBufferPointer(matches) } ?? source[range].withUnsafeBufferPointer(matches)
        }
        if seen.isEmpty {
            for member in members { seen.insert(member.unescapedKey ?? Array(bytes[member.keyRange])) }
        }
        return !seen.insert(unescaped ?? Array(bytes[range])).inserted
    }

    private mutating func parseArray(depth: Int) throws -> JSONNode {
        index += 1
        var elements: [JSONNode] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            elements.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw fail() }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw fail() }
            index += 1
            return .array(elements)
        }
    }

    /// Returns the range between the quotes and whether it holds escapes.
    private mutating func parseString() throws -> (Range<Int>, Bool) {
        index += 1
        let start = index
        var escaped = false
        lastStringNonASCII = false
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                defer { index += 1 }
                return (start..<index, escaped)
            case UInt8(ascii: "\\"):
                escaped = true
                index += 1
                guard index < bytes.count else { throw fail() }
                switch bytes[index] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    index += 1
                case UInt8(ascii: "u"):
                    guard index + 4 < bytes.count, (1...4).allSatisfy({ bytes[index + $0].isHexDigit }) else { throw fail() }
                    index += 5
                default:
                    throw fail()
                }
            case 0..<0x20:
                throw fail()
            case 0x80...:
                (sawNonASCII, lastStringNonASCII) = (true, true)
                index += 1
            default:
                index += 1
            }
        }
        throw fail()
    }

    private mutating func parseNumber() throws -> Range<Int> {
        let start = index
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, bytes[index].isDigit else { throw fail() }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, bytes[index].isDigit { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, bytes[index].isDigit else { throw fail() }
            while index < bytes.count, bytes[index].isDigit { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, bytes[index].isDigit else { throw fail() }
            while index < bytes.count, bytes[index].isDigit { index += 1 }
        }
        return start..<index
    }

    /// Decodes the escapes of a string already checked by `parseString`.
    func unescape(_ range: Range<Int>) throws -> String {
        // The escaped text, quotes restored, is a JSON document Foundation decodes exactly.
        let quoted = [UInt8(ascii: "\"")] + bytes[range] + [UInt8(ascii: "\"")]
        guard let string = try? JSONDecoder().decode(String.self, from: Data(quoted)) else { throw LeanJSONError.invalidJSON(offset: range.lowerBound) }
        return string
    }
}

extension UInt8 {
    fileprivate var isDigit: Bool { self >= UInt8(ascii: "0") && self <= UInt8(ascii: "9") }
    fileprivate var isHexDigit: Bool {
        isDigit || (self >= UInt8(ascii: "a") && self <= UInt8(ascii: "f")) || (self >= UInt8(ascii: "A") && self <= UInt8(ascii: "F"))
    }
}
