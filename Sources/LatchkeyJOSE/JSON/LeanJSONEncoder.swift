import Foundation

/// Writes an `Encodable` value as compact JSON exactly as `JSONEncoder` does with `[.sortedKeys,
/// .withoutEscapingSlashes]` and `.iso8601` dates, byte for byte, for a fraction of its cost: every response body
/// and every token Latchkey signs goes through it. Keys are sorted by their UTF-8 bytes; a key set twice keeps its
/// last value; dates are ISO 8601 in UTC to the second; `Data` is base64, `URL` its absolute string.
public struct LeanJSONEncoder: Sendable {
    public init() {}

    public func encode(_ value: some Encodable) throws -> [UInt8] {
        let node = try NodeEncoder.node(for: value, codingPath: [])
        var output: [UInt8] = []
        output.reserveCapacity(256)
        node.write(to: &output)
        return output
    }
}

/// A value being encoded. Objects and arrays are boxes, so that containers nested in them can still add to them.
private enum EncodedNode {
    case string(String)
    /// A number as JSON writes it.
    case number(String)
    case bool(Bool)
    case null
    case array(ArrayBox)
    case object(ObjectBox)

    final class ArrayBox {
        var items: [EncodedNode] = []
    }

    final class ObjectBox {
        var entries: [(key: String, value: EncodedNode)] = []
    }

    func write(to output: inout [UInt8]) {
        switch self {
        case .string(let string): Self.write(string, to: &output)
        case .number(let number): output.append(contentsOf: number.utf8)
        case .bool(let flag): output.append(contentsOf: flag ? Self.trueBytes : Self.falseBytes)
        case .null: output.append(contentsOf: Self.nullBytes)
        case .array(let box):
            output.append(UInt8(ascii: "["))
            for (index, item) in box.items.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                item.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let box):
            output.append(UInt8(ascii: "{"))
            for (index, entry) in Self.sorted(box.entries).enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.write(entry.key, to: &output)
                output.append(UInt8(ascii: ":"))
                entry.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// Entries by key, the last of any key set twice.
    private static func sorted(_ entries: [(key: String, value: EncodedNode)]) -> [(key: String, value: EncodedNode)] {
        // Types whose members are declared in key order (the tokens and responses Latchkey writes most) need no sort.
        if entries.indices.dropFirst().allSatisfy({ compare(entries[$0 - 1].key, entries[$0].key) < 0 }) { return entries }
        var ordered = entries.indices.map { $0 }
        ordered.sort { lhs, rhs in
            let order = compare(entries[lhs].key, entries[rhs].key)
            return order == 0 ? lhs < rhs : order < 0
        }
        var result: [(key: String, value: EncodedNode)] = []
        result.reserveCapacity(ordered.count)
        for index in ordered {
            let entry = entries[index]
            if result.last?.key == entry.key { result[result.count - 1] = entry } else { result.append(entry) }
        }
        return result
    }

    /// The order of two keys' UTF-8 bytes (negative, zero or positive).
    private static func compare(_ lhs: String, _ rhs: String) -> Int {
        var (lhs, rhs) = (lhs, rhs)
        return lhs.withUTF8 { left in
            rhs.withUTF8 { right in
                for index in 0..<min(left.count, right.count) where left[index] != right[index] {
                    return Int(left[index]) - Int(right[index])
                }
                return left.count - right.count
            }
        }
    }

    private static let trueBytes = Array("true".utf8)
    private static let falseBytes = Array("false".utf8)
    private static let nullBytes = Array("null".utf8)

    /// A JSON string: quotes, backslashes and control characters escaped (the short forms where JSON has them).
    private static func write(_ string: String, to output: inout [UInt8]) {
        var string = string
        output.append(UInt8(ascii: "\""))
        string.withUTF8 { bytes in
            var plain = 0
            for (index, byte) in bytes.enumerated() where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[plain..<index]))
                plain = index + 1
                output.append(UInt8(ascii: "\\"))
                switch byte {
                case 0x08: output.append(UInt8(ascii: "b"))
                case 0x0C: output.append(UInt8(ascii: "f"))
                case 0x0A: output.append(UInt8(ascii: "n"))
                case 0x0D: output.append(UInt8(ascii: "r"))
                case 0x09: output.append(UInt8(ascii: "t"))
                case 0..<0x20:
                    let digits = Array("0123456789abcdef".utf8)
                    output.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
                default: output.append(byte)
                }
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[plain...]))
        }
        output.append(UInt8(ascii: "\""))
    }
}

/// The `Encoder` a value encodes itself to; it leaves one node.
private final class NodeEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    var node: EncodedNode?

    init(codingPath: [any CodingKey]) {
        self.codingPath = codingPath
    }

    /// The node of `value`: the types Foundation's encoder writes specially, then anything else by its own `encode(to:)`.
    static func node<T: Encodable>(for value: T, codingPath: [any CodingKey]) throws -> EncodedNode {
        if let string = value as? String { return .string(string) }
        if let number = value as? Int { return .number(String(number)) }
        if let flag = value as? Bool { return .bool(flag) }
        if let date = value as? Date { return .string(iso8601(date)) }
        if let url = value as? URL { return .string(url.absoluteString) }
        if let data = value as? Data { return .string(data.base64EncodedString()) }
        if let decimal = value as? Decimal { return .number(decimal.description) }
        // Claims: the standard library's generic dictionary encoding, a coding key and a container per member, cost
        // about 60,000 instructions for eight of them.
        if T.self == [String: String].self, let strings = value as? [String: String] {
            let box = EncodedNode.ObjectBox()
            box.entries.reserveCapacity(strings.count)
            for (key, text) in strings { box.entries.append((key, .string(text))) }
            return .object(box)
        }
        let encoder = NodeEncoder(codingPath: codingPath)
        try value.encode(to: encoder)
        // A value that encodes nothing is an empty object, as with Foundation's encoder.
        return encoder.node ?? .object(EncodedNode.ObjectBox())
    }

    /// `2026-11-24T05:28:10Z`: the date in UTC, its second rounded down, as Foundation's `.iso8601` writes it. Dates
    /// outside years 1900...9999 are left to Foundation (whose calendar is Julian before 1582).
    static func iso8601(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds >= -2_208_988_800, seconds < 253_402_300_800 else { return date.formatted(.iso8601) }
        let total = Int(seconds)
        let second = total.modulo(86_400)
        let days = (total - second) / 86_400
        // Days since 1970-01-01 to a civil date (Howard Hinnant's days_from_civil, inverted).
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        var text: [UInt8] = []
        text.reserveCapacity(20)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year, 4)
        text.append(UInt8(ascii: "-"))
        digits(month, 2)
        text.append(UInt8(ascii: "-"))
        digits(day, 2)
        text.append(UInt8(ascii: "T"))
        digits(second / 3600, 2)
        text.append(UInt8(ascii: ":"))
        digits(second / 60 % 60, 2)
        text.append(UInt8(ascii: ":"))
        digits(second % 60, 2)
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    static func number(_ value: some BinaryFloatingPoint & LosslessStringConvertible, codingPath: [any CodingKey]) throws -> EncodedNode {
        guard value.isFinite else {
            throw EncodingError.invalidValue(value, EncodingError.Context(codingPath: codingPath, debugDescription: "\(value) is not valid in JSON"))
        }
        let text = value.description
        return .number(text.hasSuffix(".0") ? String(text.dropLast(2)) : text)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let box: EncodedNode.ObjectBox
        if case .object(let existing) = node {
            box = existing
        } else {
            box = EncodedNode.ObjectBox()
            node = .object(box)
        }
        return KeyedEncodingContainer(KeyedContainer<Key>(box: box, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let box: EncodedNode.ArrayBox
        if case .array(let existing) = node {
            box = existing
        } else {
            box = EncodedNode.ArrayBox()
            node = .array(box)
        }
        return UnkeyedContainer(box: box, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleValueContainer(encoder: self) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: EncodedNode.ObjectBox
    let codingPath: [any CodingKey]

    private func set(_ node: EncodedNode, _ key: Key) { box.entries.append((key.stringValue, node)) }

    mutating func encodeNil(forKey key: Key) throws { set(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { set(try NodeEncoder.number(value, codingPath: codingPath + [key]), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { set(try NodeEncoder.number(value, codingPath: codingPath + [key]), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { set(.number(String(value)), key) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        set(try NodeEncoder.node(for: value, codingPath: codingPath + [key]), key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested = EncodedNode.ObjectBox()
        set(.object(nested), key)
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(box: nested, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = EncodedNode.ArrayBox()
        set(.array(nested), key)
        return UnkeyedContainer(box: nested, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { ReferencingEncoder(codingPath: codingPath, box: box, key: "super") }
    mutating func superEncoder(forKey key: Key) -> any Encoder { ReferencingEncoder(codingPath: codingPath + [key], box: box, key: key.stringValue) }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let box: EncodedNode.ArrayBox
    let codingPath: [any CodingKey]
    var count: Int { box.items.count }

    private var nextPath: [any CodingKey] { codingPath + [IndexKey(intValue: count)] }

    mutating func encodeNil() throws { box.items.append(.null) }
    mutating func encode(_ value: Bool) throws { box.items.append(.bool(value)) }
    mutating func encode(_ value: String) throws { box.items.append(.string(value)) }
    mutating func encode(_ value: Double) throws { box.items.append(try NodeEncoder.number(value, codingPath: nextPath)) }
    mutating func encode(_ value: Float) throws { box.items.append(try NodeEncoder.number(value, codingPath: nextPath)) }
    mutating func encode(_ value: Int) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: Int8) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: Int16) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: Int32) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: Int64) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: UInt) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: UInt8) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: UInt16) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: UInt32) throws { box.items.append(.number(String(value))) }
    mutating func encode(_ value: UInt64) throws { box.items.append(.number(String(value))) }
    mutating func encode<T: Encodable>(_ value: T) throws { box.items.append(try NodeEncoder.node(for: value, codingPath: nextPath)) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = EncodedNode.ObjectBox()
        let path = nextPath
        box.items.append(.object(nested))
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(box: nested, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = EncodedNode.ArrayBox()
        let path = nextPath
        box.items.append(.array(nested))
        return UnkeyedContainer(box: nested, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        let index = box.items.count
        box.items.append(.object(EncodedNode.ObjectBox()))
        return ReferencingEncoder(codingPath: nextPath, array: box, index: index)
    }
}

private struct SingleValueContainer: SingleValueEncodingContainer {
    let encoder: NodeEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    private func set(_ node: EncodedNode) { encoder.node = node }

    mutating func encodeNil() throws { set(.null) }
    mutating func encode(_ value: Bool) throws { set(.bool(value)) }
    mutating func encode(_ value: String) throws { set(.string(value)) }
    mutating func encode(_ value: Double) throws { set(try NodeEncoder.number(value, codingPath: codingPath)) }
    mutating func encode(_ value: Float) throws { set(try NodeEncoder.number(value, codingPath: codingPath)) }
    mutating func encode(_ value: Int) throws { set(.number(String(value))) }
    mutating func encode(_ value: Int8) throws { set(.number(String(value))) }
    mutating func encode(_ value: Int16) throws { set(.number(String(value))) }
    mutating func encode(_ value: Int32) throws { set(.number(String(value))) }
    mutating func encode(_ value: Int64) throws { set(.number(String(value))) }
    mutating func encode(_ value: UInt) throws { set(.number(String(value))) }
    mutating func encode(_ value: UInt8) throws { set(.number(String(value))) }
    mutating func encode(_ value: UInt16) throws { set(.number(String(value))) }
    mutating func encode(_ value: UInt32) throws { set(.number(String(value))) }
    mutating func encode(_ value: UInt64) throws { set(.number(String(value))) }
    mutating func encode<T: Encodable>(_ value: T) throws { set(try NodeEncoder.node(for: value, codingPath: codingPath)) }
}

/// A super encoder: whatever it encodes lands at a key of an object or an index of an array.
private final class ReferencingEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    private let inner: NodeEncoder
    private let place: (EncodedNode) -> Void

    init(codingPath: [any CodingKey], box: EncodedNode.ObjectBox, key: String) {
        self.codingPath = codingPath
        inner = NodeEncoder(codingPath: codingPath)
        let index = box.entries.count
        box.entries.append((key, .object(EncodedNode.ObjectBox())))
        place = { box.entries[index].value = $0 }
    }

    init(codingPath: [any CodingKey], array: EncodedNode.ArrayBox, index: Int) {
        self.codingPath = codingPath
        inner = NodeEncoder(codingPath: codingPath)
        place = { array.items[index] = $0 }
    }

    deinit { place(inner.node ?? .object(EncodedNode.ObjectBox())) }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> { inner.container(keyedBy: type) }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { inner.unkeyedContainer() }
    func singleValueContainer() -> any SingleValueEncodingContainer { inner.singleValueContainer() }
}

private struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "Index \(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}

extension Int {
    /// The remainder of division by `divisor` (positive), whatever the sign of `self`.
    fileprivate func modulo(_ divisor: Int) -> Int {
        let remainder = self % divisor
        return remainder < 0 ? remainder + divisor : remainder
    }
}
