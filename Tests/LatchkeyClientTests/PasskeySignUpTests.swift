import Foundation
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Passkey sign-up (`passkeys.allowSignUp`): the wire bodies, the session it starts, and its refusals. The real
/// server's checks of the credential run in `ServeEndToEndTests.passkeySignUp`.
@Suite("Client: passkey sign-up")
struct PasskeySignUpTests {
    @Test("signUpWithPasskey sends the sign-up options body, hands the options to the authenticator, and signs the new user in")
    func signsUp() async throws {
        let fixture = Fixture()
        let store = InMemoryTokenStore()
        let client = fixture.client(store: store)
        let authenticator = RecordingAuthenticator()
        let signedIn = try await client.signUpWithPasskey(displayName: "Ada", inviteCode: "INVITE-1", passkeyName: "Ada's iPhone", using: authenticator)
        #expect(signedIn.isNewUser)
        #expect(signedIn.user.identities.map(\.provider) == ["passkey"])
        #expect(signedIn.user.givenName == "Ada's iPhone")

        let options = fields(await fixture.server.signInBodies["passkey/signup/options"])
        #expect(options["displayName"] as? String == "Ada" && options["inviteCode"] as? String == "INVITE-1")
        let body = fields(await fixture.server.signInBodies["passkey/signup"])
        #expect(body["challengeId"] as? String == authenticator.seen.first?.challengeId)
        #expect(body["name"] as? String == "Ada's iPhone")
        #expect((body["credential"] as? [String: Any])?["id"] as? String == "AQID")
        #expect(authenticator.seen.first?.user.name == "Ada")

        #expect(await client.state.user?.id == signedIn.user.id)
        #expect(try store.load()?.userID == signedIn.user.id)
        #expect(try await client.validAccessToken() == client.currentAccessToken)
    }

    @Test("without a display name or an invitation the options body is an empty object")
    func minimalBody() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signUpWithPasskey(using: RecordingAuthenticator())
        #expect(fields(await fixture.server.signInBodies["passkey/signup/options"]).isEmpty)
        #expect(fields(await fixture.server.signInBodies["passkey/signup"])["name"] == nil)
    }

    @Test("a server with passkey sign-up off answers signup_closed, before the authenticator is asked")
    func signUpClosed() async throws {
        let fixture = Fixture()
        await fixture.server.set(passkeySignUpOpen: false)
        let client = fixture.client(store: InMemoryTokenStore())
        let authenticator = RecordingAuthenticator()
        let error = await #expect(throws: LatchkeyClientError.rejected) { try await client.signUpWithPasskey(using: authenticator) }
        #expect(error?.serverError?.error == "signup_closed" && error?.statusCode == 403)
        #expect(authenticator.seen.isEmpty)
        #expect(await client.state == .signedOut)
    }

    @Test("sign-up options without a challengeId are invalid_response, before the authenticator is asked")
    func optionsWithoutChallengeID() async throws {
        let fixture = Fixture()
        await fixture.server.set(passkeySignUpOpen: true, challengeIDs: false)
        let client = fixture.client(store: InMemoryTokenStore())
        let authenticator = RecordingAuthenticator()
        await #expect(throws: LatchkeyClientError.invalidResponse) { try await client.signUpWithPasskey(using: authenticator) }
        #expect(authenticator.seen.isEmpty)
    }

    @Test("the user cancelling the platform's sheet signs nobody up")
    func cancelled() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        let authenticator = RecordingAuthenticator(failure: .cancelled)
        await #expect(throws: LatchkeyClientError.cancelled) { try await client.signUpWithPasskey(using: authenticator) }
        #expect(await fixture.server.signInBodies["passkey/signup"] == nil)
        #expect(await client.state == .signedOut)
    }
}

/// An authenticator that records the creation options it is given and answers with a fixed credential (the fake
/// server does not verify it).
final class RecordingAuthenticator: PasskeyAuthenticator, @unchecked Sendable {
    // @unchecked: `options` is only used while holding `lock`; `failure` is a constant.
    private let lock = NSLock()
    private var options: [PublicKeyCredentialCreationOptionsJSON] = []
    private let failure: LatchkeyClientError?

    init(failure: LatchkeyClientError? = nil) { self.failure = failure }

    var seen: [PublicKeyCredentialCreationOptionsJSON] { lock.withLock { options } }

    func createPasskey(_ options: PublicKeyCredentialCreationOptionsJSON) async throws -> RegistrationResponseJSON {
        lock.withLock { self.options.append(options) }
        if let failure { throw failure }
        // What a platform's answer goes through on Apple platforms.
        _ = try PasskeyWire.registration(options)
        return try PasskeyWire.registrationResponse(credentialID: Data([1, 2, 3]), clientDataJSON: Data("{}".utf8), attestationObject: Data([0xA0]))
    }

    func assertPasskey(_ options: PublicKeyCredentialRequestOptionsJSON) async throws -> AuthenticationResponseJSON {
        throw LatchkeyClientError.passkeyUnavailable("this authenticator only makes passkeys")
    }
}
