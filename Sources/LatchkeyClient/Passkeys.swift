public import Foundation
public import LatchkeyModels

/// What makes passkeys and assertions for ``LatchkeyClient``: on Apple platforms `PlatformPasskeyAuthenticator`
/// (AuthenticationServices, iCloud Keychain and the user's passkey providers); in tests and on other platforms, any
/// authenticator that speaks WebAuthn's JSON forms.
public protocol PasskeyAuthenticator: Sendable {
    /// Makes a passkey for `options`, as `navigator.credentials.create()` does.
    func createPasskey(_ options: PublicKeyCredentialCreationOptionsJSON) async throws -> RegistrationResponseJSON
    /// Signs `options`' challenge with one of the user's passkeys for its `rpId`, as `navigator.credentials.get()` does.
    func assertPasskey(_ options: PublicKeyCredentialRequestOptionsJSON) async throws -> AuthenticationResponseJSON
}

/// Passkeys: adding one to the signed-in account, listing and deleting them, and signing in with one.
extension LatchkeyClient {
    /// Adds a passkey to the signed-in account (`POST /v1/me/passkeys/options`, the authenticator, `POST /v1/me/passkeys`).
    /// `name` is what the account's list shows ("iPhone", say); the server names it otherwise.
    @discardableResult
    public func registerPasskey(name: String? = nil, using authenticator: some PasskeyAuthenticator) async throws -> PasskeyResponse {
        let options = try await call("POST", "v1/me/passkeys/options", body: [String: String](), as: PublicKeyCredentialCreationOptionsJSON.self)
        let credential = try await authenticator.createPasskey(options)
        return try await call("POST", "v1/me/passkeys", body: PasskeyRegistrationRequest(credential: credential, name: name), as: PasskeyResponse.self)
    }

    /// The account's passkeys, oldest first (`GET /v1/me/passkeys`).
    public func passkeys() async throws -> [PasskeyResponse] {
        try await call("GET", "v1/me/passkeys", as: PasskeyList.self).passkeys
    }

    /// Deletes one of the account's passkeys (`DELETE /v1/me/passkeys/{id}`); never the last way in (`last_identity`).
    public func deletePasskey(id: String) async throws {
        _ = try await call("DELETE", "v1/me/passkeys/" + Self.pathSegment(id), as: EmptyAnswer.self)
    }

    /// Signs in with one of the user's passkeys (`POST /v1/auth/passkey/options`, the authenticator, `POST /v1/auth/passkey`):
    /// a session like any sign-in's, with `idp` `passkey`.
    @discardableResult
    public func signInWithPasskey(using authenticator: some PasskeyAuthenticator) async throws -> SignedIn {
        let options = try await post("v1/auth/passkey/options", body: [String: String](), as: PublicKeyCredentialRequestOptionsJSON.self)
        guard let challengeID = options.challengeId else { throw LatchkeyClientError.invalidResponse("passkey options without a challengeId") }
        let assertion = try await authenticator.assertPasskey(options)
        return try await signIn(path: "v1/auth/passkey", body: PasskeySignInRequest(challengeId: challengeID, credential: assertion))
    }

    /// Creates an account whose only way in is a new passkey, and signs it in (`POST /v1/auth/passkey/signup/options`,
    /// the authenticator, `POST /v1/auth/passkey/signup`): for servers with `passkeys.allowSignUp`, still under their
    /// `signup.mode`. The platform's sheet is the same as for ``registerPasskey(name:using:)``; the answer has
    /// `isNewUser` true.
    ///
    /// Throws ``LatchkeyClientError/rejected`` with `signup_closed` (403) when the server does not allow passkey sign-up
    /// or needs an invitation, and ``LatchkeyClientError/cancelled`` when the user closes the sheet.
    ///
    /// ```swift
    /// try await client.signUpWithPasskey(displayName: "Ada", using: PlatformPasskeyAuthenticator())
    /// ```
    ///
    /// - Parameters:
    ///   - displayName: the name the new account and its passkey show (the user's given name on the server); the
    ///     platform shows it in its sheet and in the passkey's entry.
    ///   - inviteCode: the invitation of a new user, when the server's `signup.mode` is `invite`.
    ///   - passkeyName: what the account's list of passkeys shows ("iPhone", say); the server names it otherwise.
    ///   - authenticator: what makes the passkey: `PlatformPasskeyAuthenticator` in an app, a software one in tests.
    @discardableResult
    public func signUpWithPasskey(
        displayName: String? = nil, inviteCode: String? = nil, passkeyName: String? = nil, using authenticator: some PasskeyAuthenticator
    ) async throws -> SignedIn {
        let options = try await post(
            "v1/auth/passkey/signup/options", body: PasskeySignUpOptionsRequest(displayName: displayName, inviteCode: inviteCode),
            as: PublicKeyCredentialCreationOptionsJSON.self, describing: "passkey creation options")
        let challengeID = try PasskeyWire.signUpChallengeID(options)
        let credential = try await authenticator.createPasskey(options)
        return try await signIn(path: "v1/auth/passkey/signup", body: PasskeySignUpRequest(challengeId: challengeID, credential: credential, name: passkeyName))
    }
}

/// WebAuthn's JSON forms to and from the bytes platform passkey APIs take and give: every decision a platform
/// authenticator makes lives here, so that the Apple-only file only translates calls.
public enum PasskeyWire {
    /// What a platform registration request needs, decoded from the server's creation options.
    public struct Registration: Sendable, Equatable {
        public let rpID: String
        public let challenge: Data
        public let userID: Data
        public let userName: String
        /// `required`, `preferred` or `discouraged`.
        public let userVerification: String
        public let excludedCredentials: [Data]
    }

    /// What a platform assertion request needs, decoded from the server's request options.
    public struct Assertion: Sendable, Equatable {
        public let rpID: String
        public let challenge: Data
        public let userVerification: String
        /// Empty: any of the user's passkeys for `rpID` (discoverable credentials).
        public let allowedCredentials: [Data]
    }

    public static func registration(_ options: PublicKeyCredentialCreationOptionsJSON) throws -> Registration {
        guard !options.rp.id.isEmpty, let challenge = data(options.challenge), !challenge.isEmpty, let userID = data(options.user.id), !userID.isEmpty,
            userID.count <= 64
        else {
            throw LatchkeyClientError.invalidResponse("passkey creation options without an rp id, a challenge or a user handle of 1 to 64 bytes")
        }
        return Registration(
            rpID: options.rp.id, challenge: challenge, userID: userID, userName: options.user.name,
            userVerification: options.authenticatorSelection.userVerification, excludedCredentials: options.excludeCredentials.compactMap { data($0.id) })
    }

    /// The `challengeId` that sign-up options must carry, to name the challenge in `POST /v1/auth/passkey/signup`; the
    /// options themselves are a registration's (``registration(_:)``), so a platform authenticator makes the passkey with
    /// the same request as when a passkey is added to an account.
    public static func signUpChallengeID(_ options: PublicKeyCredentialCreationOptionsJSON) throws -> String {
        guard let challengeID = options.challengeId, !challengeID.isEmpty else {
            throw LatchkeyClientError.invalidResponse("passkey sign-up options without a challengeId")
        }
        return challengeID
    }

    public static func assertion(_ options: PublicKeyCredentialRequestOptionsJSON) throws -> Assertion {
        guard !options.rpId.isEmpty, let challenge = data(options.challenge), !challenge.isEmpty else {
            throw LatchkeyClientError.invalidResponse("passkey request options without an rpId or a challenge")
        }
        return Assertion(
            rpID: options.rpId, challenge: challenge, userVerification: options.userVerification,
            allowedCredentials: options.allowCredentials.compactMap { data($0.id) })
    }

    /// A platform's new credential as `RegistrationResponseJSON`.
    public static func registrationResponse(credentialID: Data, clientDataJSON: Data, attestationObject: Data?, attachment: String = "platform") throws
        -> RegistrationResponseJSON
    {
        guard let attestationObject else { throw LatchkeyClientError.invalidResponse("the authenticator gave no attestation object") }
        let id = base64URL(credentialID)
        return RegistrationResponseJSON(
            id: id, rawId: id, response: .init(clientDataJSON: base64URL(clientDataJSON), attestationObject: base64URL(attestationObject)),
            authenticatorAttachment: attachment)
    }

    /// A platform's assertion as `AuthenticationResponseJSON`.
    public static func assertionResponse(
        credentialID: Data, clientDataJSON: Data, authenticatorData: Data, signature: Data, userHandle: Data?, attachment: String = "platform"
    ) -> AuthenticationResponseJSON {
        let id = base64URL(credentialID)
        return AuthenticationResponseJSON(
            id: id, rawId: id,
            response: .init(
                clientDataJSON: base64URL(clientDataJSON), authenticatorData: base64URL(authenticatorData), signature: base64URL(signature),
                userHandle: userHandle.map(base64URL)), authenticatorAttachment: attachment)
    }

    /// What an `ASAuthorizationController` error means (`ASAuthorizationError`'s codes): the user cancelling, or
    /// no passkey to be had.
    public static func failure(_ error: any Error) -> LatchkeyClientError {
        let error = error as NSError
        guard error.domain == "com.apple.AuthenticationServices.AuthorizationError" else {
            return .passkeyUnavailable("the passkey request failed (\(error.domain) \(error.code))")
        }
        switch error.code {
        case 1001: return .cancelled
        case 1004: return .passkeyUnavailable("the request failed: is the app's webcredentials: associated domain passkeys.rpId? (1004)")
        case 1005: return .passkeyUnavailable("no passkey for this server is saved on this device (1005)")
        case 1006: return .passkeyUnavailable("this device has a passkey for this account already (1006)")
        default: return .passkeyUnavailable("the passkey request failed (ASAuthorizationError \(error.code))")
        }
    }

    public static func base64URL(_ data: Data) -> String { Base64URL.encode(data) }

    /// Unpadded base64url decoded; nil when it is not.
    public static func data(_ text: String) -> Data? { Base64URL.decode(text).map { Data($0) } }
}
