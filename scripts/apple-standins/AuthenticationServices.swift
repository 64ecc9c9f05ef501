// Stand-in for AuthenticationServices: exactly the symbols the Apple-only files of LatchkeyClient use, with the Swift
// declarations Apple documents (https://developer.apple.com/documentation/authenticationservices, one page cited per
// symbol), their actor isolation and Sendable conformances, for scripts/check-apple-shells.sh. Only type-checked,
// never linked: every body traps.
//
// What Swift on Linux cannot say the way the SDK does, said as closely as it can:
// - Objective-C `optional` protocol requirements are required here (a shell that leaves one out fails this check but
//   would build with Xcode: the safe side).
// - NSCopying and NSSecureCoding conformances are left out; nothing here uses them.
// - Availability is written as Apple documents it, but the compiler only enforces it for Apple targets. What a build
//   for some platform cannot see at all is left out of that build instead: `excludedCredentials` on visionOS
//   (-D LATCHKEY_STANDIN_VISIONOS).
public import Foundation

#if LATCHKEY_STANDIN_MACOS
    // ASFoundation.h imports AppKit (macOS) or UIKit (iOS, visionOS) for ASPresentationAnchor; the module re-exports it.
    @_exported public import AppKit
#else
    @_exported public import UIKit
#endif

// https://developer.apple.com/documentation/authenticationservices/aspresentationanchor (ASFoundation.h:
// `typedef NSWindow *ASPresentationAnchor` on macOS, `typedef UIWindow *ASPresentationAnchor` on iOS and visionOS).
#if LATCHKEY_STANDIN_MACOS
    public typealias ASPresentationAnchor = NSWindow
#else
    public typealias ASPresentationAnchor = UIWindow
#endif

// MARK: - The web sheet

// https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession:
// `class ASWebAuthenticationSession` (NSObject; neither main-actor isolated nor Sendable).
@available(iOS 12.0, macOS 10.15, visionOS 1.0, *)
open class ASWebAuthenticationSession: NSObject {
    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/completionhandler:
    // `typealias CompletionHandler = (URL?, (any Error)?) -> Void` (not @Sendable).
    public typealias CompletionHandler = (URL?, (any Error)?) -> Void

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/callback:
    // `class Callback` (NSObject, Sendable), iOS 17.4, macOS 14.4, visionOS 1.1.
    @available(iOS 17.4, macOS 14.4, visionOS 1.1, *)
    open class Callback: NSObject, @unchecked Sendable {
        // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/callback/customscheme(_:):
        // `class func customScheme(_ customScheme: String) -> Self`.
        open class func customScheme(_ customScheme: String) -> Self { standIn() }

        // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/callback/https(host:path:):
        // `class func https(host: String, path: String) -> Self`.
        open class func https(host: String, path: String) -> Self { standIn() }
    }

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/init(url:callback:completionhandler:)-6nut7:
    // `init(url URL: URL, callback: ASWebAuthenticationSession.Callback, completionHandler: @escaping
    // ASWebAuthenticationSession.CompletionHandler)`, iOS 17.4, macOS 14.4, visionOS 1.1.
    @available(iOS 17.4, macOS 14.4, visionOS 1.1, *)
    public init(url URL: URL, callback: Callback, completionHandler: @escaping CompletionHandler) { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/init(url:callbackurlscheme:completionhandler:)-7fpox:
    // `init(url URL: URL, callbackURLScheme: String?, completionHandler: @escaping
    // ASWebAuthenticationSession.CompletionHandler)`, iOS 12, macOS 10.15, visionOS 1.0 (documented as deprecated from
    // the 27 releases: below that deployment target, no warning).
    @available(iOS 12.0, macOS 10.15, visionOS 1.0, *)
    public init(url URL: URL, callbackURLScheme: String?, completionHandler: @escaping CompletionHandler) { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/presentationcontextprovider:
    // `weak var presentationContextProvider: (any ASWebAuthenticationPresentationContextProviding)? { get set }`.
    @available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
    open weak var presentationContextProvider: (any ASWebAuthenticationPresentationContextProviding)?

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/prefersephemeralwebbrowsersession:
    // `var prefersEphemeralWebBrowserSession: Bool { get set }`.
    @available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
    open var prefersEphemeralWebBrowserSession: Bool = false

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/start(): `func start() -> Bool`.
    open func start() -> Bool { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationsession/cancel(): `func cancel()`.
    open func cancel() { standIn() }
}

// https://developer.apple.com/documentation/authenticationservices/aswebauthenticationpresentationcontextproviding:
// `@MainActor protocol ASWebAuthenticationPresentationContextProviding : NSObjectProtocol`.
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
@MainActor
public protocol ASWebAuthenticationPresentationContextProviding: NSObjectProtocol {
    // https://developer.apple.com/documentation/authenticationservices/aswebauthenticationpresentationcontextproviding/presentationanchor(for:):
    // `func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor`.
    func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor
}

// MARK: - The passkey sheet

// https://developer.apple.com/documentation/authenticationservices/asauthorizationcredential:
// `protocol ASAuthorizationCredential : NSCopying, NSSecureCoding, NSObjectProtocol` (not Sendable).
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
public protocol ASAuthorizationCredential: NSObjectProtocol {}

// https://developer.apple.com/documentation/authenticationservices/aspublickeycredential:
// `protocol ASPublicKeyCredential : ASAuthorizationCredential`, iOS 15, macOS 12.
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
public protocol ASPublicKeyCredential: ASAuthorizationCredential {
    // https://developer.apple.com/documentation/authenticationservices/aspublickeycredential/credentialid:
    // `var credentialID: Data { get }`.
    var credentialID: Data { get }
    // https://developer.apple.com/documentation/authenticationservices/aspublickeycredential/rawclientdatajson:
    // `var rawClientDataJSON: Data { get }`.
    var rawClientDataJSON: Data { get }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialregistration:
// `protocol ASAuthorizationPublicKeyCredentialRegistration : ASPublicKeyCredential`.
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
public protocol ASAuthorizationPublicKeyCredentialRegistration: ASPublicKeyCredential {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialregistration/rawattestationobject:
    // `var rawAttestationObject: Data? { get }`.
    var rawAttestationObject: Data? { get }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialassertion:
// `protocol ASAuthorizationPublicKeyCredentialAssertion : ASPublicKeyCredential`.
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
public protocol ASAuthorizationPublicKeyCredentialAssertion: ASPublicKeyCredential {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialassertion/rawauthenticatordata:
    // `var rawAuthenticatorData: Data! { get }`.
    var rawAuthenticatorData: Data! { get }
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialassertion/userid:
    // `var userID: Data! { get }`.
    var userID: Data! { get }
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialassertion/signature:
    // `var signature: Data! { get }`.
    var signature: Data! { get }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialregistration:
// `class ASAuthorizationPlatformPublicKeyCredentialRegistration` (NSObject, Sendable), iOS 15, macOS 12, visionOS 1.0.
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
open class ASAuthorizationPlatformPublicKeyCredentialRegistration: NSObject, ASAuthorizationPublicKeyCredentialRegistration,
    @unchecked Sendable
{
    open var credentialID: Data { standIn() }
    open var rawClientDataJSON: Data { standIn() }
    open var rawAttestationObject: Data? { standIn() }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialassertion:
// `class ASAuthorizationPlatformPublicKeyCredentialAssertion` (NSObject, Sendable), iOS 15, macOS 12, visionOS 1.0.
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
open class ASAuthorizationPlatformPublicKeyCredentialAssertion: NSObject, ASAuthorizationPublicKeyCredentialAssertion,
    @unchecked Sendable
{
    open var credentialID: Data { standIn() }
    open var rawClientDataJSON: Data { standIn() }
    open var rawAuthenticatorData: Data! { standIn() }
    open var userID: Data! { standIn() }
    open var signature: Data! { standIn() }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorization: `class ASAuthorization` (NSObject,
// Sendable).
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
open class ASAuthorization: NSObject, @unchecked Sendable {
    // https://developer.apple.com/documentation/authenticationservices/asauthorization/credential:
    // `var credential: any ASAuthorizationCredential { get }`.
    open var credential: any ASAuthorizationCredential { standIn() }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationrequest: `class ASAuthorizationRequest`
// (NSObject, Sendable).
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
open class ASAuthorizationRequest: NSObject, @unchecked Sendable {}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialuserverificationpreference:
// `struct ASAuthorizationPublicKeyCredentialUserVerificationPreference` (an extensible string enum: `init(rawValue:)`).
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
public struct ASAuthorizationPublicKeyCredentialUserVerificationPreference: RawRepresentable, Hashable, Sendable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialdescriptor:
// `class ASAuthorizationPlatformPublicKeyCredentialDescriptor` (NSObject, Sendable).
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
open class ASAuthorizationPlatformPublicKeyCredentialDescriptor: NSObject, @unchecked Sendable {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialdescriptor/init(credentialid:):
    // `init(credentialID: Data)`.
    public init(credentialID: Data) { standIn() }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialregistrationrequest:
// `class ASAuthorizationPlatformPublicKeyCredentialRegistrationRequest : ASAuthorizationRequest` (Sendable).
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
open class ASAuthorizationPlatformPublicKeyCredentialRegistrationRequest: ASAuthorizationRequest, @unchecked Sendable {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialregistrationrequest/userverificationpreference:
    // `var userVerificationPreference: ASAuthorizationPublicKeyCredentialUserVerificationPreference { get set }`.
    open var userVerificationPreference: ASAuthorizationPublicKeyCredentialUserVerificationPreference {
        get { standIn() }
        set { standIn() }
    }

    #if !LATCHKEY_STANDIN_VISIONOS
        // https://developer.apple.com/documentation/authenticationservices/asauthorizationwebbrowserplatformpublickeycredentialregistrationrequest/excludedcredentials:
        // `var excludedCredentials: [ASAuthorizationPlatformPublicKeyCredentialDescriptor]? { get set }`, from the
        // protocol ASAuthorizationWebBrowserPlatformPublicKeyCredentialRegistrationRequest: iOS 17.4, Mac Catalyst 16.6,
        // macOS 13.5, and no visionOS (absent from a visionOS build, see the header).
        @available(iOS 17.4, macOS 13.5, macCatalyst 16.6, *)
        @available(visionOS, unavailable)
        open var excludedCredentials: [ASAuthorizationPlatformPublicKeyCredentialDescriptor]? {
            get { standIn() }
            set { standIn() }
        }
    #endif
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialassertionrequest:
// `class ASAuthorizationPlatformPublicKeyCredentialAssertionRequest : ASAuthorizationRequest` (Sendable).
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
open class ASAuthorizationPlatformPublicKeyCredentialAssertionRequest: ASAuthorizationRequest, @unchecked Sendable {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationpublickeycredentialassertionrequest/userverificationpreference:
    // `var userVerificationPreference: ASAuthorizationPublicKeyCredentialUserVerificationPreference { get set }`.
    open var userVerificationPreference: ASAuthorizationPublicKeyCredentialUserVerificationPreference {
        get { standIn() }
        set { standIn() }
    }

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialassertionrequest/allowedcredentials:
    // `var allowedCredentials: [ASAuthorizationPlatformPublicKeyCredentialDescriptor] { get set }`.
    open var allowedCredentials: [ASAuthorizationPlatformPublicKeyCredentialDescriptor] {
        get { standIn() }
        set { standIn() }
    }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialprovider:
// `class ASAuthorizationPlatformPublicKeyCredentialProvider` (NSObject), iOS 15, macOS 12, visionOS 1.0.
@available(iOS 15.0, macOS 12.0, visionOS 1.0, *)
open class ASAuthorizationPlatformPublicKeyCredentialProvider: NSObject {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialprovider/init(relyingpartyidentifier:):
    // `init(relyingPartyIdentifier: String)`.
    public init(relyingPartyIdentifier: String) { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialprovider/createcredentialregistrationrequest(challenge:name:userid:):
    // `func createCredentialRegistrationRequest(challenge: Data, name: String, userID: Data) ->
    // ASAuthorizationPlatformPublicKeyCredentialRegistrationRequest`.
    open func createCredentialRegistrationRequest(challenge: Data, name: String, userID: Data)
        -> ASAuthorizationPlatformPublicKeyCredentialRegistrationRequest
    { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationplatformpublickeycredentialprovider/createcredentialassertionrequest(challenge:):
    // `func createCredentialAssertionRequest(challenge: Data) -> ASAuthorizationPlatformPublicKeyCredentialAssertionRequest`.
    open func createCredentialAssertionRequest(challenge: Data) -> ASAuthorizationPlatformPublicKeyCredentialAssertionRequest {
        standIn()
    }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationcontroller:
// `class ASAuthorizationController` (NSObject; neither main-actor isolated nor Sendable).
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
open class ASAuthorizationController: NSObject {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontroller/init(authorizationrequests:):
    // `init(authorizationRequests: [ASAuthorizationRequest])`.
    public init(authorizationRequests: [ASAuthorizationRequest]) { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontroller/delegate:
    // `weak var delegate: (any ASAuthorizationControllerDelegate)? { get set }`.
    open weak var delegate: (any ASAuthorizationControllerDelegate)?

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontroller/presentationcontextprovider:
    // `weak var presentationContextProvider: (any ASAuthorizationControllerPresentationContextProviding)? { get set }`.
    open weak var presentationContextProvider: (any ASAuthorizationControllerPresentationContextProviding)?

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontroller/performrequests():
    // `func performRequests()`.
    open func performRequests() { standIn() }

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontroller/cancel(): `func cancel()`,
    // iOS 16, macOS 13, visionOS 1.0; the delegate then gets `authorizationController(controller:didCompleteWithError:)`.
    @available(iOS 16.0, macOS 13.0, visionOS 1.0, *)
    open func cancel() { standIn() }
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationcontrollerdelegate:
// `@MainActor protocol ASAuthorizationControllerDelegate : NSObjectProtocol`.
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
@MainActor
public protocol ASAuthorizationControllerDelegate: NSObjectProtocol {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontrollerdelegate/authorizationcontroller(controller:didcompletewithauthorization:):
    // `optional func authorizationController(controller: ASAuthorizationController, didCompleteWithAuthorization
    // authorization: ASAuthorization)`.
    func authorizationController(controller: ASAuthorizationController, didCompleteWithAuthorization authorization: ASAuthorization)

    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontrollerdelegate/authorizationcontroller(controller:didcompletewitherror:):
    // `optional func authorizationController(controller: ASAuthorizationController, didCompleteWithError error: any Error)`.
    func authorizationController(controller: ASAuthorizationController, didCompleteWithError error: any Error)
}

// https://developer.apple.com/documentation/authenticationservices/asauthorizationcontrollerpresentationcontextproviding:
// `@MainActor protocol ASAuthorizationControllerPresentationContextProviding : NSObjectProtocol`.
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
@MainActor
public protocol ASAuthorizationControllerPresentationContextProviding: NSObjectProtocol {
    // https://developer.apple.com/documentation/authenticationservices/asauthorizationcontrollerpresentationcontextproviding/presentationanchor(for:):
    // `func presentationAnchor(for controller: ASAuthorizationController) -> ASPresentationAnchor`.
    func presentationAnchor(for controller: ASAuthorizationController) -> ASPresentationAnchor
}

@inline(never) func standIn() -> Never { fatalError("Apple stand-in: type-checking only") }
