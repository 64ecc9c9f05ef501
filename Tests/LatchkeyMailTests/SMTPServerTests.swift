import Testing

@testable import LatchkeyMail

@Suite("SMTP server URLs")
struct SMTPServerTests {
    static let password = "pa55-in-url"

    @Test("smtp defaults to port 587 and STARTTLS, smtps to 465 and TLS")
    func defaults() throws {
        let plain = try SMTPServer(url: "smtp://mail.example.com")
        #expect(plain.host == "mail.example.com" && plain.port == 587 && !plain.implicitTLS && plain.username == nil)
        let tls = try SMTPServer(url: "SMTPS://mail.example.com/")
        #expect(tls.port == 465 && tls.implicitTLS)
    }

    @Test("user name and password percent-decoded; an IPv6 host; the password argument overrides the URL's")
    func userInfo() throws {
        let server = try SMTPServer(url: "smtp://codes%40example.com:p%3Ass@[::1]:2525")
        #expect(server.username == "codes@example.com")
        #expect(server.password == "p:ss")
        #expect(server.host == "::1" && server.port == 2525)
        #expect(server.description == "smtp://codes%40example.com@[::1]:2525")
        #expect(try SMTPServer(url: "smtp://u:old@host", password: "new").password == "new")
    }

    @Test(
        "URLs that are not SMTP servers: invalid_server_url, and the reason never quotes the URL",
        arguments: [
            ("http://u:\(password)@mail.example.com", "scheme other than smtp"),
            ("mail.example.com:25", "does not start with"),
            ("smtp://", "names no host"),
            ("smtp://u:\(password)@:25", "names no host"),
            ("smtp://mail.example.com:0", "port"),
            ("smtp://mail.example.com:65536", "port"),
            ("smtp://mail.example.com:99999999999999999999", "port"),
            ("smtp://mail.example.com:", "port"),
            ("smtp://u:\(password)", "port"),
            ("smtp://mail.example.com/inbox", "path"),
            ("smtp://mail.example.com?x=1", "path, query"),
            ("smtp://[::1", "closing bracket"),
        ])
    func invalid(_ url: String, _ expected: String) {
        #expect {
            try SMTPServer(url: url)
        } throws: { error in
            guard let error = error as? MailError else { return false }
            return error.errorCode == "invalid_server_url" && error.reason.contains(expected) && !error.description.contains(Self.password)
                && !error.isTemporary
        }
    }

    @Test("description, reflection and dump never show the password")
    func passwordHidden() throws {
        let server = try SMTPServer(url: "smtps://codes@mail.example.com", password: Self.password)
        var dumped = ""
        dump(server, to: &dumped)
        let client = SMTPClient(server: server)
        var dumpedClient = ""
        dump(client, to: &dumpedClient)
        for text in ["\(server)", String(reflecting: server), dumped, dumpedClient, "\(client)", String(reflecting: client)] {
            #expect(!text.contains(Self.password), "\(text)")
        }
        #expect(server.description == "smtps://codes@mail.example.com:465")
    }

    @Test(
        "loopback hosts may go without TLS; every other host needs it",
        arguments: [
            ("localhost", true), ("LOCALHOST", true), ("127.0.0.1", true), ("127.1.2.3", true), ("::1", true),
            ("localhost.example.com", false), ("128.0.0.1", false), ("127.0.0.256", false), ("::2", false), ("mail.example.com", false),
        ])
    func loopback(_ host: String, _ isLoopback: Bool) throws {
        let server = try SMTPServer(url: host.contains(":") ? "smtp://[\(host)]" : "smtp://\(host)")
        #expect(server.isLoopback == isLoopback)
        #expect(SMTPClient(server: server).requiresTLS == !isLoopback)
    }
}
