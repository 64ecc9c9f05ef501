import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@Suite("Server: providers, linking and sign-up policy")
struct ProviderSignInTests {
    @Test("Google code + PKCE: the first sign-in creates the user, the second finds it by provider and subject")
    func googleCodeSignIn() async throws {
        try await ServerHarness.with { harness in
            let first = try await harness.googleSignIn(email: "ann@example.com")
            #expect(first.status == 200, "\(first.text)")
            let created = try first.decode(SignInResponse.self)
            #expect(created.isNewUser)
            #expect(created.user.identities.map(\.provider) == ["google"])
            #expect(created.user.email == "ann@example.com")
            try await harness.expectReturningUser(try await harness.googleSignIn(email: "ann@example.com"), created)
            let identity = try #require(try await harness.store.identity(provider: "google", subject: created.user.identities[0].subject))
            let grant = try #require(try await harness.store.providerGrant(identityID: identity.id))
            #expect(grant.provider == "google")
        }
    }

    @Test("a wrong code verifier, a replayed code and a missing verifier are refused with RFC 6749 codes")
    func codeRefusals() async throws {
        try await ServerHarness.with { harness in
            let verifier = PKCE.makeVerifier()
            let code = try await harness.googleCode(email: "bob@example.com", verifier: verifier)
            let wrong = try await harness.post(
                "/v1/auth/google", json: ["authorizationCode": code, "codeVerifier": PKCE.makeVerifier(), "redirectUri": EmulatorHarness.redirectURI])
            #expect(wrong.status == 400)
            #expect(wrong.error == "invalid_grant")

            let fresh = try await harness.googleCode(email: "bob@example.com", verifier: verifier)
            let body: [String: any Sendable] = ["authorizationCode": fresh, "codeVerifier": verifier, "redirectUri": EmulatorHarness.redirectURI]
            #expect(try await harness.post("/v1/auth/google", json: body).status == 200)
            let replayed = try await harness.post("/v1/auth/google", json: body)
            #expect(replayed.status == 400)
            #expect(replayed.error == "invalid_grant")

            let missing = try await harness.post("/v1/auth/google", json: ["authorizationCode": "x", "redirectUri": EmulatorHarness.redirectURI])
            #expect(missing.status == 400)
            #expect(missing.error == "invalid_request")
            let empty = try await harness.post("/v1/auth/google", json: [:])
            #expect(empty.status == 400)
            #expect(empty.error == "invalid_request")
            let foreignClient = try await harness.post(
                "/v1/auth/google", json: ["authorizationCode": "x", "codeVerifier": verifier, "clientId": "someone-else"])
            #expect(foreignClient.status == 400)
            #expect(foreignClient.error == "invalid_request")
        }
    }

    @Test("an unknown provider is 404 with the configured ones listed; Apple unconfigured stays 503")
    func unknownProvider() async throws {
        try await ServerHarness.with { harness in
            let answer = try await harness.post("/v1/auth/no-such-provider", json: ["idToken": "x"])
            #expect(answer.status == 404)
            #expect(answer.error == "not_found")
            // The harness configures every module of the registry and the generic OpenID Connect provider `oidc`.
            let configured = (ProviderModules.all.map { $0.name } + ["oidc"]).sorted().joined(separator: ", ")
            #expect((answer.json["error_description"] as? String)?.contains("configured: \(configured)") == true, "\(answer.text)")
        }
        try await ServerHarness.with(configure: { $0.apple = nil }) { harness in
            let answer = try await harness.post("/v1/auth/apple", json: ["identityToken": "x"])
            #expect(answer.status == 503)
            #expect(answer.error == "temporarily_unavailable")
        }
    }

    @Test("linking: an Apple user adds Google, signs in with either, cannot take another user's Google, unlinks, never the last")
    func linking() async throws {
        try await ServerHarness.with { harness in
            let (_, apple) = try await harness.signedIn(email: "cy@example.com")
            let linked = try await harness.googleSignIn(email: "cy@example.com", path: "/v1/me/identities/google", bearer: apple.accessToken)
            #expect(linked.status == 200, "\(linked.text)")
            let user = try linked.decode(UserResponse.self)
            #expect(user.id == apple.user.id)
            #expect(Set(user.identities.map(\.provider)) == ["apple", "google"])
            let googleSubject = try #require(user.identities.first { $0.provider == "google" }?.subject)

            // Signing in with Google now finds the same user, not a new one.
            let viaGoogle = try await harness.googleSignIn(email: "cy@example.com")
            #expect(try viaGoogle.decode(SignInResponse.self).user.id == apple.user.id)

            // Another user cannot link the same Google account.
            let (_, other) = try await harness.signedIn(email: "dee@example.com")
            let taken = try await harness.googleSignIn(email: "cy@example.com", path: "/v1/me/identities/google", bearer: other.accessToken)
            #expect(taken.status == 409)
            #expect(taken.error == "identity_in_use")

            // Unlinking ends the sessions begun through that identity, and leaves the rest.
            let googleSession = try viaGoogle.decode(SignInResponse.self)
            for malformed in ["%00", "a%0Ab"] {
                let refused = try await harness.send("DELETE", "/v1/me/identities/google/\(malformed)", bearer: apple.accessToken)
                #expect(refused.status == 400, "\(malformed)")
                #expect(refused.error == "invalid_request", "\(malformed)")
            }
            // Clients percent-encode what a subject may hold (`auth0|42`); every byte escaped still names the identity.
            let escaped = googleSubject.utf8.map { "%" + String($0, radix: 16, uppercase: true) }.joined()
            let unlinked = try await harness.send("DELETE", "/v1/me/identities/google/\(escaped)", bearer: apple.accessToken)
            #expect(unlinked.status == 200, "\(unlinked.text)")
            #expect(try unlinked.decode(UserResponse.self).identities.map(\.provider) == ["apple"])
            #expect(try await harness.refresh(googleSession.refreshToken).error == "invalid_grant")
            #expect(try await harness.send("GET", "/v1/me", bearer: apple.accessToken).status == 200)

            let appleSubject = try #require(apple.user.identities.first?.subject)
            let last = try await harness.send("DELETE", "/v1/me/identities/apple/\(appleSubject)", bearer: apple.accessToken)
            #expect(last.status == 409)
            #expect(last.error == "last_identity")
            let unknown = try await harness.send("DELETE", "/v1/me/identities/google/\(googleSubject)", bearer: apple.accessToken)
            #expect(unknown.status == 404)
            #expect(try await harness.send("DELETE", "/v1/me/identities/google/x").status == 401)
        }
    }

    @Test("Apple deleting the Apple account of a user who also has Google removes only the Apple identity and its sessions")
    func providerEventActsOnItsIdentity() async throws {
        try await ServerHarness.with { harness in
            let (sub, apple) = try await harness.signedIn(email: "eve@example.com")
            #expect(try await harness.googleSignIn(email: "eve@example.com", path: "/v1/me/identities/google", bearer: apple.accessToken).status == 200)
            let google = try await harness.googleSignIn(email: "eve@example.com").decode(SignInResponse.self)
            #expect(try await harness.emulator.send("DELETE", "/emulator/users/\(sub)").status == 204)
            try await poll(until: "the Apple identity to be removed", within: .seconds(5), every: .milliseconds(20)) {
                try await harness.store.identity(provider: "apple", subject: sub) == nil
            }
            #expect(try await harness.refresh(apple.refreshToken).error == "invalid_grant")
            let me = try await harness.send("GET", "/v1/me", bearer: google.accessToken)
            #expect(me.status == 200)
            #expect(try me.decode(UserResponse.self).identities.map(\.provider) == ["google"])
            #expect(try await harness.refresh(google.refreshToken).status == 200)
        }
    }

    @Test("signup.mode invite: new users need a valid code, each use counts, existing users always sign in")
    func inviteOnly() async throws {
        try await ServerHarness.with(configure: { $0.signUp = .invite }) { harness in
            let refused = try await harness.googleSignIn(email: "fay@example.com")
            #expect(refused.status == 403)
            #expect(refused.error == "signup_closed")
            let (_, code) = try await harness.server.sessions.administration.createInvite(maxUses: 1, note: "beta", by: .cli)
            let wrong = try await harness.googleSignIn(email: "fay@example.com", extra: ["inviteCode": "inv_nope"])
            #expect(wrong.error == "signup_closed")
            let invited = try await harness.googleSignIn(email: "fay@example.com", extra: ["inviteCode": code])
            #expect(invited.status == 200, "\(invited.text)")
            #expect(try await harness.googleSignIn(email: "fay@example.com").status == 200)  // existing user: no code needed
            let spent = try await harness.googleSignIn(email: "gus@example.com", extra: ["inviteCode": code])
            #expect(spent.status == 403)
            // Apple's body takes the code too.
            let sub = try await harness.emulator.createUser(email: "hal@example.com")
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("n"))
            #expect(try await harness.post("/v1/auth/apple", json: ["identityToken": apple.identityToken, "rawNonce": "n"]).error == "signup_closed")
            let (_, second) = try await harness.server.sessions.administration.createInvite(by: .cli)
            let retried = try await harness.post("/v1/auth/apple", json: ["identityToken": apple.identityToken, "rawNonce": "n", "inviteCode": second])
            #expect(retried.status == 200, "\(retried.text)")
        }
    }
}
