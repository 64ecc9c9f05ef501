import Foundation
import Testing

@testable import LatchkeyMail

@Suite("Rendering a message (RFC 5322, RFC 2045, RFC 2047)")
struct MailMessageTests {
    /// Thursday 1 January 2026, 09:05:00 UTC.
    static let date = Date(timeIntervalSince1970: 1_767_258_300)

    func rendered(_ message: MailMessage) -> String {
        String(decoding: message.rendered(date: Self.date, messageID: "abc@example.com"), as: UTF8.self)
    }

    @Test("headers, then multipart/alternative with the text part before the HTML part, all CRLF")
    func multipart() {
        let message = MailMessage(
            from: "codes@example.com", to: "ada@example.org", subject: "Your sign-in code", text: "Code: 123456\nBye",
            html: "<p style=\"x\">Code: <b>123456</b></p>")
        let text = rendered(message)
        #expect(
            text == """
                Date: Thu, 01 Jan 2026 09:05:00 +0000\r
                Message-ID: <abc@example.com>\r
                MIME-Version: 1.0\r
                Subject: Your sign-in code\r
                From: codes@example.com\r
                To: ada@example.org\r
                Content-Type: multipart/alternative; boundary="=_latchkey_alternative"\r
                \r
                --=_latchkey_alternative\r
                Content-Type: text/plain; charset=utf-8\r
                Content-Transfer-Encoding: quoted-printable\r
                \r
                Code: 123456\r
                Bye\r
                --=_latchkey_alternative\r
                Content-Type: text/html; charset=utf-8\r
                Content-Transfer-Encoding: quoted-printable\r
                \r
                <p style=3D"x">Code: <b>123456</b></p>\r
                --=_latchkey_alternative--\r

                """)
    }

    @Test("no HTML: one text/plain part; every line ends in CRLF, none is longer than 78 characters")
    func textOnly() {
        let message = MailMessage(
            from: "codes@example.com", to: "ada@example.org", subject: "Code", text: "Grüße\r\nline two \n" + String(repeating: "x", count: 200), html: nil)
        let text = rendered(message)
        #expect(
            text.contains("Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nGr=C3=BC=C3=9Fe\r\nline two=20\r\nxxx")
        )
        #expect(!text.contains("multipart"))
        let bytes = Array(text.utf8)
        for (index, byte) in bytes.enumerated() where byte == UInt8(ascii: "\n") {
            #expect(index > 0 && bytes[index - 1] == UInt8(ascii: "\r"))
        }
        #expect(bytes.allSatisfy { $0 < 128 })
        #expect(text.components(separatedBy: "\r\n").allSatisfy { $0.utf8.count <= 78 })
    }

    @Test(
        "quoted-printable: = and trailing white space encoded, soft breaks keep lines at 76 characters",
        arguments: [
            ("a=b", "a=3Db"),
            ("tab\t", "tab=09"),
            ("é", "=C3=A9"),
            (String(repeating: "y", count: 80), String(repeating: "y", count: 75) + "=\r\n" + String(repeating: "y", count: 5)),
        ])
    func quotedPrintable(_ input: String, _ expected: String) {
        #expect(String(decoding: MailMessage.quotedPrintable(input), as: UTF8.self) == expected)
    }

    // RFC 2047 §2 (encoded words of at most 75 characters) and §5 (in a Subject).
    @Test("a subject that is not ASCII is RFC 2047 B-encoded, folded into words of at most 75 characters")
    func encodedSubject() throws {
        let subject = "Votre code de connexion — 123456 — réservé à vous seul, ne le partagez pas"
        let encoded = MailMessage.encodedSubject(subject)
        let words = encoded.components(separatedBy: "\r\n ")
        #expect(words.count > 1)
        var decoded = Data()
        for word in words {
            #expect(word.count <= 75)
            #expect(word.hasPrefix("=?UTF-8?B?") && word.hasSuffix("?="))
            decoded += try #require(Data(base64Encoded: String(word.dropFirst(10).dropLast(2))))
        }
        #expect(String(decoding: decoded, as: UTF8.self) == subject)
        #expect(rendered(MailMessage(from: "a@b.c", to: "d@e.f", subject: "Café", text: "", html: nil)).contains("Subject: =?UTF-8?B?Q2Fmw6k=?=\r\n"))
    }

    @Test("CR and LF in a subject or an address cannot add a header")
    func headerInjection() {
        let message = MailMessage(from: "a@b.c\r\nBcc: eve@example.net", to: "d@e.f", subject: "Hi\r\nBcc: eve@example.net", text: "", html: nil)
        let text = rendered(message)
        #expect(!text.contains("\r\nBcc:"))
    }

    @Test("a . alone or at the start of a line survives quoted-printable as it is, for DATA to dot-stuff")
    func dotLines() {
        #expect(String(decoding: MailMessage.quotedPrintable(".\n.x"), as: UTF8.self) == ".\r\n.x")
    }
}
