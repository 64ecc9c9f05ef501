/// Whether `text` holds a control character: Unicode's general category Cc, which is U+0000–U+001F and U+007F–U+009F
/// and, by Unicode's stability policy, always will be. Read from the UTF-8 bytes, without looking each scalar up in
/// the property tables (that cost about 40 instructions a character in every audit detail written). A `String`, not
/// any `StringProtocol`: called across modules, a generic version ran through protocol witnesses at every byte.
public func containsControlCharacter(_ text: String) -> Bool {
    var afterC2 = false
    for byte in text.utf8 {
        // U+0080–U+009F are C2 80 to C2 9F in UTF-8; C2 is only ever a lead byte.
        if byte < 0x20 || byte == 0x7F || (afterC2 && byte <= 0x9F && byte >= 0x80) { return true }
        afterC2 = byte == 0xC2
    }
    return false
}

extension Unicode.Scalar {
    /// Whether this is a control character (general category Cc: U+0000–U+001F, U+007F–U+009F).
    public var isControlCharacter: Bool { value < 0x20 || (0x7F...0x9F).contains(value) }
}
