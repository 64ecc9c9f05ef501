import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Synchronization
import Testing

/// E-mail one-time codes through the server, with a mailbox in place of SMTP.
@Suite("Server: e-mail one-time codes")
struct EmailCodeTests {
    /// Keeps every message; `failing` makes every send fail, as an unreachable SMTP server does.
    final class Mailbox: EmailSender {
        let messages = Mutex<[EmailCodeMessage]>([])
        let failing = Atomic<Bool>(false)

        func send(_ message: EmailCodeMessage) async throws {
            if failing.load(ordering: .relaxed) { throw LatchkeyError(.temporarilyUnavailable, "SMTP is down") }
            messages.withLock { $0.append(message) }
        }

        /// The code of the last message to `address`.
        func code(to address: String) -> String? {
            messages.withLock { $0.last { $0.to == address } }.map { String($0.subject.prefix { $0.isNumber }) }
        }

        var count: Int { messages.withLock { $0.count } }
    }

    static func emailOn(_ configuration: inout ServerConfiguration) {
        var settings = EmailSettings(from: "sign-in@example.com")
        settings.policy.productName = "Example"
        settings.policy.reviewAccess = [
            ReviewAccess(address: EmailAddress("reviewer@example.com")!, code: "20261129", expiresAt: Date().addingTimeInterval(30 * 86_400))
        ]
        configuration.email = settings
        configuration.session.anonymous.enabled = true
    }

    @Test("a code signs in (provider email, verified, the address normalized); the message leads with the code; a second sign-in finds the user")
    func signIn() async throws {
        let mailbox = Mailbox()
        try await ServerHarness.with(configure: Self.emailOn, emailSender: mailbox) { harness in
            let started = try await harness.post("/v1/auth/email/start", json: ["email": " Ann@Bücher.Example "])
            #expect(started.status == 202, "\(started.text)")
            let message = try #require(mailbox.messages.withLock { $0.last })
            #expect(message.to == "ann@xn--bcher-kva.example")
            #expect(message.subject.hasSuffix(" is your Example sign-in code") && message.subject.prefix(6).allSatisfy(\.isNumber))
            #expect(!message.text.contains("http") && message.html.contains(String(message.subject.prefix(6))))
            let code = try #require(mailbox.code(to: "ann@xn--bcher-kva.example"))
            let answer = try await harness.post("/v1/auth/email/verify", json: ["email": "ann@bücher.example", "code": code])
            #expect(answer.status == 200, "\(answer.text)")
            let user = try answer.decode(SignInResponse.self)
            #expect(user.isNewUser && user.user.identities.first?.provider == "email" && user.user.identities.first?.subject == "ann@xn--bcher-kva.example")
            #expect(user.user.email == "ann@xn--bcher-kva.example" && user.user.emailVerified == true)
            // The code is used up; a new one signs the same user in.
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "ann@bücher.example", "code": code]).error == "invalid_grant")
            harness.clock.advance(61)
            _ = try await harness.post("/v1/auth/email/start", json: ["email": "ann@xn--bcher-kva.example"])
            let again = try await harness.post(
                "/v1/auth/email/verify", json: ["email": "ANN@xn--bcher-kva.example", "code": try #require(mailbox.code(to: "ann@xn--bcher-kva.example"))])
            try await harness.expectReturningUser(again, user)
        }
    }

    @Test("five wrong tries kill the code; an expired code is refused; sends are limited per address; an unreachable server is 503, never 202")
    func refusals() async throws {
        let mailbox = Mailbox()
        try await ServerHarness.with(configure: Self.emailOn, emailSender: mailbox) { harness in
            #expect(try await harness.post("/v1/auth/email/start", json: ["email": "bob@example.com"]).status == 202)
            let code = try #require(mailbox.code(to: "bob@example.com"))
            let wrong = code == "000000" ? "111111" : "000000"
            for remaining in [4, 3, 2, 1] {
                let answer = try await harness.post("/v1/auth/email/verify", json: ["email": "bob@example.com", "code": wrong])
                #expect(answer.error == "invalid_grant" && answer.text.contains("\(remaining) tries left"), "\(answer.text)")
            }
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "bob@example.com", "code": wrong]).text.contains("too many"))
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "bob@example.com", "code": code]).error == "invalid_grant")

            // One send a minute to an address.
            let limited = try await harness.post("/v1/auth/email/start", json: ["email": "bob@example.com"])
            #expect((limited.status, limited.error) == (429, "rate_limited"))
            harness.clock.advance(61)
            #expect(try await harness.post("/v1/auth/email/start", json: ["email": "bob@example.com"]).status == 202)
            let late = try #require(mailbox.code(to: "bob@example.com"))
            harness.clock.advance(601)
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "bob@example.com", "code": late]).text.contains("no live code"))

            mailbox.failing.store(true, ordering: .relaxed)
            let down = try await harness.post("/v1/auth/email/start", json: ["email": "carol@example.com"])
            #expect((down.status, down.error) == (503, "temporarily_unavailable"))
            mailbox.failing.store(false, ordering: .relaxed)

            for bad in ["not-an-address", "a@b", "two@@example.com", "sp ace@example.com", String(repeating: "a", count: 65) + "@example.com"] {
                #expect(try await harness.post("/v1/auth/email/start", json: ["email": bad]).error == "invalid_request", "\(bad)")
            }
            #expect(try await harness.post("/v1/auth/email/start", json: ["mail": "x@example.com"]).error == "invalid_request")
            let extra = try await harness.post("/v1/auth/email/start", json: ["email": "x@example.com", "code": "123456"])
            #expect(extra.error == "invalid_request", "\(extra.text)")
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "x@example.com", "code": "123456", "x": 1]).error == "invalid_request")
        }
    }

    @Test("known and unknown addresses get the same answer; the review address signs in with its fixed code, no mail sent, audited")
    func sameAnswerAndReview() async throws {
        let mailbox = Mailbox()
        try await ServerHarness.with(configure: Self.emailOn, emailSender: mailbox) { harness in
            _ = try await harness.post("/v1/auth/email/start", json: ["email": "known@example.com"])
            let code = try #require(mailbox.code(to: "known@example.com"))
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "known@example.com", "code": code]).status == 200)
            harness.clock.advance(61)
            let known = try await harness.post("/v1/auth/email/start", json: ["email": "known@example.com"])
            let unknown = try await harness.post("/v1/auth/email/start", json: ["email": "unknown@example.com"])
            #expect(known.status == 202 && unknown.status == 202 && known.body == unknown.body)

            let before = mailbox.count
            #expect(try await harness.post("/v1/auth/email/start", json: ["email": "Reviewer@example.com"]).status == 202)
            #expect(mailbox.count == before)
            #expect(try await harness.post("/v1/auth/email/verify", json: ["email": "reviewer@example.com", "code": "20261128"]).error == "invalid_grant")
            let review = try await harness.post("/v1/auth/email/verify", json: ["email": "reviewer@example.com", "code": "20261129"])
            #expect(review.status == 200, "\(review.text)")
            #expect(try await harness.store.auditEvents(userID: nil, limit: 100).contains { $0.kind == "review_access.used" })
        }
    }

    @Test("a guest links an address with a code and is upgraded in place; the address can be removed, never as the last way in")
    func linkAndRemove() async throws {
        let mailbox = Mailbox()
        try await ServerHarness.with(configure: Self.emailOn, emailSender: mailbox) { harness in
            let guest = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            #expect(try await harness.post("/v1/me/identities/email/start", json: ["email": "guest@example.com"]).status == 401)
            #expect(try await harness.post("/v1/me/identities/email/start", json: ["email": "guest@example.com"], bearer: guest.accessToken).status == 202)
            let code = try #require(mailbox.code(to: "guest@example.com"))
            let linked = try await harness.post(
                "/v1/me/identities/email/verify", json: ["email": "guest@example.com", "code": code], bearer: guest.accessToken)
            #expect(linked.status == 200, "\(linked.text)")
            let user = try linked.decode(UserResponse.self)
            #expect(user.id == guest.user.id && user.isAnonymous == nil && user.identities.map(\.provider) == ["email"])
            let last = try await harness.send("DELETE", "/v1/me/identities/email/guest%40example.com", bearer: guest.accessToken)
            #expect((last.status, last.error) == (409, "last_identity"))
        }
    }

    @Test("a guest merges into the account an e-mailed code proves; a code for an address no account holds merges nothing")
    func mergeByCode() async throws {
        let mailbox = Mailbox()
        try await ServerHarness.with(configure: Self.emailOn, emailSender: mailbox) { harness in
            _ = try await harness.post("/v1/auth/email/start", json: ["email": "owner@example.com"])
            let owner = try await harness.post(
                "/v1/auth/email/verify", json: ["email": "owner@example.com", "code": try #require(mailbox.code(to: "owner@example.com"))]
            ).decode(SignInResponse.self)
            let guest = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            harness.clock.advance(61)
            _ = try await harness.post("/v1/auth/email/start", json: ["email": "nobody@example.com"])
            let nobody = try await harness.post(
                "/v1/me/merge/email", json: ["email": "nobody@example.com", "code": try #require(mailbox.code(to: "nobody@example.com"))],
                bearer: guest.accessToken)
            #expect(nobody.status == 401 && nobody.error == "invalid_credential", "\(nobody.text)")
            #expect(try await harness.store.user(id: guest.user.id) != nil)
            _ = try await harness.post("/v1/auth/email/start", json: ["email": "owner@example.com"])
            let merged = try await harness.post(
                "/v1/me/merge/email", json: ["email": "owner@example.com", "code": try #require(mailbox.code(to: "owner@example.com"))],
                bearer: guest.accessToken)
            #expect(merged.status == 200, "\(merged.text)")
            #expect(try merged.decode(SignInResponse.self).user.id == owner.user.id)
            #expect(try await harness.store.user(id: guest.user.id) == nil)
        }
    }

    @Test("e-mail sign-in is off without email settings: 404")
    func off() async throws {
        try await ServerHarness.with { harness in
            let answer = try await harness.post("/v1/auth/email/start", json: ["email": "a@example.com"])
            #expect((answer.status, answer.error) == (404, "not_found"))
        }
    }
}
