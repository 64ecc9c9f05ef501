import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

/// LatchkeyClient's account API against a real server: what an app's settings screen does.
@Suite("Client: the account API against a real server")
struct ClientAccountTests {
    /// A client signed in with Apple (a new emulator user), its store in a fresh file.
    static func signedInClient(_ harness: ServerHarness) async throws -> (LatchkeyClient, sub: String) {
        let sub = try await harness.emulator.createUser(email: "settings@example.com")
        let nonce = AppleNonce()
        let minted = try await harness.emulator.nativeSignIn(sub: sub, nonce: nonce.sha256)
        let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("latchkey-client-\(UUID().uuidString).json")
        let client = LatchkeyClient(baseURL: try #require(URL(string: harness.baseURL)), tokenStore: FileTokenStore(url: file))
        try await client.signInWithApple(identityToken: minted.identityToken, authorizationCode: minted.code, rawNonce: nonce.raw)
        return (client, sub)
    }

    @Test("user, sessions, revoking another device's session, linking and unlinking Google, never the last identity")
    func settingsScreen() async throws {
        try await ServerHarness.with { harness in
            let (client, sub) = try await Self.signedInClient(harness)
            let user = try await client.user()
            #expect(user.identities.map(\.provider) == ["apple"])
            // Another device.
            let other = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            let sessions = try await client.sessions()
            #expect(sessions.count == 2)
            #expect(sessions.filter(\.current).count == 1)
            let otherID = try #require(sessions.first { !$0.current }?.id)
            try await client.revokeSession(id: otherID)
            #expect(try await harness.refresh(other.refreshToken).error == "invalid_grant")
            #expect(try await client.sessions().count == 1)
            let missing = await #expect(throws: LatchkeyClientError.rejected) { try await client.revokeSession(id: "no/such session") }
            #expect(missing?.statusCode == 404)

            let verifier = PKCE.makeVerifier()
            let code = try await harness.googleCode(email: "settings.g@example.com", verifier: verifier)
            let linked = try await client.linkIdentity(
                provider: "google", authorizationCode: code, codeVerifier: verifier, redirectUri: EmulatorHarness.redirectURI)
            #expect(linked.identities.map(\.provider).sorted() == ["apple", "google"])
            let google = try #require(linked.identities.first { $0.provider == "google" })
            let unlinked = try await client.unlinkIdentity(provider: "google", subject: google.subject)
            #expect(unlinked.identities.map(\.provider) == ["apple"])
            let last = await #expect(throws: LatchkeyClientError.rejected) { try await client.unlinkIdentity(provider: "apple", subject: sub) }
            #expect(last?.serverError?.error == "last_identity")
        }
    }

    @Test("deleteAccount: the server deletes the user and the local session ends; signOut(everywhere:) ends every device's")
    func deletionAndSignOut() async throws {
        try await ServerHarness.with { harness in
            let (client, sub) = try await Self.signedInClient(harness)
            let other = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            await client.signOut(everywhere: true)
            #expect(client.currentAccessToken == nil)
            await client.background.finish()
            #expect(try await harness.refresh(other.refreshToken).error == "invalid_grant")
            await #expect(throws: LatchkeyClientError.notSignedIn) { try await client.user() }

            let (again, _) = try await Self.signedInClient(harness)
            let id = try await again.user().id
            try await again.deleteAccount()
            #expect(again.currentAccessToken == nil)
            #expect(try await harness.store.user(id: id) == nil)
            await #expect(throws: LatchkeyClientError.notSignedIn) { try await again.deleteAccount() }
        }
    }
}

/// LatchkeyClient's passkeys against a real server, with a software authenticator in the platform's place.
@Suite("Client: passkeys against a real server")
struct ClientPasskeyTests {
    @Test("registerPasskey, passkeys, signOut, signInWithPasskey: the same user back, idp passkey; deletePasskey; a refusal surfaces as rejected")
    func passkeys() async throws {
        try await ServerHarness.with(configure: { $0.passkeys = PasskeySettings(rpID: "example.com", origins: ["https://example.com"]) }) { harness in
            let (client, _) = try await ClientAccountTests.signedInClient(harness)
            let user = try await client.user()
            let authenticator = SoftwarePasskeyAuthenticator()
            let added = try await client.registerPasskey(name: "Test iPhone", using: authenticator)
            #expect(added.name == "Test iPhone")
            #expect(try await client.passkeys().map(\.id) == [added.id])

            await client.signOut()
            #expect(await client.state == .signedOut)
            let signedIn = try await client.signInWithPasskey(using: authenticator)
            #expect(signedIn.user.id == user.id)
            #expect(await client.state == .signedIn(try await client.user()))
            let token = try #require(client.currentAccessToken)
            #expect(jsonSegment(token.split(separator: ".")[1])["idp"] as? String == "passkey")

            // An authenticator on another origin is refused by the server, and the session stays.
            let stranger = SoftwarePasskeyAuthenticator(origin: "https://evil.example")
            let refused = await #expect(throws: LatchkeyClientError.rejected) { try await client.registerPasskey(using: stranger) }
            #expect(refused?.serverError?.error == "invalid_credential")
            #expect(client.currentAccessToken != nil)

            let last = await #expect(throws: LatchkeyClientError.rejected) {
                try await client.unlinkIdentity(provider: "apple", subject: user.identities[0].subject)
                try await client.deletePasskey(id: added.id)
            }
            #expect(last?.serverError?.error == "last_identity")
            #expect(try await client.user().identities.map(\.provider) == ["passkey"])
        }
    }
}

/// The SDK's guest and e-mail calls against a real server.
@Suite("Client: guests and e-mail codes against a real server")
struct ClientGuestTests {
    @Test("signInAnonymously, linking an e-mail (the guest upgraded), signing in with a code; merging a second guest into that account")
    func guestEmailAndMerge() async throws {
        let mailbox = EmailCodeTests.Mailbox()
        try await ServerHarness.with(configure: EmailCodeTests.emailOn, emailSender: mailbox) { harness in
            let base = try #require(URL(string: harness.baseURL))
            func newClient() -> LatchkeyClient {
                LatchkeyClient(
                    baseURL: base,
                    tokenStore: FileTokenStore(
                        url: URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("latchkey-guest-\(UUID().uuidString).json")))
            }
            let client = newClient()
            let guest = try await client.signInAnonymously()
            #expect(guest.isNewUser && guest.user.isAnonymous == true)
            try await client.startLinkingEmail("guest.sdk@example.com")
            let linked = try await client.linkEmail("guest.sdk@example.com", code: try #require(mailbox.code(to: "guest.sdk@example.com")))
            #expect(linked.id == guest.user.id && linked.isAnonymous == nil)

            let other = newClient()
            harness.clock.advance(61)
            try await other.startEmailSignIn(email: "guest.sdk@example.com")
            let signedIn = try await other.verifyEmailCode(try #require(mailbox.code(to: "guest.sdk@example.com")), email: "guest.sdk@example.com")
            #expect(signedIn.user.id == guest.user.id && !signedIn.isNewUser)
            let wrong = await #expect(throws: LatchkeyClientError.rejected) { try await other.verifyEmailCode("000000", email: "nobody@example.com") }
            #expect(wrong?.serverError?.error == "invalid_grant")

            // A second guest proves an Apple account another user holds, and is merged into that user.
            let (sub, owner) = try await harness.signedIn(email: "merge.sdk@example.com")
            let second = newClient()
            try await second.signInAnonymously()
            let again = AppleNonce()
            let proof = try await harness.emulator.nativeSignIn(sub: sub, nonce: again.sha256)
            let merged = try await second.mergeWithApple(identityToken: proof.identityToken, authorizationCode: proof.code, rawNonce: again.raw)
            #expect(merged.user.id == owner.user.id && merged.user.isAnonymous == nil && !merged.isNewUser)
            #expect(try await second.user().id == merged.user.id)
        }
    }
}
