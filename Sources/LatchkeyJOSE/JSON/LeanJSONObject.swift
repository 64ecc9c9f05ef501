/// Direct, Codable-free access to the members of a parsed JSON object: the hot path for claim sets.
///
/// Each accessor returns nil for an absent member (or `null`) and throws a `DecodingError` naming
/// the member when it has the wrong type, exactly as ``LeanJSONDecoder`` would.
package struct LeanJSONObject {
    private let decoder: LeanDecoder
    private let members: [JSONMember]

    package init(parsing bytes: [UInt8]) throws {
        var parser = JSONParser(bytes: bytes)
        let node = try parser.parseDocument()
        guard case .object(let members) = node else {
            throw DecodingError.typeMismatch([String: String].self, .init(codingPath: [], debugDescription: "not an object"))
        }
        self.decoder = LeanDecoder(bytes: bytes, value: node, codingPath: [])
        self.members = members
    }

    private func node(_ name: StaticString) -> JSONNode? {
        let node = name.withUTF8Buffer { wanted in members.first(where: { $0.keyEquals(wanted, in: decoder.bytes) })?.value }
        if case .null = node { return nil }
        return node
    }

    private func path(_ name: StaticString) -> [any CodingKey] { [MemberKey(stringValue: "\(name)")] }

    package func string(_ name: StaticString) throws -> String? {
        guard let node = node(name) else { return nil }
        return try decoder.string(node, path: path(name))
    }

    package func number(_ name: StaticString) throws -> Double? {
        guard let node = node(name) else { return nil }
        return try decoder.double(node, path: path(name))
    }

    package func integer(_ name: StaticString) throws -> Int? {
        guard let node = node(name) else { return nil }
        return try decoder.integer(Int.self, node, path: path(name))
    }

    /// A boolean sent as `true` or as `"true"` (Apple does both).
    package func lenientBool(_ name: StaticString) throws -> Bool? {
        guard let node = node(name) else { return nil }
        if case .bool(let value) = node { return value }
        switch try decoder.string(node, path: path(name)) {
        case "true": return true
        case "false": return false
        default: throw DecodingError.dataCorrupted(.init(codingPath: path(name), debugDescription: "expected true or false"))
        }
    }

    /// A string or an array of strings (`aud`, RFC 7519 §4.1.3).
    package func stringOrStrings(_ name: StaticString) throws -> [String]? {
        guard let node = node(name) else { return nil }
        if case .array(let elements) = node {
            return try elements.map { try decoder.string($0, path: path(name)) }
        }
        return [try decoder.string(node, path: path(name))]
    }

    /// Decodes a member with `Codable`, for the rare structured claim.
    package func decode<T: Decodable>(_ type: T.Type, _ name: StaticString) throws -> T? {
        guard let node = node(name) else { return nil }
        return try decoder.decode(T.self, node, path: path(name))
    }
}

struct MemberKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
