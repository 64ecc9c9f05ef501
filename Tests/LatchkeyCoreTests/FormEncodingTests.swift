import Foundation
import LatchkeyJOSE
import Testing

@Suite("Form encoding")
struct FormEncodingTests {
    /// What the byte-by-byte encoder replaced: Foundation's, with the same allowed characters.
    static func foundation(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
        allowed.insert(charactersIn: "-._*")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    @Test("a value is escaped exactly as Foundation's addingPercentEncoding escaped it: every ASCII character, and text in other scripts")
    func sameAsFoundation() {
        var values = (0..<128).map { String(UnicodeScalar(UInt8($0))) }
        values += [
            "", "abcXYZ019-._*", "a b+c&d=e/f?g#h%i", "é", "名前", "🙂 emoji", "\u{85}\u{A0}\u{2028}", "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ4In0.sig_-",
            "https://app.example.com/callback?x=1", "c1234567890abcdef.0.abcd.ABCDEFGHIJ",
        ]
        for _ in 0..<500 {
            let scalars = (0..<Int.random(in: 0...20)).compactMap { _ in
                Unicode.Scalar(
                    [UInt32.random(in: 0...0x7F), UInt32.random(in: 0x80...0x7FF), UInt32.random(in: 0x800...0xFFFF), UInt32.random(in: 0x10000...0x10FFFF)]
                        .randomElement()!)
            }
            values.append(String(String.UnicodeScalarView(scalars)))
        }
        for value in values { #expect(formEscape(value) == Self.foundation(value), "\(value.unicodeScalars.map { $0.value })") }
        #expect(
            formURLEncoded([("grant_type", "authorization_code"), ("redirect_uri", "https://a.example/cb")])
                == "grant_type=authorization_code&redirect_uri=https%3A%2F%2Fa.example%2Fcb")
    }

    @Test("a form name or value is decoded exactly as Foundation's removingPercentEncoding decoded it after + became a space, nil alike")
    func decodedAsFoundation() {
        var values = ["", "plain", "a+b", "%41%62c", "%e2%82%AC", "%", "%4", "%G1", "%zz", "100%", "%C3", "%C3%28", "%FF", "a%2Bb+c%20d", "名前+%F0%9F%99%82"]
        let pieces = ["a", "+", "%", "%2", "%41", "%C3%A9", "%E2%82", "%AC", "%80", "%f0%9f%99%82", "Z", "~", "é", "%2B", "%25"]
        for _ in 0..<1000 { values.append((0..<Int.random(in: 1...6)).map { _ in pieces.randomElement()! }.joined()) }
        for value in values {
            let foundation = value.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            #expect(formDecoded(Substring(value)) == foundation, "\(value)")
        }
    }
}
