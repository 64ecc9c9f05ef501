import Foundation
import LatchkeyImport
import Testing

/// The JSON reading every file reader shares, seen through the readers.
@Suite("Import: JSON of export files")
struct ExportJSONTests {
    @Test("escapes, surrogate pairs and a byte order mark read as text; big integers in claims are refused, not rounded")
    func strings() throws {
        let json =
            "\u{FEFF}"
            + #"{"users": [{"localId": "u\u00e9\ud83d\ude00\n", "displayName": "A \"B\" \\ C", "customAttributes": "{\"n\": 12345678901234567890123}"}, {"localId": "v", "customAttributes": "{\"big\": 9007199254740993, \"f\": 1.5, \"neg\": -3}"}]}"#
        let read = try FirebaseExport.read(Data(json.utf8))
        #expect(read.problems.map(\.sourceID) == ["u\u{e9}\u{1F600}\n"])
        #expect(read.problems.first?.reason.contains("beyond 64 bits") == true)
        #expect(read.users.first?.claims == ["big": .integer(9_007_199_254_740_993), "f": .number(1.5), "neg": .integer(-3)])
    }

    @Test("JSON that is not RFC 8259 is refused: a lone surrogate, a leading zero, trailing text, too deep")
    func invalid() {
        let deep = #"{"users": "# + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}"
        for text in [#"{"users": ["\ud800"]}"#, #"{"users": [01]}"#, #"{"users": []} x"#, deep, #"{"users": [tru]}"#] {
            let message = ImportFixtures.refusal { () throws(ImportSourceError) in try FirebaseExport.read(Data(text.utf8)) }
            #expect(message.contains("not valid JSON"), "\(text.prefix(40)): \(message)")
        }
    }
}
