import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Guests: made by `POST /v1/auth/anonymous`, upgraded in place by a link, merged into the account they prove,
/// deleted when idle.
@Suite("Server: guests (anonymous users)")
struct GuestTests {
    static let endpoint = WebhookEndpoint(url: "https://backend.example/hooks", secret: Secret(WebhookEndpoint.generateSecret()))

    static func guestsOn(_ configuration: inout ServerConfiguration) {
        configuration.session.anonymous.enabled = true
        configuration.session.anonymous.perIPPerHour = 5
        configuration.webhooks = [endpoint]
    }

    static func events(_ harness: ServerHarness, _ kind: String) async throws -> [String] {
        try await harness.store.webhookDeliveries(status: nil, limit: 200).filter { $0.kind == kind }.map(\.payload)
    }

    @Test("off by default (404); on: a guest with isAnonymous and is_anonymous in every access token; the address's hourly limit holds")
    func signIn() async throws {
        try await ServerHarness.with { harness in
            let off = try await harness.post("/v1/auth/anonymous", json: [:])
            #expect((off.status, off.error) == (404, "not_found"))
        }
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let answer = try await harness.post("/v1/auth/anonymous", json: [:])
            #expect(answer.status == 200, "\(answer.text)")
            let guest = try answer.decode(SignInResponse.self)
            #expect(guest.isNewUser && guest.user.isAnonymous == true && guest.user.identities.isEmpty)
            #expect(try AdminAPITests.claims(guest.accessToken)["is_anonymous"] as? Bool == true)
            let refreshed = try await harness.refresh(guest.refreshToken)
            #expect(refreshed.status == 200)
            #expect(try AdminAPITests.claims(try refreshed.decode(TokenPairResponse.self).accessToken)["is_anonymous"] as? Bool == true)
            #expect(try await harness.send("GET", "/v1/me", bearer: guest.accessToken).json["isAnonymous"] as? Bool == true)
            #expect(try await Self.events(harness, "user.created").contains { $0.contains(#""provider":"anonymous""#) })
            #expect(try await harness.post("/v1/auth/anonymous", json: ["inviteCode": "inv_x"]).status == 200)
            for body in ["[1]", #"{"inviteCode": {}}"#, #"{"userId": "someone"}"#, "{"] {
                #expect(try await harness.send("POST", "/v1/auth/anonymous", body: body).error == "invalid_request", "\(body)")
            }
            // Five guests an hour from one address, counted in the store.
            for _ in 0..<3 { #expect(try await harness.post("/v1/auth/anonymous", json: [:]).status == 200) }
            let limited = try await harness.post("/v1/auth/anonymous", json: [:])
            #expect((limited.status, limited.error) == (429, "rate_limited"))
            harness.clock.advance(3600)
            #expect(try await harness.post("/v1/auth/anonymous", json: [:]).status == 200)
        }
    }

    @Test("upgrade in place: linking Apple keeps the guest's id, ends isAnonymous (tokens too) and sends user.upgraded")
    func upgrade() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let guest = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            let sub = try await harness.emulator.createUser(email: "upgraded@example.com")
            let nonce = "nonce-\(UUID().uuidString)"
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
            let linked = try await harness.post(
                "/v1/me/identities/apple", json: ["identityToken": apple.identityToken, "rawNonce": nonce, "authorizationCode": apple.code],
                bearer: guest.accessToken)
            #expect(linked.status == 200, "\(linked.text)")
            let user = try linked.decode(UserResponse.self)
            #expect(user.id == guest.user.id && user.isAnonymous == nil && user.identities.count == 1)
            let refreshed = try await harness.refresh(guest.refreshToken).decode(TokenPairResponse.self)
            #expect(try AdminAPITests.claims(refreshed.accessToken)["is_anonymous"] == nil)
            let upgraded = try await Self.events(harness, "user.upgraded")
            #expect(upgraded.count == 1 && upgraded[0].contains(#""provider":"apple""#) && upgraded[0].contains(guest.user.id))
            // Signing in with that Apple account now lands on the upgraded guest.
            try await harness.expectReturningUser(try await harness.signIn(sub: sub), guest)
        }
    }

    @Test("signup.mode invite applies at the upgrade: a guest's first link needs an invite code, and spends it")
    func inviteAtUpgrade() async throws {
        try await ServerHarness.with(configure: {
            Self.guestsOn(&$0)
            $0.signUp = .invite
        }) { harness in
            let guest = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            let sub = try await harness.emulator.createUser(email: "invited@example.com")
            func link(_ invite: String?) async throws -> ServerHarness.Answer {
                let nonce = "nonce-\(UUID().uuidString)"
                let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
                var body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": nonce]
                if let invite { body["inviteCode"] = invite }
                return try await harness.post("/v1/me/identities/apple", json: body, bearer: guest.accessToken)
            }
            let none = try await link(nil)
            #expect((none.status, none.error) == (403, "signup_closed"), "\(none.text)")
            let bogus = try await link("inv_bogus")
            #expect((bogus.status, bogus.error) == (403, "signup_closed"), "\(bogus.text)")
            #expect(try await harness.store.identities(userID: guest.user.id).isEmpty)
            #expect(try await harness.store.user(id: guest.user.id)?.isAnonymous == true)
            let (invite, code) = try await harness.server.sessions.administration.createInvite(maxUses: 1, by: .cli)
            let linked = try await link(code)
            #expect(linked.status == 200, "\(linked.text)")
            #expect(try linked.decode(UserResponse.self).isAnonymous == nil)
            #expect(try await harness.store.invites().first { $0.id == invite.id }?.uses == 1)
        }
    }

    @Test("merge: a guest linking another user's Apple is told mergeable; merging ends the guest with user.merged and answers the other's session")
    func merge() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let (sub, owner) = try await harness.signedIn(email: "owner@example.com")
            let guest = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            func appleBody() async throws -> [String: any Sendable] {
                let nonce = "nonce-\(UUID().uuidString)"
                let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
                return ["identityToken": apple.identityToken, "rawNonce": nonce]
            }
            let refused = try await harness.post("/v1/me/identities/apple", json: try await appleBody(), bearer: guest.accessToken)
            #expect((refused.status, refused.error) == (409, "identity_in_use"))
            #expect(refused.json["mergeable"] as? Bool == true)
            // A user who is no guest is not told so, and may not merge.
            let (_, other) = try await harness.signedIn(email: "other@example.com")
            let notGuest = try await harness.post("/v1/me/identities/apple", json: try await appleBody(), bearer: other.accessToken)
            #expect(notGuest.status == 409 && notGuest.json["mergeable"] == nil)
            let notAllowed = try await harness.post("/v1/me/merge/apple", json: try await appleBody(), bearer: other.accessToken)
            #expect((notAllowed.status, notAllowed.error) == (409, "merge_not_allowed"))

            // A merge whose proof fails leaves the guest whole.
            let failed = try await harness.post("/v1/me/merge/apple", json: ["identityToken": "not.a.token", "rawNonce": "n"], bearer: guest.accessToken)
            #expect(failed.status == 401)
            #expect(try await harness.store.user(id: guest.user.id) != nil)
            #expect(try await harness.send("GET", "/v1/me", bearer: guest.accessToken).status == 200)

            let merged = try await harness.post("/v1/me/merge/apple", json: try await appleBody(), bearer: guest.accessToken)
            #expect(merged.status == 200, "\(merged.text)")
            let session = try merged.decode(SignInResponse.self)
            #expect(session.user.id == owner.user.id && !session.isNewUser)
            #expect(try await harness.store.user(id: guest.user.id) == nil)
            #expect(try await harness.refresh(guest.refreshToken).status == 400)
            let events = try await Self.events(harness, "user.merged")
            #expect(events.count == 1 && events[0].contains(#""fromUserId":"\#(guest.user.id)""#) && events[0].contains(#""intoUserId":"\#(owner.user.id)""#))
            #expect(try await Self.events(harness, "user.deleted").isEmpty)
        }
    }

    @Test("the sweep deletes guests unused for anonymous.ttl with user.deleted anonymous_expired, and keeps those who refreshed")
    func sweep() async throws {
        try await ServerHarness.with(configure: Self.guestsOn) { harness in
            let idle = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            let active = try await harness.post("/v1/auth/anonymous", json: [:]).decode(SignInResponse.self)
            harness.clock.advance(20 * 86_400)
            #expect(try await harness.refresh(active.refreshToken).status == 200)
            harness.clock.advance(11 * 86_400)
            #expect(try await harness.server.sessions.guests.sweep() == 1)
            #expect(try await harness.store.user(id: idle.user.id) == nil)
            #expect(try await harness.store.user(id: active.user.id) != nil)
            let deleted = try await Self.events(harness, "user.deleted")
            #expect(deleted.count == 1 && deleted[0].contains("anonymous_expired") && deleted[0].contains(idle.user.id))
            #expect(try await harness.server.sessions.guests.sweep() == 0)
        }
    }
}
