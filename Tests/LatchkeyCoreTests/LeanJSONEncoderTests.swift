import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Testing

/// `LeanJSONEncoder` must write what Foundation's encoder writes (sorted keys, unescaped slashes, ISO 8601 dates),
/// byte for byte: Foundation's output is the oracle.
@Suite("LeanJSONEncoder")
struct LeanJSONEncoderTests {
    static let foundation: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    func expectSame(_ value: some Encodable, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let expected = String(decoding: try Self.foundation.encode(value), as: UTF8.self)
        let lean = String(decoding: try LeanJSONEncoder().encode(value), as: UTF8.self)
        #expect(lean == expected, sourceLocation: sourceLocation)
    }

    struct Profile: Codable {
        var id: String
        var createdAt: Date
        var email: String?
        var verified: Bool?
        var age: Int
        var score: Double
        var ratio: Float
        var small: Int8
        var wide: UInt64
        var negative: Int64
        var tags: [String]
        var counts: [String: Int]
        var nested: [Profile]?
        var site: URL?
        var blob: Data?
        var amount: Decimal?
    }

    static func profile(nested: [Profile]? = nil) -> Profile {
        Profile(
            id: "01a2-x/y", createdAt: Date(timeIntervalSince1970: 1_795_496_871.75), email: "a@example.com", verified: true, age: 42, score: 3.0,
            ratio: 0.1, small: -8, wide: .max, negative: .min, tags: ["a", "", "\u{1F600}"], counts: ["b": 1, "B": 2, "a1": 3, "a": 4, "é": 5, "_": 6],
            nested: nested, site: URL(string: "https://id.example.com/a?b=c&d=e"), blob: Data([0, 1, 2, 250, 255]), amount: Decimal(string: "12.50"))
    }

    @Test("structs, optionals, nested arrays and dictionaries, dates, URLs, data and decimals")
    func structs() throws {
        try expectSame(Self.profile())
        try expectSame(Self.profile(nested: [Self.profile(), Self.profile(nested: [])]))
        var sparse = Self.profile()
        (sparse.email, sparse.verified, sparse.site, sparse.blob, sparse.amount) = (nil, nil, nil, nil, nil)
        try expectSame(sparse)
        try expectSame([String: [Int]]())
        try expectSame([[String: String]]())
        try expectSame(["status": "ok"])
        // A dictionary of strings takes a path of its own: alone, inside a struct, empty, and with keys to sort and escape.
        let strings = ["b": "1", "B": "2", "a1": "\u{1F600}", "é": "\"q\" / \\", "": "\n", "a": ""]
        try expectSame(strings)
        try expectSame([String: String]())
        try expectSame(["outer": strings])
        struct Claims: Codable { var claims: [String: String]; var more: [String: String]? }
        try expectSame(Claims(claims: strings, more: [:]))
        try expectSame([Optional<Int>.none, 1])
    }

    @Test("strings: every control character, quotes, backslashes, slashes and non-ASCII")
    func strings() throws {
        let controls = String(decoding: (0..<0x20).map { UInt8($0) } + [0x7F], as: UTF8.self)
        try expectSame([controls, "\"quoted\" \\ back/slash", "naïve 東京 \u{1F512}", "\u{2028}\u{2029}", ""])
        try expectSame([controls: "key with controls"])
    }

    @Test("numbers: integers at their limits and floating point in every notation")
    func numbers() throws {
        try expectSame([Int.min, Int.max, 0, -1])
        try expectSame([UInt64.max, 0])
        try expectSame([0, -0.0, 0.1, 3.0, -3.5, 1e15, 1e16, 1e20, 1e21, 1.5e-7, .pi, .greatestFiniteMagnitude, .leastNonzeroMagnitude, 123_456.789])
        try expectSame([Float(0.1), 3, 1e-7, 16_777_216, .greatestFiniteMagnitude])
        for bad in [Double.nan, .infinity, -.infinity] {
            #expect(throws: EncodingError.self) { try LeanJSONEncoder().encode([bad]) }
        }
    }

    @Test("dates: ISO 8601 in UTC to the second, before 1970, at leap days, in 1900 and 9999, and in the Julian calendar before 1582")
    func dates() throws {
        var generator = SeededGenerator(state: 1_970)
        var dates = (0..<2000).map { _ in Date(timeIntervalSince1970: Double.random(in: -3e9...1e10, using: &generator)) }
        dates += [
            0, -0.5, -1, 0.999, 951_782_400, 951_868_799.9, 4_107_542_400, -2_208_988_800, -2_208_988_801, -62_135_596_800, 253_402_300_799.5, 253_402_300_800,
        ]
        .map { Date(timeIntervalSince1970: $0) }
        try expectSame(dates)
    }

    /// A class that encodes its superclass's fields through a super encoder.
    class Base: Encodable {
        var base = "b"
        enum CodingKeys: String, CodingKey { case base }
    }

    final class Derived: Base {
        var own = 1
        enum Keys: String, CodingKey { case own }

        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(own, forKey: .own)
            try super.encode(to: container.superEncoder())
        }
    }

    /// Encodes the same key twice, and containers nested by hand.
    struct Handmade: Encodable {
        enum Keys: String, CodingKey { case twice, inner, list }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(1, forKey: .twice)
            var inner = container.nestedContainer(keyedBy: Keys.self, forKey: .inner)
            try inner.encodeNil(forKey: .list)
            var list = container.nestedUnkeyedContainer(forKey: .list)
            try list.encode(true)
            var deeper = list.nestedContainer(keyedBy: Keys.self)
            try deeper.encode("x", forKey: .twice)
            try list.encodeNil()
            try container.encode(2, forKey: .twice)
        }
    }

    @Test("super encoders, keys set twice and containers nested by hand")
    func handmade() throws {
        try expectSame(Derived())
        try expectSame(Handmade())
    }

    /// Any JSON value, for random documents.
    indirect enum Value: Encodable {
        case string(String), int(Int), double(Double), bool(Bool), null, array([Value]), object([String: Value])

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let value): try container.encode(value)
            case .int(let value): try container.encode(value)
            case .double(let value): try container.encode(value)
            case .bool(let value): try container.encode(value)
            case .null: try container.encodeNil()
            case .array(let value): try container.encode(value)
            case .object(let value): try container.encode(value)
            }
        }

        static func random(depth: Int, using generator: inout some RandomNumberGenerator) -> Value {
            let alphabet = Array("aZ_0é\"\\/\n\u{1}東\u{1F600} .")
            func text() -> String { String((0..<Int.random(in: 0...6, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }) }
            switch Int.random(in: 0..<(depth > 0 ? 7 : 5), using: &generator) {
            case 0: return .string(text())
            case 1: return .int(Int.random(in: Int.min...Int.max, using: &generator) >> Int.random(in: 0...63, using: &generator))
            case 2: return .double(Double.random(in: -1...1, using: &generator) * [1, 1e-9, 1e9, 1e300].randomElement(using: &generator)!)
            case 3: return .bool(Bool.random(using: &generator))
            case 4: return .null
            case 5: return .array((0..<Int.random(in: 0...4, using: &generator)).map { _ in random(depth: depth - 1, using: &generator) })
            default:
                return .object(
                    Dictionary((0..<Int.random(in: 0...4, using: &generator)).map { _ in (text(), random(depth: depth - 1, using: &generator)) }) { $1 })
            }
        }
    }

    /// A small, seeded generator (SplitMix64), so a failure repeats.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("500 random documents")
    func randomDocuments() throws {
        var generator = SeededGenerator(state: 20_261_124)
        for _ in 0..<500 { try expectSame(Value.random(depth: 4, using: &generator)) }
    }
}
