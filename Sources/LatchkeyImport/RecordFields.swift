import Foundation
import LatchkeyModels

/// Why one record of a source is not a user Latchkey can read; it becomes a ``SourceProblem``.
struct RecordError: Error {
    let reason: String

    init(_ reason: String) { self.reason = reason }
}

/// Typed members of one record, each nil when absent or `null`, and a ``RecordError`` naming the member when its
/// value has the wrong type.
extension ExportJSON {
    func string(_ name: String) throws(RecordError) -> String? {
        guard let value = self[name] else { return nil }
        guard case .string(let text) = value else { throw RecordError("\(name) is \(value.kind), not a string") }
        return text
    }

    /// A string with something in it: an empty one counts as absent (exports write "" for nothing).
    func text(_ name: String) throws(RecordError) -> String? {
        guard let text = try string(name), !text.isEmpty else { return nil }
        return text
    }

    /// A boolean, also when written as the string `"true"` or `"false"`.
    func bool(_ name: String) throws(RecordError) -> Bool? {
        switch self[name] {
        case nil: return nil
        case .bool(let flag): return flag
        case .string("true"): return true
        case .string("false"): return false
        case let value?: throw RecordError("\(name) is \(value.kind), not true or false")
        }
    }

    /// An identifier written as a string or as an integer: an integer is taken as exactly its digits (a 21-digit
    /// Google subject stays those 21 digits).
    func identifier(_ name: String) throws(RecordError) -> String? {
        switch self[name] {
        case nil: return nil
        case .string(let text): return text.isEmpty ? nil : text
        case .number(let literal) where literal.allSatisfy(\.isASCIIDigit): return literal
        case let value?: throw RecordError("\(name) is \(value.kind) that is no identifier")
        }
    }

    func object(_ name: String) throws(RecordError) -> ExportJSON? {
        guard let value = self[name] else { return nil }
        guard case .object = value else { throw RecordError("\(name) is \(value.kind), not an object") }
        return value
    }

    func array(_ name: String) throws(RecordError) -> [ExportJSON]? {
        guard let value = self[name] else { return nil }
        guard case .array(let elements) = value else { throw RecordError("\(name) is \(value.kind), not an array") }
        return elements
    }

    /// An object of claims: every member kept as the JSON it is.
    func claims(_ name: String) throws(RecordError) -> [String: JSONValue] {
        guard let object = try object(name) else { return [:] }
        return try object.claimMembers(name)
    }

    /// This object's members as claims; `name` says where it came from.
    func claimMembers(_ name: String) throws(RecordError) -> [String: JSONValue] {
        guard case .object(let members) = self else { throw RecordError("\(name) is \(kind), not an object") }
        var claims: [String: JSONValue] = [:]
        for (key, member) in members {
            guard let value = member.jsonValue else {
                throw RecordError("\(name).\(key) holds a number no claim can keep (an integer beyond 64 bits, or beyond a Double)")
            }
            claims[key] = value
        }
        return claims
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}

/// The dates of export files.
enum ExportDate {
    /// ISO 8601 with or without fractional seconds, `Z` or an offset: `2023-04-01T12:00:00.000Z`,
    /// `2023-07-21T23:07:37.949000+00:00`.
    static func iso8601(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle()) { return date }
        return nil
    }

    /// Milliseconds since 1970 written as digits (Firebase's `createdAt`).
    static func epochMilliseconds(_ text: String) -> Date? {
        guard !text.isEmpty, text.allSatisfy(\.isASCIIDigit), let milliseconds = Int64(text) else { return nil }
        return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// Seconds since 1970, with a fraction (what AWS sends on the wire).
    static func epochSeconds(_ text: String) -> Date? {
        guard let seconds = Double(text), seconds.isFinite, seconds >= 0 else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }
}
