import Foundation

/// Finds member names that appear twice in a JSON object.
///
/// `JSONDecoder` silently keeps one of two duplicate members, so `{"aud":"a","aud":"b"}` would verify
/// as whichever one it picked; RFC 7519 §4 lets us reject such tokens, and we do. The input must already
/// have decoded as JSON: this only walks string and nesting boundaries, it does not validate.
enum JSONTopLevelKeys {
    static func firstDuplicate(in json: [UInt8]) -> String? {
        var seen = Set<String>()
        var depth = 0
        var index = 0
        var expectingKey = false
        while index < json.count {
            let byte = json[index]
            switch byte {
            case UInt8(ascii: "{"):
                depth += 1
                expectingKey = depth == 1
            case UInt8(ascii: "["):
                depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
            case UInt8(ascii: ","):
                expectingKey = depth == 1
            case UInt8(ascii: "\""):
                let start = index
                var hasEscape = false
                index += 1
                while index < json.count, json[index] != UInt8(ascii: "\"") {
                    if json[index] == UInt8(ascii: "\\") {
                        hasEscape = true
                        index += 1
                    }
                    index += 1
                }
                if expectingKey {
                    expectingKey = false
                    let raw = json[start...min(index, json.count - 1)]
                    guard let key = decodeKey(raw, hasEscape: hasEscape) else { return "?" }
                    if !seen.insert(key).inserted { return key }
                }
            default:
                break
            }
            index += 1
        }
        return nil
    }

    private static func decodeKey(_ quoted: ArraySlice<UInt8>, hasEscape: Bool) -> String? {
        guard hasEscape else { return String(decoding: quoted.dropFirst().dropLast(), as: UTF8.self) }
        // Escaped names ("\u0061ud") must compare as the decoder sees them.
        return try? sharedJSONDecoder.decode(String.self, from: Data(quoted))
    }
}

/// One decoder for every token: creating a decoder per call shows up in the verification benchmark.
let sharedJSONDecoder = JSONDecoder()
