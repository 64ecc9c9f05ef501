import LatchkeyCore
import Testing

/// The `email` provider's subject: one mailbox, one subject, however it is typed.
@Suite("Core: e-mail addresses")
struct EmailAddressTests {
    @Test(
        "the local part and domain are lower-cased, and a non-ASCII domain label becomes its IDNA (Punycode) form",
        arguments: [
            ("Jane.Doe@Example.COM", "jane.doe@example.com"),
            (" ann@bücher.example ", "ann@xn--bcher-kva.example"),
            ("a@münchen.de", "a@xn--mnchen-3ya.de"),
            ("x@тест.рф", "x@xn--e1aybc.xn--p1ai"),
            ("y@ドメイン名例.jp", "y@xn--eckwd4c7cu47r2wf.jp"),
            ("z@faß.de", "z@xn--fa-hia.de"),
        ])
    func normalized(text: String, expected: String) {
        #expect(EmailAddress(text)?.normalized == expected)
    }

    @Test(
        "text that is no address to send to is refused",
        arguments: [
            "", "plain", "@example.com", "a@", "a@b", "a@@example.com", "a b@example.com", "a@exa mple.com", "\"q\"@example.com", ".a@example.com",
            "a.@example.com", "a..b@example.com", "a@-example.com", "a@example-.com", "a@exa_mple.com", "a@.example.com", "a@example..com",
            String(repeating: "a", count: 65) + "@example.com", "a@" + String(repeating: "b", count: 64) + ".com", "a\u{0}@example.com",
        ])
    func refused(text: String) {
        #expect(EmailAddress(text) == nil)
    }
}
