import Foundation
import LatchkeyJOSE
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

    /// Parses one JSON document (RFC 8259; surrounding whitespace and a UTF-8 byte order mark allowed; a member named
    /// twice is refused, as everywhere Latchkey reads JSON).
    static func parse(_ bytes: some Collection<UInt8>) throws(ExportJSONError) -> ExportJSON {
        do {
            return ExportJSON(try JSONTree.parse(Array(bytes)))
        } catch {
            switch error {
            case .invalidJSON(let offset): throw ExportJSONError(offset: offset, reason: "not JSON")
            case .duplicateKey(let name): throw ExportJSONError(offset: 0, reason: "an object names \(name.prefix(40).debugDescription) twice")
            case .tooDeep: throw ExportJSONError(offset: 0, reason: "JSON nested more than \(LeanJSONDecoder.maximumDepth) deep")
            }
        }
    }

    private init(_ tree: JSONTree) {
        switch tree {
        case .string(let text): self = .string(text)
        case .number(let literal): self = .number(literal)
        case .bool(let flag): self = .bool(flag)
        case .null: self = .null
        case .array(let elements): self = .array(elements.map(ExportJSON.init))
        case .object(let members): self = .object(members.map { ($0.name, ExportJSON($0.value)) })
        }
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
