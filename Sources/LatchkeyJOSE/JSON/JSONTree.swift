/// A JSON document as a tree whose numbers keep the text they were written with, so that an id written as a number (a
/// 21-digit subject, say) is read as exactly those digits and never through a `Double`. Read by the same strict parser
/// as ``LeanJSONDecoder``: RFC 8259 only, a member named twice refused, nesting limited.
package indirect enum JSONTree: Sendable, Equatable {
    case string(String)
    /// The number's literal text.
    case number(String)
    case bool(Bool)
    case null
    case array([JSONTree])
    /// Members in the document's order.
    case object([Member])

    package struct Member: Sendable, Equatable {
        package var name: String
        package var value: JSONTree
    }

    /// Parses one document; a UTF-8 byte order mark before it is skipped.
    package static func parse(_ bytes: [UInt8]) throws(LeanJSONError) -> JSONTree {
        let body = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(bytes.dropFirst(3)) : bytes
        var parser = JSONParser(bytes: body)
        do {
            return try tree(try parser.parseDocument(), parser)
        } catch let error as LeanJSONError {
            throw error
        } catch {
            throw .invalidJSON(offset: parser.index)
        }
    }

    private static func tree(_ node: JSONNode, _ parser: JSONParser) throws -> JSONTree {
        switch node {
        case .string(let range, let escaped): return .string(escaped ? try parser.unescape(range) : String(decoding: parser.bytes[range], as: UTF8.self))
        case .number(let range): return .number(String(decoding: parser.bytes[range], as: UTF8.self))
        case .bool(let flag): return .bool(flag)
        case .null: return .null
        case .array(let elements): return .array(try elements.map { try tree($0, parser) })
        case .object(let members):
            return .object(
                try members.map { member in
                    Member(
                        name: member.unescapedKey.map { String(decoding: $0, as: UTF8.self) }
                            ?? String(decoding: parser.bytes[member.keyRange], as: UTF8.self),
                        value: try tree(member.value, parser))
                })
        }
    }
}
