#if canImport(AuthenticationServices) && (os(iOS) || os(macOS) || os(visionOS))
    // Apple-only: a translation of PasskeyWire and SystemSheet into AuthenticationServices calls. Every decision is in
    // Passkeys.swift and SystemSheet.swift, tested on Linux; AppleShellBudgetTests keeps this file free of its own, and
    // scripts/check-apple-shells.sh compiles it against stand-ins of the frameworks.
    public import AuthenticationServices
    public import Foundation
    public import LatchkeyModels

    /// Passkeys through `ASAuthorizationPlatformPublicKeyCredentialProvider`: iCloud Keychain and the user's passkey
    /// providers. The app needs the associated domain `webcredentials:<passkeys.rpId>`. Cancelling the task that waits
    /// for a passkey closes the sheet and throws `CancellationError`.
    @MainActor
    public final class PlatformPasskeyAuthenticator: NSObject, PasskeyAuthenticator {
        private let anchor: @MainActor () -> ASPresentationAnchor

        /// Presents from `anchor`; in an app extension, the extension's window.
        public init(anchor: ASPresentationAnchor) { self.anchor = { anchor } }

        /// Presents from `anchor`, or, when nil, the app's key window when asked. Not in app extensions (no
        /// `UIApplication.shared`): pass the extension's window there.
        @available(iOSApplicationExtension, unavailable)
        @available(visionOSApplicationExtension, unavailable)
        @available(macCatalystApplicationExtension, unavailable)
        public init(anchor: ASPresentationAnchor? = nil) { self.anchor = { anchor ?? WebSheetPresenter.keyWindow() } }

        public func createPasskey(_ options: PublicKeyCredentialCreationOptionsJSON) async throws -> RegistrationResponseJSON {
            let wanted = try PasskeyWire.registration(options)
            let provider = ASAuthorizationPlatformPublicKeyCredentialProvider(relyingPartyIdentifier: wanted.rpID)  // init(relyingPartyIdentifier:)
            // createCredentialRegistrationRequest(challenge:name:userID:) -> ASAuthorizationPlatformPublicKeyCredentialRegistrationRequest
            let request = provider.createCredentialRegistrationRequest(challenge: wanted.challenge, name: wanted.userName, userID: wanted.userID)
            request.userVerificationPreference = .init(rawValue: wanted.userVerification)  // var userVerificationPreference { get set }
            #if !os(visionOS)  // excludedCredentials: iOS 17.4, macOS 13.5, never visionOS
                if #available(iOS 17.4, macOS 13.5, *) {  // var excludedCredentials: [ASAuthorizationPlatformPublicKeyCredentialDescriptor]?
                    request.excludedCredentials = wanted.excludedCredentials.map { ASAuthorizationPlatformPublicKeyCredentialDescriptor(credentialID: $0) }
                }
            #endif
            let made = try await perform(request).credential as? ASAuthorizationPlatformPublicKeyCredentialRegistration  // ASAuthorization.credential
            guard let made else { throw LatchkeyClientError.passkeyUnavailable("the platform gave no new passkey") }
            return try PasskeyWire.registrationResponse(  // ASPublicKeyCredential's credentialID, rawClientDataJSON; rawAttestationObject: Data?
                credentialID: made.credentialID, clientDataJSON: made.rawClientDataJSON, attestationObject: made.rawAttestationObject)
        }

        public func assertPasskey(_ options: PublicKeyCredentialRequestOptionsJSON) async throws -> AuthenticationResponseJSON {
            let wanted = try PasskeyWire.assertion(options)
            let provider = ASAuthorizationPlatformPublicKeyCredentialProvider(relyingPartyIdentifier: wanted.rpID)  // init(relyingPartyIdentifier:)
            let request = provider.createCredentialAssertionRequest(challenge: wanted.challenge)  // createCredentialAssertionRequest(challenge:)
            request.userVerificationPreference = .init(rawValue: wanted.userVerification)  // var userVerificationPreference { get set }
            // var allowedCredentials: [ASAuthorizationPlatformPublicKeyCredentialDescriptor], each init(credentialID:)
            request.allowedCredentials = wanted.allowedCredentials.map { ASAuthorizationPlatformPublicKeyCredentialDescriptor(credentialID: $0) }
            let used = try await perform(request).credential as? ASAuthorizationPlatformPublicKeyCredentialAssertion  // ASAuthorization.credential
            guard let used else { throw LatchkeyClientError.passkeyUnavailable("the platform gave no assertion") }
            return PasskeyWire.assertionResponse(  // ASPublicKeyCredential's; rawAuthenticatorData, signature, userID: Data!
                credentialID: used.credentialID, clientDataJSON: used.rawClientDataJSON, authenticatorData: used.rawAuthenticatorData,
                signature: used.signature, userHandle: used.userID)
        }

        /// Runs one request in an `ASAuthorizationController`; its delegate's answers go to SystemSheet's box.
        private func perform(_ request: ASAuthorizationRequest) async throws -> ASAuthorization {
            let controller = ASAuthorizationController(authorizationRequests: [request])  // init(authorizationRequests:)
            let delegate = PasskeyControllerDelegate(anchor: anchor)
            controller.delegate = delegate  // weak var delegate
            controller.presentationContextProvider = delegate  // weak var presentationContextProvider
            let authorization = try await SystemSheet.run { once in
                delegate.once = once
                controller.performRequests()  // performRequests(): the delegate answers
            } close: { @MainActor in
                controller.cancel()  // `cancel()` (iOS 16, macOS 13): the delegate then gets an error, which is ignored
            }
            withExtendedLifetime((controller, delegate)) {}
            return authorization
        }
    }

    /// The controller's delegate and presentation context: Apple declares both protocols `@MainActor`.
    @MainActor
    private final class PasskeyControllerDelegate: NSObject, ASAuthorizationControllerDelegate, ASAuthorizationControllerPresentationContextProviding {
        let anchor: @MainActor () -> ASPresentationAnchor
        var once: SystemSheet.ResumeOnce<ASAuthorization>?
        init(anchor: @escaping @MainActor () -> ASPresentationAnchor) { self.anchor = anchor }

        func authorizationController(controller: ASAuthorizationController, didCompleteWithAuthorization authorization: ASAuthorization) {
            once?.resume(.success(authorization))
        }

        func authorizationController(controller: ASAuthorizationController, didCompleteWithError error: any Error) {
            once?.resume(.failure(PasskeyWire.failure(error)))
        }

        func presentationAnchor(for controller: ASAuthorizationController) -> ASPresentationAnchor { anchor() }
    }
#endif
