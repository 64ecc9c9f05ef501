import Foundation
import Testing

@testable import LatchkeyCore

/// A seeded mutation runner over the parsers that read what strangers send: compact JWS, the JOSE header, the
/// ID-token claims (through the lean JSON parser) and the lean decoder. Each input must be accepted or refused
/// with an error; a trap ends the test process, and the printed seed replays it. `LATCHKEY_FUZZ_ITERATIONS`
/// runs longer (the default keeps `swift test` quick); `LATCHKEY_FUZZ_SEED` replays one run.
@Suite("Hostile input: seeded mutations of the JOSE and JSON parsers")
struct HostileInputTests {
    /// The checked-in corpus: well-formed inputs and the shapes earlier bugs had.
    static let jsonCorpus: [String] = [
        #"{"iss":"https://appleid.apple.com","aud":"com.example.app","exp":1750000600,"iat":1750000000,"sub":"001234.abc.1234","nonce":"n","email":"a@privaterelay.appleid.com","email_verified":"true","is_private_email":true,"real_user_status":2,"nonce_supported":true,"c_hash":"x"}"#,
        #"{"iss":"https://accounts.google.com","azp":"1.apps.googleusercontent.com","aud":["a","b"],"sub":"1","hd":"example.com","email_verified":true,"exp":1.75e9,"iat":1750000000}"#,
        #"{"tid":"9188040d-6c67-4c5b-b112-36a304b66dad","iss":"https://login.microsoftonline.com/9188040d-6c67-4c5b-b112-36a304b66dad/v2.0","exp":1750000600}"#,
        #"{"alg":"RS256","kid":"W6WcOKB","typ":"JWT"}"#,
        #"{"alg":"ES256","kid":"k","crit":["b64"],"b64":false}"#,
        #"{"events":"{\"type\":\"account-delete\",\"sub\":\"001234.abc.1234\",\"event_time\":1750000000000}","iss":"https://appleid.apple.com","aud":"com.example.app","iat":1750000000,"jti":"j"}"#,
        #"{"a":{"b":{"c":[1,2,{"d":"\u00e9\ud83d\ude00\\\"/"}]}},"n":null,"t":true,"f":false,"x":-0.0e+0}"#,
        #"{"dup":1,"dup":2}"#, #"[]"#, #"""#, #"{"#, "{\"s\":\"\u{0}\"}", #"{"n":1e999999}"#, #"{"n":-123456789012345678901234567890}"#,
    ]

    /// Bytes that tend to break parsers.
    static let interesting: [[UInt8]] = [
        Array("{".utf8), Array("}".utf8), Array("[".utf8), Array("]".utf8), Array("\"".utf8), Array("\\".utf8), Array("\\u".utf8),
        Array("\\ud800".utf8), Array(":".utf8), Array(",".utf8), Array("-".utf8), Array("1e".utf8), Array("0.".utf8), [0], [0xFF], [0xC3], [0xED, 0xA0, 0x80],
        Array(".".utf8), Array("=".utf8), Array("%".utf8), Array("null".utf8), Array(String(repeating: "[", count: 64).utf8),
    ]

    /// SplitMix64: the same seed gives the same run on every machine.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static var iterations: Int { ProcessInfo.processInfo.environment["LATCHKEY_FUZZ_ITERATIONS"].flatMap(Int.init) ?? 4000 }
    static var seed: UInt64 { ProcessInfo.processInfo.environment["LATCHKEY_FUZZ_SEED"].flatMap(UInt64.init) ?? 0x1A7C_4E11 }

    /// One to four mutations of `input`: flips, inserted interesting bytes, deletions, duplicated slices, splices.
    static func mutate(_ input: [UInt8], with other: [UInt8], _ random: inout Generator) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0...bytes.count, using: &random)
            switch Int.random(in: 0..<6, using: &random) {
            case 0 where position < bytes.count: bytes[position] ^= UInt8(1 << Int.random(in: 0..<8, using: &random))
            case 1: bytes.insert(contentsOf: interesting.randomElement(using: &random)!, at: position)
            case 2 where position < bytes.count: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...8, using: &random)))
            case 3 where position < bytes.count:
                let end = min(bytes.count, position + Int.random(in: 1...32, using: &random))
                bytes.insert(contentsOf: bytes[position..<end], at: end)
            case 4 where !other.isEmpty:
                let cut = Int.random(in: 0..<other.count, using: &random)
                bytes = Array(bytes[..<position]) + Array(other[cut...])
            default: bytes = Array(bytes[..<position])
            }
        }
        return bytes
    }

    /// Runs `body` on `iterations` mutations of the corpus; returns how many inputs were accepted.
    static func run(_ corpus: [[UInt8]], _ body: ([UInt8]) -> Bool) -> (accepted: Int, total: Int) {
        var random = Generator(state: seed)
        var accepted = 0
        for input in corpus where body(input) { accepted += 1 }
        for _ in 0..<iterations {
            let input = mutate(corpus.randomElement(using: &random)!, with: corpus.randomElement(using: &random)!, &random)
            if body(input) { accepted += 1 }
        }
        return (accepted, corpus.count + iterations)
    }

    @Test("the lean JSON parser and the ID-token claims accept or refuse every mutation, and refuse with LatchkeyError")
    func claims() {
        var strays: [String] = []
        let result = Self.run(Self.jsonCorpus.map { Array($0.utf8) }) { input in
            do {
                _ = try IDTokenClaims.decode(input)
                return true
            } catch {
                return false
            }
        }
        // Parsing alone, without the claim rules: anything but acceptance must be a thrown error, never a crash.
        _ = Self.run(Self.jsonCorpus.map { Array($0.utf8) }) { input in
            do {
                _ = try LeanJSONObject(parsing: input)
                return true
            } catch {
                if strays.count < 3, !(error is LatchkeyError), !(error is LeanJSONError), !(error is DecodingError) { strays.append("\(type(of: error))") }
                return false
            }
        }
        #expect(result.accepted >= 3, "the well-formed corpus claims decode")
        #expect(result.accepted < result.total, "mutations are refused too")
        #expect(strays.isEmpty, "errors of unexpected types: \(strays)")
    }

    struct Everything: Decodable {
        var s: String?
        var i: Int?
        var i64: Int64?
        var u8: UInt8?
        var d: Double?
        var b: Bool?
        var a: [String]?
        var o: [String: Int]?
        var n: [Everything]?
        var aud: [String]?
        var exp: Int?
    }

    @Test("the lean decoder decodes or refuses every mutation")
    func decoder() {
        let decoder = LeanJSONDecoder()
        let result = Self.run(Self.jsonCorpus.map { Array($0.utf8) } + [Array(#"{"s":"x","i":-1,"u8":255,"a":["y"],"o":{"k":2},"n":[{"b":true}]}"#.utf8)]) {
            (try? decoder.decode(Everything.self, from: $0)) != nil
        }
        #expect(result.accepted > 0)
    }

    @Test("compact JWS parsing (and the JOSE header) accepts or refuses every mutation of real tokens")
    func compactJWS() throws {
        func segment(_ json: String) -> String { base64URL(Array(json.utf8)) }
        let tokens = [
            segment(#"{"alg":"RS256","kid":"W6WcOKB"}"#) + "." + segment(Self.jsonCorpus[0]) + "." + base64URL(Array(repeating: 7, count: 256)),
            segment(#"{"alg":"ES256","kid":"k","typ":"at+jwt"}"#) + "." + segment(Self.jsonCorpus[1]) + "." + base64URL(Array(repeating: 9, count: 64)),
            segment(#"{"alg":"none"}"#) + "." + segment("{}") + ".", "a.b.c", "..", "", String(repeating: "A", count: 70_000),
        ]
        let result = Self.run(tokens.map { Array($0.utf8) }) { input in
            do {
                _ = try CompactJWS(parsing: String(decoding: input, as: UTF8.self))
                return true
            } catch {
                return false
            }
        }
        #expect(result.accepted >= 2)
        #expect(result.accepted < result.total)
    }
}
