import Foundation
import LatchkeyTestSupport
import Testing

@testable import LatchkeyCore
@testable import LatchkeyJOSE
@testable import LatchkeyWebAuthn

/// Seeded mutations (``Mutations``) of the parsers that read what strangers send: compact JWS, the JOSE header,
/// the ID-token claims (through the lean JSON parser) and the lean decoder. Each input must be accepted or refused
/// with an error.
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

    static func run(_ corpus: [[UInt8]], _ body: ([UInt8]) -> Bool) async -> (accepted: Int, total: Int) {
        await Mutations.run(corpus) { body($0) }
    }

    @Test("the lean JSON parser and the ID-token claims accept or refuse every mutation, and refuse with LatchkeyError")
    func claims() async {
        var strays: [String] = []
        let result = await Self.run(Self.jsonCorpus.map { Array($0.utf8) }) { input in
            do {
                _ = try IDTokenClaims.decode(input)
                return true
            } catch {
                return false
            }
        }
        // Parsing alone, without the claim rules: anything but acceptance must be a thrown error, never a crash.
        _ = await Self.run(Self.jsonCorpus.map { Array($0.utf8) }) { input in
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
    func decoder() async {
        let decoder = LeanJSONDecoder()
        let result = await Self.run(Self.jsonCorpus.map { Array($0.utf8) } + [Array(#"{"s":"x","i":-1,"u8":255,"a":["y"],"o":{"k":2},"n":[{"b":true}]}"#.utf8)])
        {
            (try? decoder.decode(Everything.self, from: $0)) != nil
        }
        #expect(result.accepted > 0)
    }

    @Test("compact JWS parsing (and the JOSE header) accepts or refuses every mutation of real tokens")
    func compactJWS() async throws {
        func segment(_ json: String) -> String { base64URL(Array(json.utf8)) }
        let tokens = [
            segment(#"{"alg":"RS256","kid":"W6WcOKB"}"#) + "." + segment(Self.jsonCorpus[0]) + "." + base64URL(Array(repeating: 7, count: 256)),
            segment(#"{"alg":"ES256","kid":"k","typ":"at+jwt"}"#) + "." + segment(Self.jsonCorpus[1]) + "." + base64URL(Array(repeating: 9, count: 64)),
            segment(#"{"alg":"none"}"#) + "." + segment("{}") + ".", "a.b.c", "..", "", String(repeating: "A", count: 70_000),
        ]
        let result = await Self.run(tokens.map { Array($0.utf8) }) { input in
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

    /// CBOR as passkeys send it: an attestation object with fmt none and a COSE key in its authenticator data, keys
    /// and the shapes a strict reader must refuse (indefinite lengths, tags, floats, repeated keys, deep nesting).
    static let cborCorpus: [[UInt8]] = [
        TestCBOR.encode(
            .map([
                CBORMapEntry(.text("fmt"), .text("none")), CBORMapEntry(.text("attStmt"), .map([])),
                CBORMapEntry(
                    .text("authData"), .bytes(Array(repeating: 0x49, count: 37) + Array(repeating: 0, count: 18) + [0, 16] + Array(repeating: 7, count: 16))),
            ])),
        TestCBOR.encode(
            TestCBOR.key([
                (1, .unsigned(2)), (3, TestCBOR.int(-7)), (-1, .unsigned(1)), (-2, .bytes(Array(repeating: 3, count: 32))),
                (-3, .bytes(Array(repeating: 4, count: 32))),
            ])),
        TestCBOR.encode(TestCBOR.key([(1, .unsigned(1)), (3, TestCBOR.int(-8)), (-1, .unsigned(6)), (-2, .bytes(Array(repeating: 5, count: 32)))])),
        hexBytes("5f42010243030405ff"), hexBytes("c11a514b67b0"), hexBytes("fb3ff199999999999a"), hexBytes("a201020103"),
        Array(repeating: 0x81, count: 20) + [0], hexBytes("1bffffffffffffffff"), hexBytes("a26161016162820203"),
    ]

    @Test("the CBOR reader and COSE keys accept or refuse every mutation, and refuse with LatchkeyError")
    func cbor() async {
        var strays: [String] = []
        let result = await Self.run(Self.cborCorpus) { input in
            do {
                let (value, _) = try CBORReader.prefix(input)
                _ = try? COSEKey(value)
                return true
            } catch {
                if strays.count < 3, !(error is LatchkeyError) { strays.append("\(type(of: error))") }
                return false
            }
        }
        #expect(result.accepted >= 3, "the well-formed corpus reads")
        #expect(result.accepted < result.total, "mutations are refused too")
        #expect(strays.isEmpty, "errors of unexpected types: \(strays)")
    }

    @Test("authenticator data (with an attested credential and extensions) parses or is refused with invalid_credential")
    func authenticatorData() async {
        let authenticator = SoftwareAuthenticator()
        let attested = authenticator.authenticatorData(.init(), attested: true)
        let corpus = [attested, authenticator.authenticatorData(.init(), attested: false), attested + TestCBOR.encode(.map([]))]
        var strays: [String] = []
        let result = await Self.run(corpus) { input in
            do {
                _ = try AuthenticatorData(input)
                return true
            } catch {
                if strays.count < 3, (error as? LatchkeyError)?.code != .invalidCredential { strays.append("\(error)") }
                return false
            }
        }
        #expect(result.accepted >= 2)
        #expect(result.accepted < result.total)
        #expect(strays.isEmpty, "refusals with other codes: \(strays)")
    }
}
