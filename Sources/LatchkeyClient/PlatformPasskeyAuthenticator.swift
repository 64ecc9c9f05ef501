#if canImport(AuthenticationServices) && (os(iOS) || os(macOS) || os(visionOS))
    // Apple-only: a translation of PasskeyWire into AuthenticationServices calls. Every decision is in Passkeys.swift,
    // tested on Linux; AppleShellBudgetTests keeps this file free of its own.
    public import AuthenticationServices
    public import Foundation
    public import LatchkeyModels

    /// Passkeys through `ASAuthorizationPlatformPublicKeyCredentialProvider`: iCloud Keychain and the user's passkey
    /// providers. The app needs the associated domain `webcredentials:<passkeys.rpId>`.
    @MainActor
    public final class PlatformPasskeyAuthenticator: NSObject, PasskeyAuthenticator {
        private let anchor: ASPresentationAnchor?

        /// `anchor`: the window to present from; the key window when nil.
        public init(anchor: ASPresentationAnchor? = nil) { self.anchor = anchor }

        public func createPasskey(_ options: PublicKeyCredentialCreationOptionsJSON) async throws -> RegistrationResponseJSON {
            let wanted = try PasskeyWire.registration(options)
            let provider = ASAuthorizationPlatformPublicKeyCredentialProvider(relyingPartyIdentifier: wanted.rpID)
            let request = provider.createCredentialRegistrationRequest(challenge: wanted.challenge, name: wanted.userName, userID: wanted.userID)
            request.userVerificationPreference = .init(rawValue: wanted.userVerification)
            if #available(iOS 17.4, macOS 14.4, visionOS 1.1, *) {
                request.excludedCredentials = wanted.excludedCredentials.map { ASAuthorizationPlatformPublicKeyCredentialDescriptor(credentialID: $0) }
            }
            let made = try await perform(request) as? ASAuthorizationPlatformPublicKeyCredentialRegistration
            guard let made else { throw LatchkeyClientError.passkeyUnavailable("the platform gave no new passkey") }
            return try PasskeyWire.registrationResponse(
                credentialID: made.credentialID, clientDataJSON: made.rawClientDataJSON, attestationObject: made.rawAttestationObject)
        }

        public func assertPasskey(_ options: PublicKeyCredentialRequestOptionsJSON) async throws -> AuthenticationResponseJSON {
            let wanted = try PasskeyWire.assertion(options)
            let provider = ASAuthorizationPlatformPublicKeyCredentialProvider(relyingPartyIdentifier: wanted.rpID)
            let request = provider.createCredentialAssertionRequest(challenge: wanted.challenge)
            request.userVerificationPreference = .init(rawValue: wanted.userVerification)
            request.allowedCredentials = wanted.allowedCredentials.map { ASAuthorizationPlatformPublicKeyCredentialDescriptor(credentialID: $0) }
            let used = try await perform(request) as? ASAuthorizationPlatformPublicKeyCredentialAssertion
            guard let used else { throw LatchkeyClientError.passkeyUnavailable("the platform gave no assertion") }
            return PasskeyWire.assertionResponse(
                credentialID: used.credentialID, clientDataJSON: used.rawClientDataJSON, authenticatorData: used.rawAuthenticatorData,
                signature: used.signature, userHandle: used.userID)
        }

        /// Runs one request in an `ASAuthorizationController`; its delegate resumes the wait once.
        private func perform(_ request: ASAuthorizationRequest) async throws -> any ASAuthorizationCredential {
            let controller = ASAuthorizationController(authorizationRequests: [request])
            let delegate = PasskeyControllerDelegate(anchor: anchor)
            controller.delegate = delegate
            controller.presentationContextProvider = delegate
            let credential = try await withCheckedThrowingContinuation { continuation in
                delegate.continuation = continuation
                controller.performRequests()
            }
            withExtendedLifetime((controller, delegate)) {}
            return credential
        }
    }

    /// The controller's delegate and presentation context: AuthenticationServices calls both on the main thread.
    @MainActor
    private final class PasskeyControllerDelegate: NSObject, @preconcurrency ASAuthorizationControllerDelegate,
        @preconcurrency ASAuthorizationControllerPresentationContextProviding
    {
        let anchor: ASPresentationAnchor?
        var continuation: CheckedContinuation<any ASAuthorizationCredential, any Error>?
        init(anchor: ASPresentationAnchor?) { self.anchor = anchor }

        func authorizationController(controller: ASAuthorizationController, didCompleteWithAuthorization authorization: ASAuthorization) {
            continuation?.resume(returning: authorization.credential)
            continuation = nil
        }

        func authorizationController(controller: ASAuthorizationController, didCompleteWithError error: any Error) {
            continuation?.resume(throwing: PasskeyWire.failure(error))
            continuation = nil
        }

        func presentationAnchor(for controller: ASAuthorizationController) -> ASPresentationAnchor {
            anchor ?? WebSheetPresenter.keyWindow()
        }
    }
#endif
