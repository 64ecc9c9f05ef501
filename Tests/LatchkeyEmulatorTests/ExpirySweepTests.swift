import Foundation
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@testable import LatchkeyEmulator

@Suite("Emulator: expired codes and access tokens are forgotten")
struct ExpirySweepTests {
    static let client = EmulatorHarness.providerClientID
    static let redirect = EmulatorHarness.redirectURI

    func makeState() async -> (EmulatorState, UserRecord, retention: TimeInterval) {
        let configuration = EmulatorHarness.configuration()
        let state = EmulatorState(configuration: configuration)
        let user = await state.createUser(email: nil, hideMyEmail: false, realUserStatus: 2, givenName: nil, familyName: nil)
        return (state, user, configuration.expiredRecordRetention)
    }

    /// A Google code (ten minutes) that nobody redeems.
    func googleCode(_ state: EmulatorState, _ user: UserRecord) async throws -> String {
        try await state.issueCode(.init(provider: .google, userID: user.id, clientID: Self.client, redirectURI: Self.redirect, scopes: ["openid"]))
    }

    func googleForm(code: String) -> [String: String] {
        ["client_id": Self.client, "grant_type": "authorization_code", "code": code, "redirect_uri": Self.redirect]
    }

    /// A native Apple code (five minutes).
    func appleCode(_ state: EmulatorState, _ user: UserRecord) async throws -> String {
        try await state.signIn(userID: user.id, clientID: Fixtures.bundleID, redirectURI: nil, nonce: nil, scopes: [], native: true).code
    }

    /// Apple's `/auth/token` for `code`, with a client secret that is valid at the emulator's time.
    func redeemAtApple(_ state: EmulatorState, _ code: String, offset: TimeInterval) async throws -> AppleOAuthError? {
        let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        let secret = try AppleClientSecretProvider.makeSecret(
            credentials: credentials, clientID: Fixtures.bundleID, issuedAt: Date().addingTimeInterval(offset), lifetime: 600)
        let form = ["client_id": Fixtures.bundleID, "client_secret": secret, "grant_type": "authorization_code", "code": code]
        do {
            _ = try await state.appleToken(form)
            return nil
        } catch {
            return error
        }
    }

    func redeemAtGoogle(_ state: EmulatorState, _ code: String) async -> ProviderOAuthError? {
        do {
            _ = try await state.providerToken(.google, googleForm(code: code))
            return nil
        } catch {
            return error
        }
    }

    @Test("codes and access tokens are dropped once expired and past the retention, each lifetime in its own queue; grants stay and still refresh")
    func sweep() async throws {
        let (state, user, retention) = await makeState()
        // A Facebook token lives 60 days: issued first, it must not hold back the hour-long tokens issued after it.
        let facebook = try await state.providerSignIn(.init(provider: .facebook, userID: user.id, clientID: Self.client, scopes: ["public_profile"]))
        var refreshTokens: [String] = []
        for _ in 0..<10 {
            let answer = try await state.providerToken(.google, googleForm(code: try await googleCode(state, user)))
            guard case .string(let token)? = answer["refresh_token"] else { throw HarnessError("no refresh token: \(answer)") }
            refreshTokens.append(token)
        }
        for _ in 0..<1_000 { _ = try await googleCode(state, user) }
        for _ in 0..<100 { _ = try await appleCode(state, user) }
        for _ in 0..<1_000 {
            _ = await state.issueAccessToken(clientID: Fixtures.bundleID, teamID: Fixtures.teamID, userID: user.id, refreshToken: nil)
        }
        let issued = await state.heldRecordCounts
        #expect(issued.codes == 10 + 1_000 + 100)
        #expect(issued.accessTokens == 1 + 10 + 1_000)
        #expect(issued.indexedAccessTokens == issued.accessTokens)
        let grants = await state.grants.count
        #expect(grants == 10)

        // Every code has expired (Apple's after 300 s, Google's after 600 s), none is past the retention: all are held.
        await state.setClockOffset(601)
        _ = try await googleCode(state, user)
        #expect(await state.heldRecordCounts.codes == issued.codes + 1)
        #expect(await state.heldRecordCounts.accessTokens == issued.accessTokens)

        // Past the retention the first codes go; the two issued since stay, and the access tokens live an hour.
        await state.setClockOffset(600 + retention + 1)
        _ = try await googleCode(state, user)
        #expect(await state.heldRecordCounts.codes == 2)
        #expect(await state.heldRecordCounts.accessTokens == issued.accessTokens)

        // An hour and the retention later the access tokens go too, and their index entries, but for Facebook's.
        await state.setClockOffset(3_600 + retention + 1)
        _ = try await googleCode(state, user)
        let swept = await state.heldRecordCounts
        #expect(swept.codes == 1)
        #expect(swept.accessTokens == 1)
        #expect(swept.indexedAccessTokens == 1)
        let facebookToken = try #require(facebook.accessToken)
        #expect(await state.liveAccessToken(facebookToken, .facebook) != nil)

        // The grants stay: each still refreshes.
        #expect(await state.grants.count == grants)
        for token in refreshTokens {
            let answer = try await state.providerToken(.google, ["client_id": Self.client, "grant_type": "refresh_token", "refresh_token": token])
            #expect(answer["access_token"] != nil)
        }
        #expect(await state.heldRecordCounts.accessTokens == 1 + refreshTokens.count)
    }

    @Test("an expired code is refused as before while it is held, and with the same error once it has been swept")
    func expiredCode() async throws {
        let (state, user, retention) = await makeState()
        let apple = try await appleCode(state, user)
        let google = try await googleCode(state, user)

        // Expired, held: Apple answers invalid_grant and tells its request log why; Google answers as it does.
        await state.setClockOffset(601)
        _ = try await googleCode(state, user)
        #expect(await state.heldRecordCounts.codes == 3)
        let appleExpired = try #require(try await redeemAtApple(state, apple, offset: 601))
        #expect(appleExpired.code == "invalid_grant")
        #expect(appleExpired.detail == "the code expired")
        let googleExpired = try #require(await redeemAtGoogle(state, google))
        // The answer is {"error", "error_description"} from code and description when there is no provider body.
        #expect(googleExpired.status == 400)
        #expect(googleExpired.code == "invalid_grant")
        #expect(googleExpired.description == "Malformed auth code.")
        #expect(googleExpired.body == nil)

        // Swept: the same answers; only Apple's log detail can no longer say that the code expired.
        let later = 600 + retention + 1
        await state.setClockOffset(later)
        _ = try await googleCode(state, user)
        #expect(await state.heldRecordCounts.codes == 2, "the two codes issued to sweep")
        let appleSwept = try #require(try await redeemAtApple(state, apple, offset: later))
        #expect(appleSwept.code == "invalid_grant")
        #expect(appleSwept.detail.hasPrefix("unknown code"), "\(appleSwept.detail)")
        let googleSwept = try #require(await redeemAtGoogle(state, google))
        #expect(googleSwept.status == googleExpired.status)
        #expect(googleSwept.code == googleExpired.code)
        #expect(googleSwept.description == googleExpired.description)
        #expect(googleSwept.body == nil)
    }
}
