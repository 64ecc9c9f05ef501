import LatchkeyModels
import Testing

@Suite("Control characters, told without Unicode's property tables")
struct ControlCharacterTests {
    @Test("every scalar is a control character exactly when its general category is Cc, alone and inside text")
    func matchesGeneralCategory() {
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let control = scalar.properties.generalCategory == .control
            #expect(scalar.isControlCharacter == control, "U+\(String(value, radix: 16))")
            if value < 0x800 || value % 97 == 0 {
                var text = "aé"
                text.unicodeScalars.append(scalar)
                text += "z"
                #expect(containsControlCharacter(text) == control, "U+\(String(value, radix: 16)) inside text")
            }
        }
        #expect(!containsControlCharacter("Ünïcödé — 名前 🙂"))
        #expect(containsControlCharacter("line\nbreak"))
        #expect(containsControlCharacter("c1\u{85}next line"))
    }
}
