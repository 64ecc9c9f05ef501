import Foundation
import LatchkeyModels

/// A JSON value of an export file, numbers kept as the digits the file has: a user id written as a number (Auth0 lets
/// `identities[].user_id` be one) is read as exactly those digits, never through a `Double`.
enum ExportJSON: Equatable {
    case string(String)
    /// The number's literal text, as in the file.
    case number(String)
    case bool(Bool)
    case null
    case array([ExportJSON])
    /// Members in the file's order.
    case object([(String, ExportJSON)])

    static func == (left: ExportJSON, right: ExportJSON) -> Bool {
        switch (left, right) {
        case (.string(let a), .string(let b)), (.number(let a), .number(let b)): a == b
        case (.bool(let a), .bool(let b)): a == b
        case (.null, .null): true
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: false
        }
    }

    /// Parses one JSON document (RFC 8259; surrounding whitespace allowed).
    static func parse(_ bytes: some Collection<UInt8>) throws(ExportJSONError) -> ExportJSON {
        var parser = ExportJSONParser(bytes: Array(bytes))
        return try parser.document()
    }

    static func parse(_ text: String) throws(ExportJSONError) -> ExportJSON { try parse(Array(text.utf8)) }

    /// The member `name` of an object (the last one, should the object name it twice); nil for a missing member, an
    /// explicit `null`, or a value that is no object.
    subscript(name: String) -> ExportJSON? {
        guard case .object(let members) = self, let value = members.last(where: { $0.0 == name })?.1 else { return nil }
        if case .null = value { return nil }
        return value
    }

    /// What the value is, for a problem's reason.
    var kind: String {
        switch self {
        case .string: "a string"
        case .number: "a number"
        case .bool: "a boolean"
        case .null: "null"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// The value as a claim: integers that an `Int64` holds stay integers, other numbers become `Double`s; nil for an
    /// integer too large for 64 bits or a number beyond a `Double`, which no claim can keep.
    var jsonValue: JSONValue? {
        switch self {
        case .string(let text): return .string(text)
        case .bool(let flag): return .bool(flag)
        case .null: return .null
        case .number(let literal):
            if let integer = Int64(literal) { return .integer(integer) }
            if literal.allSatisfy({ $0.isNumber || $0 == "-" }) { return nil }
            guard let number = Double(literal), number.isFinite else { return nil }
            return .number(number)
        case .array(let elements):
            var values: [JSONValue] = []
            for element in elements {
                guard let value = element.jsonValue else { return nil }
                values.append(value)
            }
            return .array(values)
        case .object(let members):
            var values: [String: JSONValue] = [:]
            for (name, member) in members {
                guard let value = member.jsonValue else { return nil }
                values[name] = value
            }
            return .object(values)
        }
    }
}

/// Why a JSON document could not be read; the offset is in bytes from its start.
struct ExportJSONError: Error, Equatable {
    let offset: Int
    let reason: String

    var description: String { "\(reason) at byte \(offset)" }
}

/// A recursive-descent reader of one JSON document; nesting is limited so that no file can exhaust the stack.
private struct ExportJSONParser {
    static let maximumDepth = 64

    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) {
        self.bytes = bytes
        // A UTF-8 byte order mark, as some editors write.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
    }

    mutating func document() throws(ExportJSONError) -> ExportJSON {
        let value = try self.value(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw fail("unexpected text after the JSON value") }
        return value
    }

    private func fail(_ reason: String) -> ExportJSONError { ExportJSONError(offset: index, reason: reason) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(ExportJSONError) -> ExportJSON {
        guard depth <= Self.maximumDepth else { throw fail("JSON nested more than \(Self.maximumDepth) deep") }
        skipWhitespace()
        guard index < bytes.count else { throw fail("the JSON ends early") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw fail("not JSON")
        }
    }

    private mutating func literal(_ word: String) throws(ExportJSONError) {
        let expected = Array(word.utf8)
        guard bytes.count - index >= expected.count, bytes[index..<index + expected.count].elementsEqual(expected) else { throw fail("not JSON") }
        index += expected.count
    }

    private mutating func object(depth: Int) throws(ExportJSONError) -> ExportJSON {
        index += 1
        var members: [(String, ExportJSON)] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            let name = try string()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index += 1
            members.append((name, try value(depth: depth + 1)))
            skipWhitespace()
            guard index < bytes.count else { throw fail("the JSON ends early") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            } else {
                throw fail("expected ',' or '}'")
            }
        }
    }

    private mutating func array(depth: Int) throws(ExportJSONError) -> ExportJSON {
        index += 1
        var elements: [ExportJSON] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            elements.append(try value(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw fail("the JSON ends early") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            } else {
                throw fail("expected ',' or ']'")
            }
        }
    }

    private mutating func string() throws(ExportJSONError) -> String {
        index += 1
        var text: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = String(validating: text, as: UTF8.self) else { throw fail("a string that is not UTF-8") }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("the JSON ends early") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escape)
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                case UInt8(ascii: "u"): text.append(contentsOf: try unicodeEscape())
                default: throw fail("an unknown escape in a string")
                }
            case 0..<0x20:
                throw fail("a control character in a string")
            default:
                text.append(byte)
                index += 1
            }
        }
        throw fail("a string that does not end")
    }

    /// The UTF-8 of a `\uXXXX` escape (the `\u` read), with its low surrogate when it is a high one.
    private mutating func unicodeEscape() throws(ExportJSONError) -> [UInt8] {
        let first = try hex4()
        var scalarValue = UInt32(first)
        if (0xD800..<0xDC00).contains(first) {
            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                throw fail("a lone surrogate in a string")
            }
            index += 2
            let second = try hex4()
            guard (0xDC00..<0xE000).contains(second) else { throw fail("a lone surrogate in a string") }
            scalarValue = 0x10000 + ((UInt32(first) - 0xD800) << 10) + (UInt32(second) - 0xDC00)
        }
        guard let scalar = Unicode.Scalar(scalarValue) else { throw fail("a lone surrogate in a string") }
        return Array(String(Character(scalar)).utf8)
    }

    private mutating func hex4() throws(ExportJSONError) -> UInt16 {
        guard bytes.count - index >= 4, let value = UInt16(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
            throw fail("a bad \\u escape in a string")
        }
        index += 4
        return value
    }

    private mutating func number() throws(ExportJSONError) -> String {
        let start = index
        func digits() -> Int {
            let first = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - first
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        let integerDigits = digits()
        guard integerDigits > 0 else { throw fail("not a number") }
        guard integerDigits == 1 || bytes[integerStart] != UInt8(ascii: "0") else { throw fail("a number with a leading zero") }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw fail("not a number") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw fail("not a number") }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }
}
