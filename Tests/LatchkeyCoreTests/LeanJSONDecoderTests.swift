import Foundation
import JWTKit
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@Suite("Lean JSON decoder")
struct LeanJSONDecoderTests {
    struct Sample: Codable, Equatable {
        var s: String?
        var i: Int?
        var i64: Int64?
        var u8: UInt8?
        var d: Double?
        var f: Float?
        var b: Bool?
        var a: [String]?
        var o: [String: Int]?
        var n: Nested?
        struct Nested: Codable, Equatable { var x: [Double] }
    }

    @Test(
        "decodes what Foundation's JSONDecoder decodes, identically",
        arguments: [
            #"{}"#,
            #"{"s":"plain","i":42,"i64":-9007199254740993,"u8":255,"d":1.5e3,"f":0.25,"b":true}"#,
            #"  {"s" : "esc \" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00", "a": ["x", "y"], "o": {"k": 1}}  "#,
            #"{"n":{"x":[0,-0.5,1E2,3e-2]},"s":null,"d":1.23456789012345678901234e23}"#,
            #"{"s":"ünïcødé ✓","i":0,"d":-0}"#,
            #"{"unknown":{"deep":[[[{"a":1}]]]},"i":7}"#,
        ])
    func matchesFoundation(json: String) throws {
        let ours = try LeanJSONDecoder().decode(Sample.self, from: Array(json.utf8))
        let foundation = try JSONDecoder().decode(Sample.self, from: Data(json.utf8))
        #expect(ours == foundation)
    }

    @Test(
        "rejects what is not RFC 8259 JSON",
        arguments: [
            "", " ", "{", "}", #"{"a":1,}"#, #"{"a" 1}"#, #"{a:1}"#, #"{'a':1}"#, #"{"a":01}"#, #"{"a":1.}"#, #"{"a":.5}"#, #"{"a":-}"#,
            #"{"a":1e}"#, #"{"a":tru}"#, #"{"a":nul}"#, #"{"a":"\x"}"#, #"{"a":"\u12"}"#, "{\"a\":\"tab\there\"}", #"{"a":[1,]}"#,
            #"{"a":1} x"#, #"{"a":"unterminated}"#, #"{"a":NaN}"#, #"{"a":+1}"#,
        ])
    func rejectsInvalid(json: String) {
        #expect(throws: (any Error).self) { _ = try LeanJSONDecoder().decode(Sample.self, from: Array(json.utf8)) }
    }

    @Test("rejects invalid UTF-8 in strings")
    func invalidUTF8() {
        let bytes = Array(#"{"s":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: (any Error).self) { _ = try LeanJSONDecoder().decode(Sample.self, from: bytes) }
    }

    @Test(
        "duplicate members are an error, also when escapes spell the same name",
        arguments: [
            #"{"s":"a","s":"b"}"#, #"{"s":"a","\u0073":"b"}"#, #"{"n":{"x":[1],"x":[2]}}"#,
        ])
    func duplicates(json: String) {
        #expect(throws: LeanJSONError.self) { _ = try LeanJSONDecoder().decode(Sample.self, from: Array(json.utf8)) }
    }

    @Test(
        "type mismatches name the member",
        arguments: [(#"{"i":"1"}"#, "i"), (#"{"b":1}"#, "b"), (#"{"a":"x"}"#, "a"), (#"{"u8":256}"#, "u8"), (#"{"i":1.5}"#, "i")])
    func mismatch(json: String, member: String) {
        do {
            _ = try LeanJSONDecoder().decode(Sample.self, from: Array(json.utf8))
            Issue.record("decoded \(json)")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.first?.stringValue == member)
        } catch let DecodingError.dataCorrupted(context) {
            #expect(context.codingPath.first?.stringValue == member)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("nesting deeper than the limit is refused")
    func depth() {
        let json = #"{"unknown":"# + String(repeating: "[", count: 40) + String(repeating: "]", count: 40) + "}"
        #expect(throws: LeanJSONError.tooDeep) { _ = try LeanJSONDecoder().decode(Sample.self, from: Array(json.utf8)) }
    }
}

@Suite("Lean JSON decoder inside jwt-kit")
struct LeanJSONDecoderInJWTKitTests {
    struct Payload: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) async throws { try exp.verifyNotExpired() }
    }

    /// jwt-kit with Latchkey's decoder as its `JWTJSONDecoder`, and an HMAC key.
    private func keys() async -> JWTKeyCollection {
        let keys = JWTKeyCollection(defaultJWTParser: DefaultJWTParser(jsonDecoder: LeanJSONDecoder()))
        await keys.add(hmac: HMACKey(from: "a test secret that is at least thirty-two bytes long"), digestAlgorithm: .sha256)
        return keys
    }

    @Test("exp is read as seconds since 1970, so an expired token is refused and a live one accepted")
    func expirationDates() async throws {
        let keys = await keys()
        let expiry = Date(timeIntervalSince1970: 1_900_000_000)
        let live = try await keys.sign(Payload(sub: "user", exp: .init(value: Date().addingTimeInterval(600))))
        #expect(try await keys.verify(live, as: Payload.self).sub.value == "user")
        let expired = try await keys.sign(Payload(sub: "user", exp: .init(value: Date().addingTimeInterval(-600))))
        await #expect(throws: JWTError.self) { _ = try await keys.verify(expired, as: Payload.self) }
        // The exact instant, as jwt-kit's own decoder reads it.
        let fixed = try await keys.sign(Payload(sub: "user", exp: .init(value: expiry)))
        let parts = fixed.split(separator: ".")
        let claims = base64URLDecoded(parts[1])
        #expect(try LeanJSONDecoder().decode(Payload.self, from: claims).exp.value == expiry)
        #expect(try JSONDecoder.defaultForJWT.decode(Payload.self, from: claims).exp.value == expiry)
    }

    @Test("duplicate members are found in large objects too, wherever they stand")
    func duplicatesInLargeObjects() throws {
        let members = (0..<500).map { #""m\#($0)":\#($0)"# }
        let distinct = "{" + members.joined(separator: ",") + "}"
        #expect(try LeanJSONDecoder().decode([String: Int].self, from: Array(distinct.utf8)).count == 500)
        for position in [1, 15, 16, 17, 499] {
            let duplicated = "{" + (members + [#""m\#(position)":0"#]).joined(separator: ",") + "}"
            #expect(throws: LeanJSONError.duplicateKey("m\(position)")) { _ = try LeanJSONDecoder().decode([String: Int].self, from: Array(duplicated.utf8)) }
        }
        // An escaped spelling of the same name is the same name.
        let escaped = "{" + (members + [#""\u006d42":0"#]).joined(separator: ",") + "}"
        #expect(throws: LeanJSONError.duplicateKey("m42")) { _ = try LeanJSONDecoder().decode([String: Int].self, from: Array(escaped.utf8)) }
    }
}

@Suite("LeanJSONDecoder: member names compared by their Unicode scalars")
struct LeanJSONNameTests {
    @Test(
        "two names that are one Swift string but differ in their scalars are a name given twice, not one member",
        arguments: [
            #"{"K":1,"\u212a":2}"#, "{\"K\":1,\"\u{212A}\":2}", "{\"\u{E9}\":1,\"e\u{301}\":2}", "{\";\":1,\"\u{37E}\":2}",
            "{\"\u{C5}\":1,\"\u{212B}\":2}", "{\"a\":{\"K\":1,\"\u{212A}\":2}}",
        ])
    func canonicallyEquivalentNames(json: String) {
        #expect(throws: LeanJSONError.self) { _ = try LeanJSONDecoder().decode([String: JSONValue].self, from: Array(json.utf8)) }
    }

    @Test("distinct non-ASCII names are kept apart, and a non-ASCII name once is fine")
    func distinctNames() throws {
        let decoded = try LeanJSONDecoder().decode([String: Int].self, from: Array("{\"\u{E9}\":1,\"\u{E8}\":2,\"K\":3}".utf8))
        #expect(decoded == ["\u{E9}": 1, "\u{E8}": 2, "K": 3])
    }

    @Test("an integer beyond 64 bits is refused, not rounded to the nearest Double; one that fits stays exact")
    func integersBeyond64Bits() throws {
        for text in ["18446744073709551617", "-9223372036854775809", "123456789012345678901234"] {
            #expect(throws: DecodingError.self) { _ = try LeanJSONDecoder().decode([String: JSONValue].self, from: Array(#"{"n":\#(text)}"#.utf8)) }
        }
        let exact = try LeanJSONDecoder().decode([String: JSONValue].self, from: Array(#"{"n":9223372036854775807,"d":1.5e300}"#.utf8))
        #expect(exact == ["n": .integer(Int64.max), "d": .number(1.5e300)])
    }
}

@Suite("LeanJSONDecoder: integers of every length that fits")
struct LeanJSONIntegerTests {
    @Test("19-digit integers decode as Int64 exactly; fractions, exponents and overflow do not")
    func longIntegers() throws {
        struct Box: Decodable { let n: Int64 }
        #expect(try LeanJSONDecoder().decode(Box.self, from: Array(#"{"n":4611686018427387904}"#.utf8)).n == 4_611_686_018_427_387_904)
        #expect(try LeanJSONDecoder().decode(Box.self, from: Array(#"{"n":-9223372036854775808}"#.utf8)).n == Int64.min)
        for text in [#"{"n":9223372036854775808}"#, #"{"n":1.5}"#, #"{"n":1e3}"#, #"{"n":12345678901234567890123}"#] {
            #expect(throws: (any Error).self) { try LeanJSONDecoder().decode(Box.self, from: Array(text.utf8)) }
        }
    }
}
