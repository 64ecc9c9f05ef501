import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@testable import LatchkeyStore

/// Passkeys end to end over HTTP: a user signed in with Apple adds a passkey made by a software authenticator and signs
/// in with it; every refusal the relying party owes is a 4xx with its code.
@Suite("Passkeys: adding one, signing in, signing up, and every refusal")
struct PasskeyTests {
    static let rpID = "example.com"
    static let origin = "https://example.com"

    static func configure(allowSignUp: Bool = false, userVerification: PasskeySettings.UserVerification = .required) -> (inout ServerConfiguration) -> Void {
        { $0.passkeys = PasskeySettings(rpID: rpID, origins: [origin], userVerification: userVerification, allowSignUp: allowSignUp) }
    }

    static func json(_ value: some Encodable) throws -> String { String(decoding: try JSONEncoder().encode(value), as: UTF8.self) }
    static func bytes(_ text: String) -> [UInt8] { Array(base64URLDecoded(text)) }

    /// Asks for creation options as `bearer` and registers `authenticator`'s credential for them; returns the answer and the user handle.
    static func register(
        _ harness: ServerHarness, _ authenticator: SoftwareAuthenticator, bearer: String, name: String? = "Jane's iPhone",
        _ ceremony: SoftwareAuthenticator.Ceremony = .init()
    ) async throws -> (answer: ServerHarness.Answer, userHandle: [UInt8]) {
        let options = try await harness.send("POST", "/v1/me/passkeys/options", bearer: bearer)
        #expect(options.status == 200, "\(options.text)")
        let creation = try options.decode(PublicKeyCredentialCreationOptionsJSON.self)
        let credential = authenticator.register(challenge: bytes(creation.challenge), ceremony)
        let answer = try await harness.send(
            "POST", "/v1/me/passkeys", body: try json(PasskeyRegistrationRequest(credential: credential, name: name)), bearer: bearer)
        return (answer, bytes(creation.user.id))
    }

    static func signInOptions(_ harness: ServerHarness) async throws -> PublicKeyCredentialRequestOptionsJSON {
        let options = try await harness.send("POST", "/v1/auth/passkey/options")
        #expect(options.status == 200, "\(options.text)")
        return try options.decode(PublicKeyCredentialRequestOptionsJSON.self)
    }

    /// Signs in with a fresh sign-in challenge; the assertion is returned too, for replays.
    static func signIn(
        _ harness: ServerHarness, _ authenticator: inout SoftwareAuthenticator, userHandle: [UInt8], _ ceremony: SoftwareAuthenticator.Ceremony = .init(),
        counting: Bool = true
    ) async throws -> (answer: ServerHarness.Answer, body: String) {
        let options = try await signInOptions(harness)
        let assertion = authenticator.assert(challenge: bytes(options.challenge), userHandle: userHandle, ceremony, counting: counting)
        let body = try json(PasskeySignInRequest(challengeId: try #require(options.challengeId), credential: assertion))
        return (try await harness.send("POST", "/v1/auth/passkey", body: body), body)
    }

    static func claims(_ accessToken: String) -> [String: Any] { jsonSegment(accessToken.split(separator: ".")[1]) }

    @Test("a guest merges into the account whose passkey it asserts: POST /v1/me/merge/passkey")
    func mergeByPasskey() async throws {
        try await ServerHarness.with(configure: {
            Self.configure()(&$0); $0.session.anonymous.enabled = true
        }) { harness in
            let (_, owner) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: owner.accessToken)
            #expect(added.status == 201)
            let guest = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            let options = try await Self.signInOptions(harness)
            let assertion = authenticator.assert(challenge: Self.bytes(options.challenge), userHandle: handle, .init())
            let body = try Self.json(PasskeySignInRequest(challengeId: try #require(options.challengeId), credential: assertion))
            let merged = try await harness.send("POST", "/v1/me/merge/passkey", body: body, bearer: guest.accessToken)
            #expect(merged.status == 200, "\(merged.text)")
            #expect(try merged.decode(SignInResponse.self).user.id == owner.user.id)
            #expect(try await harness.store.user(id: guest.user.id) == nil)

            // Another guest adds a passkey of their own: upgraded in place.
            let second = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            let (own, _) = try await Self.register(harness, SoftwareAuthenticator(), bearer: second.accessToken)
            #expect(own.status == 201, "\(own.text)")
            #expect(try await harness.store.user(id: second.user.id)?.isAnonymous == false)
        }
    }

    @Test("a user signed in with Apple adds a passkey, lists it and signs in with it: the same user, idp passkey, the counter kept")
    func addAndSignIn() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201, "\(added.text)")
            let passkey = try added.decode(PasskeyResponse.self)
            #expect(passkey.id == base64URL(authenticator.credentialID))
            #expect(passkey.name == "Jane's iPhone")
            #expect(passkey.backedUp && !passkey.cloneSuspected)
            #expect(handle == Array(apple.user.id.utf8))

            let listed = try await harness.send("GET", "/v1/me/passkeys", bearer: apple.accessToken)
            #expect(listed.status == 200)
            #expect((listed.json["passkeys"] as? [[String: Any]])?.map { $0["id"] as? String } == [passkey.id])

            let (answer, _) = try await Self.signIn(harness, &authenticator, userHandle: handle)
            #expect(answer.status == 200, "\(answer.text)")
            let session = try answer.decode(SignInResponse.self)
            #expect(session.user.id == apple.user.id)
            #expect(!session.isNewUser)
            #expect(Self.claims(session.accessToken)["idp"] as? String == "passkey")
            #expect(Set(session.user.identities.map(\.provider)) == ["apple", "passkey"])

            // The counter the sign-in wrote is the one the next sign-in must pass.
            let identity = try #require(try await harness.store.identity(provider: "passkey", subject: passkey.id))
            #expect(identity.claims["signCount"] == "1")
            let again = try await Self.signIn(harness, &authenticator, userHandle: handle)
            #expect(again.answer.status == 200)

            let me = try await harness.send("GET", "/v1/me", bearer: session.accessToken)
            #expect(
                (me.json["identities"] as? [[String: Any]])?.contains { $0["provider"] as? String == "passkey" && $0["subject"] as? String == passkey.id }
                    == true)
            let relisted = try await harness.send("GET", "/v1/me/passkeys", bearer: session.accessToken)
            #expect(((relisted.json["passkeys"] as? [[String: Any]])?.first?["lastUsedAt"] as? String) != nil)
        }
    }

    @Test("a replayed assertion, an expired challenge and an unknown one are challenge_expired")
    func challengesAreSingleUseAndExpire() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201)
            let (first, body) = try await Self.signIn(harness, &authenticator, userHandle: handle)
            #expect(first.status == 200)
            let replay = try await harness.send("POST", "/v1/auth/passkey", body: body)
            #expect((replay.status, replay.error) == (400, "challenge_expired"))

            let options = try await Self.signInOptions(harness)
            harness.clock.advance(PasskeyService.challengeLifetime + 1)
            let late = authenticator.assert(challenge: Self.bytes(options.challenge), userHandle: handle)
            let expired = try await harness.send(
                "POST", "/v1/auth/passkey", body: try Self.json(PasskeySignInRequest(challengeId: options.challenge, credential: late)))
            #expect((expired.status, expired.error) == (400, "challenge_expired"))
            #expect(expired.json["error_description"] as? String ?? "" == "the challenge has expired (it may be answered for 300 s): ask for new options")

            let unknown = try await harness.send(
                "POST", "/v1/auth/passkey", body: try Self.json(PasskeySignInRequest(challengeId: "made-up", credential: late)))
            #expect((unknown.status, unknown.error) == (400, "challenge_expired"))
        }
    }

    @Test("sign-in options write nothing; a refused answer leaves its challenge usable; a replay blocks nothing; an altered challenge is unknown")
    func sealedChallenges() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            authenticator.signCount = 1
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201)
            // Options while every table a challenge could be kept in refuses inserts.
            try await harness.store.sqlWrite { db in
                try await db.raw("CREATE TRIGGER no_records BEFORE INSERT ON one_time_records BEGIN SELECT RAISE(ABORT, 'no writes'); END").run()
                try await db.raw("CREATE TRIGGER no_claims BEFORE INSERT ON used_sign_in_tokens BEGIN SELECT RAISE(ABORT, 'no writes'); END").run()
            }
            let options = try await Self.signInOptions(harness)
            try await harness.store.sqlWrite { db in
                try await db.raw("DROP TRIGGER no_records").run()
                try await db.raw("DROP TRIGGER no_claims").run()
            }
            let challengeID = try #require(options.challengeId)

            let wrong = authenticator.assert(challenge: Self.bytes(options.challenge), userHandle: handle, .init(origin: "https://evil.example"))
            let refused = try await harness.send(
                "POST", "/v1/auth/passkey", body: try Self.json(PasskeySignInRequest(challengeId: challengeID, credential: wrong)))
            #expect((refused.status, refused.error) == (401, "invalid_credential"), "\(refused.text)")
            let right = authenticator.assert(challenge: Self.bytes(options.challenge), userHandle: handle)
            let body = try Self.json(PasskeySignInRequest(challengeId: challengeID, credential: right))
            let signedIn = try await harness.send("POST", "/v1/auth/passkey", body: body)
            #expect(signedIn.status == 200, "\(signedIn.text)")

            // The replay repeats a counter already seen, which would suggest a clone: it is a used challenge instead.
            let replay = try await harness.send("POST", "/v1/auth/passkey", body: body)
            #expect((replay.status, replay.error) == (400, "challenge_expired"), "\(replay.text)")
            let identity = try #require(try await harness.store.identity(provider: "passkey", subject: base64URL(authenticator.credentialID)))
            #expect(identity.claims["cloneSuspectedAt"] == nil)
            #expect(try await Self.signIn(harness, &authenticator, userHandle: handle).answer.status == 200)

            let other = try await Self.signInOptions(harness)
            var characters = Array(other.challenge)
            characters[characters.count / 2] = characters[characters.count / 2] == "A" ? "B" : "A"
            let altered = String(characters)
            let forged = authenticator.assert(challenge: Self.bytes(altered), userHandle: handle)
            let unknown = try await harness.send(
                "POST", "/v1/auth/passkey", body: try Self.json(PasskeySignInRequest(challengeId: altered, credential: forged)))
            #expect((unknown.status, unknown.error) == (400, "challenge_expired"), "\(unknown.text)")
        }
    }

    @Test(
        "another origin, another rpId, no UV while it is required and a cross-origin frame are invalid_credential",
        arguments: [
            SoftwareAuthenticator.Ceremony(origin: "https://evil.example"), SoftwareAuthenticator.Ceremony(rpID: "evil.example"),
            SoftwareAuthenticator.Ceremony(flags: 0x01 | 0x08), SoftwareAuthenticator.Ceremony(crossOrigin: true),
        ])
    func ceremonyRefusals(ceremony: SoftwareAuthenticator.Ceremony) async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201)
            let (refused, _) = try await Self.signIn(harness, &authenticator, userHandle: handle, ceremony)
            #expect((refused.status, refused.error) == (401, "invalid_credential"), "\(refused.text)")
            // The same ceremony is refused at registration too, and nothing is added.
            let (notAdded, _) = try await Self.register(harness, SoftwareAuthenticator(), bearer: apple.accessToken, ceremony)
            #expect((notAdded.status, notAdded.error) == (400, "invalid_credential"), "\(notAdded.text)")
            let listed = try await harness.send("GET", "/v1/me/passkeys", bearer: apple.accessToken)
            #expect((listed.json["passkeys"] as? [Any])?.count == 1)
        }
    }

    @Test("with passkeys.userVerification preferred, an assertion without UV is accepted")
    func userVerificationPreferred() async throws {
        try await ServerHarness.with(configure: Self.configure(userVerification: .preferred)) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken, .init(flags: 0x01))
            #expect(added.status == 201, "\(added.text)")
            let (answer, _) = try await Self.signIn(harness, &authenticator, userHandle: handle, .init(flags: 0x01))
            #expect(answer.status == 200, "\(answer.text)")
            let options = try await harness.send("POST", "/v1/auth/passkey/options")
            #expect(options.json["userVerification"] as? String == "preferred")
        }
    }

    @Test("a counter that goes backwards refuses the sign-in, blocks the passkey for good and is audited")
    func cloneSuspected() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201)
            authenticator.signCount = 4
            #expect(try await Self.signIn(harness, &authenticator, userHandle: handle).answer.status == 200)
            var clone = authenticator
            clone.signCount = 2
            let (cloned, _) = try await Self.signIn(harness, &clone, userHandle: handle)
            #expect((cloned.status, cloned.error) == (401, "credential_clone_suspected"))
            // The original's next counter is fine, but the passkey is blocked now.
            let (blocked, _) = try await Self.signIn(harness, &authenticator, userHandle: handle)
            #expect((blocked.status, blocked.error) == (401, "credential_clone_suspected"))
            let listed = try await harness.send("GET", "/v1/me/passkeys", bearer: apple.accessToken)
            #expect((listed.json["passkeys"] as? [[String: Any]])?.first?["cloneSuspected"] as? Bool == true)
            let events = try await harness.store.auditEvents(userID: apple.user.id, limit: 50)
            #expect(events.contains { $0.kind == "passkey.clone_suspected" })
        }
    }

    @Test("a deleted passkey, another user's challenge, another user's passkey and a wrong user handle are refused")
    func ownership() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, jane) = try await harness.signedIn(email: "jane@example.com")
            let (_, john) = try await harness.signedIn(email: "john@example.com")
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: jane.accessToken)
            #expect(added.status == 201)
            let id = try added.decode(PasskeyResponse.self).id

            // A registration challenge issued to Jane, answered in John's name.
            let options = try await harness.send("POST", "/v1/me/passkeys/options", bearer: jane.accessToken)
            let challenge = try options.decode(PublicKeyCredentialCreationOptionsJSON.self).challenge
            let made = SoftwareAuthenticator().register(challenge: Self.bytes(challenge))
            let stolen = try await harness.send(
                "POST", "/v1/me/passkeys", body: try Self.json(PasskeyRegistrationRequest(credential: made)), bearer: john.accessToken)
            #expect((stolen.status, stolen.error) == (400, "invalid_credential"))

            // Jane's passkey cannot be deleted by John, and excluded from John's new options it is not.
            let foreign = try await harness.send("DELETE", "/v1/me/passkeys/\(id)", bearer: john.accessToken)
            #expect((foreign.status, foreign.error) == (404, "not_found"))

            // The passkey's user handle must be the one it was registered with.
            let (wrongHandle, _) = try await Self.signIn(harness, &authenticator, userHandle: Array(john.user.id.utf8))
            #expect((wrongHandle.status, wrongHandle.error) == (401, "invalid_credential"))

            // The same credential registered twice is refused.
            let (twice, _) = try await Self.register(harness, authenticator, bearer: jane.accessToken)
            #expect((twice.status, twice.error) == (409, "identity_in_use"))

            let deleted = try await harness.send("DELETE", "/v1/me/passkeys/\(id)", bearer: jane.accessToken)
            #expect(deleted.status == 204)
            let (gone, _) = try await Self.signIn(harness, &authenticator, userHandle: handle)
            #expect((gone.status, gone.error) == (401, "invalid_credential"))
        }
    }

    @Test("sign-up: off by default; on, a passkey makes an account, its challenge does not sign in, and its last passkey cannot be deleted")
    func signUp() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let closed = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: "{}")
            #expect((closed.status, closed.error) == (403, "signup_closed"))
        }
        try await ServerHarness.with(configure: Self.configure(allowSignUp: true)) { harness in
            let options = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: #"{"displayName":"Ada"}"#)
            #expect(options.status == 200, "\(options.text)")
            let creation = try options.decode(PublicKeyCredentialCreationOptionsJSON.self)
            #expect(creation.user.name == "Ada")
            var authenticator = SoftwareAuthenticator()

            // A sign-up challenge answered at sign-in is refused (and used up).
            let misused = authenticator.assert(challenge: Self.bytes(creation.challenge), userHandle: Self.bytes(creation.user.id), counting: false)
            let wrongPlace = try await harness.send(
                "POST", "/v1/auth/passkey", body: try Self.json(PasskeySignInRequest(challengeId: try #require(creation.challengeId), credential: misused)))
            #expect((wrongPlace.status, wrongPlace.error) == (401, "invalid_credential"))
            #expect((wrongPlace.json["error_description"] as? String)?.contains("signing up") == true)

            let fresh = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: #"{"displayName":"Ada"}"#)
            let freshOptions = try fresh.decode(PublicKeyCredentialCreationOptionsJSON.self)
            let credential = authenticator.register(challenge: Self.bytes(freshOptions.challenge))
            let signedUp = try await harness.send(
                "POST", "/v1/auth/passkey/signup",
                body: try Self.json(PasskeySignUpRequest(challengeId: try #require(freshOptions.challengeId), credential: credential)))
            #expect(signedUp.status == 200, "\(signedUp.text)")
            let account = try signedUp.decode(SignInResponse.self)
            #expect(account.isNewUser)
            #expect(account.user.givenName == "Ada")
            #expect(account.user.identities.map(\.provider) == ["passkey"])

            let (answer, _) = try await Self.signIn(harness, &authenticator, userHandle: Self.bytes(freshOptions.user.id))
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try answer.decode(SignInResponse.self).user.id == account.user.id)

            let last = try await harness.send("DELETE", "/v1/me/passkeys/\(base64URL(authenticator.credentialID))", bearer: account.accessToken)
            #expect((last.status, last.error) == (409, "last_identity"))

            // The same credential cannot make a second account (nor sign in to the first through sign-up).
            let again = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: "{}")
            let againOptions = try again.decode(PublicKeyCredentialCreationOptionsJSON.self)
            let duplicate = try await harness.send(
                "POST", "/v1/auth/passkey/signup",
                body: try Self.json(
                    PasskeySignUpRequest(
                        challengeId: try #require(againOptions.challengeId), credential: authenticator.register(challenge: Self.bytes(againOptions.challenge))))
            )
            #expect((duplicate.status, duplicate.error) == (401, "invalid_credential"))
        }
    }

    @Test("an empty credential id and one over 1,023 bytes are refused when adding a passkey and at sign-up; nothing is stored")
    func credentialIDBounds() async throws {
        try await ServerHarness.with(configure: Self.configure(allowSignUp: true)) { harness in
            let (_, apple) = try await harness.signedIn()
            for count in [0, 1024] {
                var authenticator = SoftwareAuthenticator()
                authenticator.credentialID = Array(repeating: 1, count: count)
                let (added, _) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
                #expect((added.status, added.error) == (400, "invalid_credential"), "\(count) bytes: \(added.text)")
                let options = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: "{}").decode(PublicKeyCredentialCreationOptionsJSON.self)
                let signUp = try await harness.send(
                    "POST", "/v1/auth/passkey/signup",
                    body: try Self.json(
                        PasskeySignUpRequest(
                            challengeId: try #require(options.challengeId), credential: authenticator.register(challenge: Self.bytes(options.challenge)))))
                #expect((signUp.status, signUp.error) == (401, "invalid_credential"), "\(count) bytes: \(signUp.text)")
            }
            let listed = try await harness.send("GET", "/v1/me/passkeys", bearer: apple.accessToken)
            #expect((listed.json["passkeys"] as? [Any])?.count == 0, "\(listed.text)")
            #expect(try await harness.store.users(limit: 10).count == 1)
        }
    }

    @Test("starting a passkey registration is limited per user and per address: 429 rate_limited with Retry-After, and no challenge written")
    func registrationOptionsLimited() async throws {
        // Per user, and per address, where the sign-in was the address's first request of the minute.
        for (setting, limit, whose) in [(\ServerConfiguration.rateLimit.perSubject, 3, "user"), (\.rateLimit.perClientIP, 4, "address")]
            as [(WritableKeyPath<ServerConfiguration, Int>, Int, String)]
        {
            try await ServerHarness.with(configure: {
                Self.configure()(&$0)
                $0[keyPath: setting] = limit
            }) { harness in
                let (_, apple) = try await harness.signedIn()
                var statuses: [Int] = []
                for _ in 0..<4 { statuses.append(try await harness.send("POST", "/v1/me/passkeys/options", bearer: apple.accessToken).status) }
                #expect(statuses == [200, 200, 200, 429], "\(whose): \(statuses)")
                let refused = try await harness.send("POST", "/v1/me/passkeys/options", bearer: apple.accessToken)
                #expect((refused.status, refused.error) == (429, "rate_limited"))
                #expect(refused.headers["retry-after"] != nil)
                #expect((refused.json["error_description"] as? String)?.contains(whose) == true, "\(refused.text)")
            }
        }
    }

    @Test("passkey sign-up on an invite-only server needs an invite code")
    func signUpNeedsInvite() async throws {
        try await ServerHarness.with(configure: {
            Self.configure(allowSignUp: true)(&$0)
            $0.signUp = .invite
        }) { harness in
            let refused = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: "{}")
            #expect((refused.status, refused.error) == (403, "signup_closed"))
            let options = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: #"{"inviteCode":"inv_unknown"}"#)
            let creation = try options.decode(PublicKeyCredentialCreationOptionsJSON.self)
            let credential = SoftwareAuthenticator().register(challenge: Self.bytes(creation.challenge))
            let declined = try await harness.send(
                "POST", "/v1/auth/passkey/signup",
                body: try Self.json(PasskeySignUpRequest(challengeId: try #require(creation.challengeId), credential: credential)))
            #expect((declined.status, declined.error) == (403, "signup_closed"))
        }
    }

    @Test("without passkeys.rpId every passkey route answers 404 not_found; a malformed body is 400")
    func notConfiguredAndMalformed() async throws {
        try await ServerHarness.with { harness in
            let (_, apple) = try await harness.signedIn()
            for (method, path) in [("POST", "/v1/auth/passkey/options"), ("POST", "/v1/me/passkeys/options"), ("GET", "/v1/me/passkeys")] {
                let answer = try await harness.send(method, path, bearer: apple.accessToken)
                #expect((answer.status, answer.error) == (404, "not_found"), "\(path)")
            }
        }
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            let malformed = try await harness.send("POST", "/v1/auth/passkey", body: #"{"challengeId":1}"#)
            #expect((malformed.status, malformed.error) == (400, "invalid_request"))
            let noBearer = try await harness.send("POST", "/v1/me/passkeys/options")
            #expect((noBearer.status, noBearer.error) == (401, "invalid_token"))
            let garbage = try await harness.send(
                "POST", "/v1/me/passkeys",
                body: #"{"credential":{"id":"AA","rawId":"AA","type":"public-key","response":{"clientDataJSON":"!!","attestationObject":"AA"}}}"#,
                bearer: apple.accessToken)
            #expect((garbage.status, garbage.error) == (400, "invalid_credential"))
        }
    }

    @Test("every passkey answer, success and refusal, conforms to /openapi.json")
    func answersConform() async throws {
        try await ServerHarness.with(configure: Self.configure(allowSignUp: true)) { harness in
            let contract = try await OpenAPI.fetch(harness)
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            contract.expectConforms(
                try await harness.send("POST", "/v1/me/passkeys/options", bearer: apple.accessToken), "POST", "/v1/me/passkeys/options", status: 200)
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            contract.expectConforms(added, "POST", "/v1/me/passkeys", status: 201)
            let (twice, _) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            contract.expectConforms(twice, "POST", "/v1/me/passkeys", status: 409, error: "identity_in_use")
            contract.expectConforms(try await harness.send("GET", "/v1/me/passkeys", bearer: apple.accessToken), "GET", "/v1/me/passkeys", status: 200)
            contract.expectConforms(try await harness.send("POST", "/v1/auth/passkey/options"), "POST", "/v1/auth/passkey/options", status: 200)
            let (signedIn, replayBody) = try await Self.signIn(harness, &authenticator, userHandle: handle)
            contract.expectConforms(signedIn, "POST", "/v1/auth/passkey", status: 200)
            contract.expectConforms(
                try await harness.send("POST", "/v1/auth/passkey", body: replayBody), "POST", "/v1/auth/passkey", status: 400, error: "challenge_expired")
            let (refused, _) = try await Self.signIn(harness, &authenticator, userHandle: handle, .init(origin: "https://evil.example"))
            contract.expectConforms(refused, "POST", "/v1/auth/passkey", status: 401, error: "invalid_credential")
            let signUp = try await harness.send("POST", "/v1/auth/passkey/signup/options", body: #"{"displayName":"Ada"}"#)
            contract.expectConforms(signUp, "POST", "/v1/auth/passkey/signup/options", status: 200)
            let options = try signUp.decode(PublicKeyCredentialCreationOptionsJSON.self)
            let newcomer = SoftwareAuthenticator()
            let created = try await harness.send(
                "POST", "/v1/auth/passkey/signup",
                body: try Self.json(
                    PasskeySignUpRequest(
                        challengeId: try #require(options.challengeId), credential: newcomer.register(challenge: Self.bytes(options.challenge)))))
            contract.expectConforms(created, "POST", "/v1/auth/passkey/signup", status: 200)
            let ada = try created.decode(SignInResponse.self)
            contract.expectConforms(
                try await harness.send("DELETE", "/v1/me/passkeys/\(base64URL(newcomer.credentialID))", bearer: ada.accessToken), "DELETE",
                "/v1/me/passkeys/{id}", status: 409, error: "last_identity")
            contract.expectConforms(
                try await harness.send("DELETE", "/v1/me/passkeys/\(base64URL(authenticator.credentialID))", bearer: apple.accessToken), "DELETE",
                "/v1/me/passkeys/{id}", status: 204)
            contract.expectConforms(
                try await harness.send("DELETE", "/v1/me/passkeys/unknown", bearer: apple.accessToken), "DELETE", "/v1/me/passkeys/{id}", status: 404,
                error: "not_found")
        }
    }

    @Test(
        "passkeys.* settings: refused by name when they cannot work",
        arguments: [
            (["passkeys.origins": "https://example.com"], "passkeys.rpId"), (["passkeys.rpId": "example.com"], "passkeys.origins"),
            (["passkeys.rpId": "https://example.com", "passkeys.origins": "https://example.com"], "passkeys.rpId"),
            (["passkeys.rpId": "127.0.0.1", "passkeys.origins": "https://127.0.0.1"], "passkeys.rpId"),
            (["passkeys.rpId": "Example.com", "passkeys.origins": "https://example.com"], "passkeys.rpId"),
            (["passkeys.rpId": "example.com", "passkeys.origins": "https://example.org"], "passkeys.origins"),
            (["passkeys.rpId": "example.com", "passkeys.origins": "http://example.com"], "passkeys.origins"),
            (["passkeys.rpId": "example.com", "passkeys.origins": "https://example.com/login"], "passkeys.origins"),
            (["passkeys.rpId": "example.com", "passkeys.origins": "https://example.com", "passkeys.userVerification": "always"], "passkeys.userVerification"),
            (["passkeys.rpId": "example.com", "passkeys.origins": "https://example.com", "passkeys.allowSignUp": "sometimes"], "passkeys.allowSignUp"),
        ])
    func settingsRefused(values: [String: String], key: String) throws {
        #expect { try ConfigurationTests.read(values) } throws: { ($0 as? LatchkeyError)?.reason.hasPrefix("setting \(key) ") == true }
    }

    @Test("passkeys.* settings read: subdomain origins, an Android facet, http on localhost, the defaults")
    func settingsRead() throws {
        #expect(try ConfigurationTests.read([:]).passkeys == nil)
        let read = try ConfigurationTests.read([
            "passkeys.rpId": "example.com", "passkeys.origins": "https://example.com,https://login.example.com:8443,android:apk-key-hash:abc",
            "passkeys.rpName": "Example", "passkeys.userVerification": "preferred", "passkeys.allowSignUp": "true",
        ])
        #expect(
            read.passkeys
                == PasskeySettings(
                    rpID: "example.com", rpName: "Example", origins: ["https://example.com", "https://login.example.com:8443", "android:apk-key-hash:abc"],
                    userVerification: .preferred, allowSignUp: true))
        let local = try ConfigurationTests.read(["passkeys.rpId": "localhost", "passkeys.origins": "http://localhost:8080"])
        #expect(local.passkeys == PasskeySettings(rpID: "localhost", origins: ["http://localhost:8080"]))
    }

    @Test("the browser flow's chooser offers a passkey; POST /oauth2/passkey finishes the request with a code whose session has idp passkey")
    func browserFlow() async throws {
        try await BrowserFlowTests.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201)

            var request = BrowserFlowTests.AppRequest()
            request.provider = nil
            let chooser = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(request.query))
            #expect(chooser.status == 200)
            #expect(chooser.text.contains(#"id="passkey-signin""#))
            // The page's one inline script runs by its hash, and nothing else does.
            let policy = try #require(chooser.headers["content-security-policy"])
            #expect(policy.contains("script-src 'sha256-") && !policy.contains("'unsafe-inline'; connect") && !policy.contains("script-src 'self'"))

            func finish(_ authorization: String, _ ceremony: SoftwareAuthenticator.Ceremony = .init()) async throws -> ServerHarness.Answer {
                let options = try await Self.signInOptions(harness)
                let assertion = authenticator.assert(challenge: Self.bytes(options.challenge), userHandle: handle, ceremony)
                struct Body: Encodable {
                    let authorization: String
                    let challengeId: String
                    let credential: AuthenticationResponseJSON
                }
                return try await harness.send(
                    "POST", "/oauth2/passkey",
                    body: try Self.json(Body(authorization: authorization, challengeId: try #require(options.challengeId), credential: assertion)))
            }
            let authorization = formURLEncoded(request.query)
            let answer = try await finish(authorization)
            #expect(answer.status == 200, "\(answer.text)")
            let redirect = try #require(answer.json["redirectTo"] as? String)
            let back = BrowserFlowTests.fields(of: redirect)
            #expect(redirect.hasPrefix(request.redirectURI + "?") && back["state"] == request.state && back["iss"] == BrowserFlowTests.issuer)
            let tokens = try await BrowserFlowTests.redeem(harness, try #require(back["code"]), request)
            #expect(tokens.status == 200, "\(tokens.text)")
            let access = try #require(tokens.json["access_token"] as? String)
            #expect(Self.claims(access)["idp"] as? String == "passkey")
            #expect(Self.claims(access)["sub"] as? String == apple.user.id)

            // Refusals: another origin (401), an unknown redirect URI (400, never redirected), a client without passkeys.
            let refused = try await finish(authorization, .init(origin: "https://evil.example"))
            #expect((refused.status, refused.error) == (401, "invalid_credential"))
            var stranger = request
            stranger.redirectURI = "https://evil.example/callback"
            let unknown = try await finish(formURLEncoded(stranger.query))
            #expect((unknown.status, unknown.error) == (400, "invalid_request"))
            var confidential = request
            (confidential.clientID, confidential.redirectURI) = (BrowserFlowTests.confidential, "https://backend.example.com/cb")
            let noPasskeys = try await finish(formURLEncoded(confidential.query))
            #expect((noPasskeys.status, noPasskeys.error) == (400, "invalid_request"))
            // A request the app made wrong goes back to the app, as from /oauth2/authorize.
            var badState = request
            badState.state = ""
            let toApp = try await finish(formURLEncoded(badState.query))
            #expect(toApp.status == 200)
            #expect(BrowserFlowTests.fields(of: toApp.json["redirectTo"] as? String ?? "")["error"] == "invalid_request")
        }
    }

    @Test("deleting the account deletes its passkeys: signing in with one afterwards is invalid_credential")
    func accountDeletion() async throws {
        try await ServerHarness.with(configure: Self.configure()) { harness in
            let (_, apple) = try await harness.signedIn()
            var authenticator = SoftwareAuthenticator()
            let (added, handle) = try await Self.register(harness, authenticator, bearer: apple.accessToken)
            #expect(added.status == 201)
            let deleted = try await harness.send("DELETE", "/v1/me", bearer: apple.accessToken)
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(try await harness.store.identity(provider: "passkey", subject: base64URL(authenticator.credentialID)) == nil)
            let (gone, _) = try await Self.signIn(harness, &authenticator, userHandle: handle)
            #expect((gone.status, gone.error) == (401, "invalid_credential"))
        }
    }
}
