/// Any JSON value: the claims an app's backend sets on a user, as they travel into access tokens and back.
public enum JSONValue: Sendable, Hashable, Codable {
    case string(String)
    case integer(Int64)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let flag = try? container.decode(Bool.self) {
            self = .bool(flag)
        } else if let integer = try? container.decode(Int64.self) {
            self = .integer(integer)
        } else if let number = try Self.number(container) {
            self = .number(number)
        } else if let text = try? container.decode(String.self) {
            self = .string(text)
        } else if let array = try? container.decode([JSONValue].self) {
            self = .array(array)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// The value as a `Double`, nil when it is not a number; a decoder that refuses a number it cannot hold exactly
    /// (an integer beyond 64 bits) is heard, not taken for "not a number".
    private static func number(_ container: any SingleValueDecodingContainer) throws -> Double? {
        do {
            return try container.decode(Double.self)
        } catch DecodingError.dataCorrupted(let context) {
            throw DecodingError.dataCorrupted(context)
        } catch {
            return nil
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let text): try container.encode(text)
        case .integer(let integer): try container.encode(integer)
        case .number(let number): try container.encode(number)
        case .bool(let flag): try container.encode(flag)
        case .null: try container.encodeNil()
        case .array(let array): try container.encode(array)
        case .object(let object): try container.encode(object)
        }
    }

    /// How deep the value nests: 0 for a scalar, 1 for an array or object of scalars.
    public var depth: Int {
        switch self {
        case .array(let array): 1 + (array.map(\.depth).max() ?? 0)
        case .object(let object): 1 + (object.values.map(\.depth).max() ?? 0)
        default: 0
        }
    }
}
