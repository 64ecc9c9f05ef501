import Foundation

/// `Decoder` over a parsed ``JSONNode``.
struct LeanDecoder: Decoder {
    let bytes: [UInt8]
    let value: JSONNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch([String: String].self, value) }
        return KeyedDecodingContainer(KeyedContainer(decoder: self, members: members))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw mismatch([String].self, value) }
        return UnkeyedContainer(decoder: self, elements: elements)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleValueContainer(decoder: self) }

    func mismatch(_ type: Any.Type, _ node: JSONNode, path: [any CodingKey]? = nil) -> DecodingError {
        .typeMismatch(type, .init(codingPath: path ?? codingPath, debugDescription: "expected \(type), found \(node.kind)"))
    }

    func child(_ node: JSONNode, key: any CodingKey) -> LeanDecoder {
        LeanDecoder(bytes: bytes, value: node, codingPath: codingPath + [key])
    }

    // MARK: scalars

    func string(_ node: JSONNode, path: [any CodingKey]) throws -> String {
        guard case .string(let range, let escaped) = node else { throw mismatch(String.self, node, path: path) }
        if escaped { return try JSONParser(bytes: bytes).unescape(range) }
        guard let string = String(validating: bytes[range], as: UTF8.self) else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "invalid UTF-8"))
        }
        return string
    }

    func bool(_ node: JSONNode, path: [any CodingKey]) throws -> Bool {
        guard case .bool(let bool) = node else { throw mismatch(Bool.self, node, path: path) }
        return bool
    }

    func double(_ node: JSONNode, path: [any CodingKey]) throws -> Double {
        guard case .number(let range) = node else { throw mismatch(Double.self, node, path: path) }
        if let integer = smallInteger(range) { return Double(integer) }
        // An integer literal that no Int64 holds would come back as the nearest Double, another number: refused, not
        // rounded (18446744073709551617 would read as 18446744073709551616).
        if bytes[range].allSatisfy({ $0 == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            Int64(String(decoding: bytes[range], as: UTF8.self)) == nil
        {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: LeanJSONDecoder.inexactIntegerDescription))
        }
        guard let double = Double(String(decoding: bytes[range], as: UTF8.self)), double.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "number out of range"))
        }
        return double
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type, _ node: JSONNode, path: [any CodingKey]) throws -> T {
        guard case .number(let range) = node else { throw mismatch(T.self, node, path: path) }
        // Longer integers (19 digits fit an Int64) through the standard library's parser, which refuses fractions and exponents.
        guard let exact = smallInteger(range).flatMap(T.init(exactly:)) ?? T(String(decoding: bytes[range], as: UTF8.self)) else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "not an integer that fits \(T.self)"))
        }
        return exact
    }

    /// Plain integers of up to 18 digits, without going through a string.
    private func smallInteger(_ range: Range<Int>) -> Int64? {
        var index = range.lowerBound
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard range.upperBound - index <= 18 else { return nil }
        var value: Int64 = 0
        while index < range.upperBound {
            let byte = bytes[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            index += 1
        }
        return negative ? -value : value
    }

    func decode<T: Decodable>(_ type: T.Type, _ node: JSONNode, path: [any CodingKey]) throws -> T {
        // Fast paths for the scalars claims are made of.
        if T.self == String.self { return try string(node, path: path) as! T }
        if T.self == Bool.self { return try bool(node, path: path) as! T }
        if T.self == Double.self { return try double(node, path: path) as! T }
        if T.self == Int.self { return try integer(Int.self, node, path: path) as! T }
        // Every other scalar must be handled here too: their init(from:) asks a single-value container for themselves.
        if let integerType = T.self as? any FixedWidthInteger.Type {
            func open<I: FixedWidthInteger>(_ type: I.Type) throws -> I { try integer(I.self, node, path: path) }
            return try open(integerType) as! T
        }
        if T.self == Float.self { return Float(try double(node, path: path)) as! T }
        // jwt-kit's claims (`ExpirationClaim` and the like) hold `Date`s written as seconds since 1970 (RFC 7519 NumericDate).
        if T.self == Date.self { return Date(timeIntervalSince1970: try double(node, path: path)) as! T }
        return try T(from: LeanDecoder(bytes: bytes, value: node, codingPath: path))
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: LeanDecoder
    let members: [JSONMember]
    var codingPath: [any CodingKey] { decoder.codingPath }

    var allKeys: [Key] { members.compactMap { Key(stringValue: $0.key(in: decoder.bytes)) } }

    private func node(_ key: Key) -> JSONNode? {
        var name = key.stringValue
        return name.withUTF8 { wanted in
            members.first(where: { $0.keyEquals(wanted, in: decoder.bytes) })?.value
        }
    }

    private func require(_ key: Key) throws -> JSONNode {
        guard let node = node(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no member \"\(key.stringValue)\""))
        }
        return node
    }

    func contains(_ key: Key) -> Bool { node(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        guard case .null = try require(key) else { return false }
        return true
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decoder.decode(T.self, require(key), path: codingPath + [key])
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let node = node(key) else { return nil }
        if case .null = node { return nil }
        return try decoder.decode(T.self, node, path: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try decoder.child(require(key), key: key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try decoder.child(require(key), key: key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder { decoder.child(try require(key), key: key) }
}

private struct IndexKey: CodingKey {
    var stringValue: String { "\(intValue ?? 0)" }
    var intValue: Int?
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let decoder: LeanDecoder
    let elements: [JSONNode]
    var currentIndex = 0
    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    init(decoder: LeanDecoder, elements: [JSONNode]) {
        self.decoder = decoder
        self.elements = elements
    }

    private mutating func next() throws -> (JSONNode, [any CodingKey]) {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "no more elements"))
        }
        defer { currentIndex += 1 }
        return (elements[currentIndex], codingPath + [IndexKey(currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, case .null = elements[currentIndex] else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (node, path) = try next()
        return try decoder.decode(T.self, node, path: path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let (node, path) = try next()
        return try LeanDecoder(bytes: decoder.bytes, value: node, codingPath: path).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (node, path) = try next()
        return try LeanDecoder(bytes: decoder.bytes, value: node, codingPath: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let (node, path) = try next()
        return LeanDecoder(bytes: decoder.bytes, value: node, codingPath: path)
    }
}

private struct SingleValueContainer: SingleValueDecodingContainer {
    let decoder: LeanDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool {
        if case .null = decoder.value { return true }
        return false
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try decoder.decode(T.self, decoder.value, path: codingPath)
    }
}
