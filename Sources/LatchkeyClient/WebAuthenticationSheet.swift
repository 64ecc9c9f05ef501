#if canImport(AuthenticationServices) && (os(iOS) || os(macOS) || os(visionOS))
    // Apple-only: a translation of WebSheetFlow and SystemSheet into AuthenticationServices calls, every decision tested
    // there on Linux. AppleShellBudgetTests keeps it thin; scripts/check-apple-shells.sh compiles it against stand-ins.
    public import AuthenticationServices
    import Foundation
    #if os(macOS)
        import AppKit
    #else
        import UIKit
    #endif

    @MainActor
    extension LatchkeyClient {
        /// Runs the browser flow in an `ASWebAuthenticationSession` presented from `anchor`: opens
        /// ``authorizationURL(provider:clientID:redirectURI:)``, waits for the redirect, and finishes with
        /// ``completeAuthorization(callbackURL:)``. Cancelling the task closes the sheet and throws `CancellationError`.
        ///
        /// - Parameters:
        ///   - redirectURI: the client's redirect URI: a custom scheme such as `com.example.app:/oauth2redirect`, or
        ///     (iOS 17.4, macOS 14.4) an https universal link.
        ///   - anchor: the window to present from. In an app extension, the extension's window.
        /// - Throws: ``LatchkeyClientError/cancelled`` when the user closes the sheet, ``LatchkeyClientError/webSheetUnavailable``
        ///   when it cannot be shown (another sheet is up, no window, `start()` refused).
        public func signInWithWebSheet(
            provider: String? = nil, clientID: String, redirectURI: String, anchor: ASPresentationAnchor, prefersEphemeralWebBrowserSession: Bool = false
        ) async throws -> SignedIn {
            var httpsCallbacks = false
            if #available(iOS 17.4, macOS 14.4, visionOS 1.1, *) { httpsCallbacks = true }
            let callback = try WebSheetFlow.callback(for: redirectURI, httpsCallbacksAvailable: httpsCallbacks)
            try WebSheetFlow.Gate.shared.enter()
            defer { WebSheetFlow.Gate.shared.leave() }
            let url = authorizationURL(provider: provider, clientID: clientID, redirectURI: redirectURI)
            let presenter = WebSheetPresenter(anchor: anchor)
            let callbackURL: URL = try await SystemSheet.run { once in
                // @Sendable, not main-actor: AuthenticationServices may call it off the main thread, and twice.
                let session = Self.webSession(url: url, callback: callback) { url, error in once.resume(WebSheetFlow.outcome(callbackURL: url, error: error)) }
                presenter.session = session
                session.presentationContextProvider = presenter  // weak var presentationContextProvider
                session.prefersEphemeralWebBrowserSession = prefersEphemeralWebBrowserSession  // var prefersEphemeralWebBrowserSession: Bool
                // `start() -> Bool`: false means the sheet will never call back.
                if !session.start() { once.resume(.failure(.webSheetUnavailable("ASWebAuthenticationSession.start() refused"))) }
            } close: { @MainActor in
                presenter.session?.cancel()  // `cancel()` dismisses it; its completion handler's answer is ignored
            }
            return try await completeAuthorization(callbackURL: callbackURL)
        }

        /// The browser flow presented from `anchor`, or when nil the key window (SwiftUI has no window to pass). Not in
        /// app extensions, which have no `UIApplication.shared`: pass the extension's window to the variant above.
        @available(iOSApplicationExtension, unavailable)
        @available(visionOSApplicationExtension, unavailable)
        @available(macCatalystApplicationExtension, unavailable)
        public func signInWithWebSheet(
            provider: String? = nil, clientID: String, redirectURI: String, anchor: ASPresentationAnchor? = nil, prefersEphemeralWebBrowserSession: Bool = false
        ) async throws -> SignedIn {
            let anchor = anchor ?? WebSheetPresenter.keyWindow(), ephemeral = prefersEphemeralWebBrowserSession
            return try await signInWithWebSheet(
                provider: provider, clientID: clientID, redirectURI: redirectURI, anchor: anchor, prefersEphemeralWebBrowserSession: ephemeral)
        }

        /// `init(url:callback:completionHandler:)` (iOS 17.4, macOS 14.4), or `init(url:callbackURLScheme:completionHandler:)`.
        private static func webSession(
            url: URL, callback: WebSheetFlow.Callback, completion: @escaping @Sendable (URL?, (any Error)?) -> Void
        ) -> ASWebAuthenticationSession {
            guard #available(iOS 17.4, macOS 14.4, visionOS 1.1, *) else {
                guard case .customScheme(let scheme) = callback else { preconditionFailure("WebSheetFlow.callback allows https on 17.4+ only") }
                return ASWebAuthenticationSession(url: url, callbackURLScheme: scheme, completionHandler: completion)
            }
            let translated: ASWebAuthenticationSession.Callback =
                switch callback {
                case .customScheme(let scheme): .customScheme(scheme)  // class func customScheme(_:) -> Self
                case .https(let host, let path): .https(host: host, path: path)  // class func https(host:path:) -> Self
                }
            return ASWebAuthenticationSession(url: url, callback: translated, completionHandler: completion)
        }
    }

    /// `ASWebAuthenticationPresentationContextProviding` (`@MainActor`): the sheet's window, and its session for closing it
    /// (kept alive by the wait's `close`, and the session with it: the session holds its provider weakly).
    @MainActor
    final class WebSheetPresenter: NSObject, ASWebAuthenticationPresentationContextProviding {
        let anchor: ASPresentationAnchor
        var session: ASWebAuthenticationSession?
        init(anchor: ASPresentationAnchor) { self.anchor = anchor }
        func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor { anchor }

        /// The key window of the connected scenes (`UIWindowScene.keyWindow`, iOS 15), or `NSApplication.keyWindow`.
        @available(iOSApplicationExtension, unavailable)
        @available(visionOSApplicationExtension, unavailable)
        @available(macCatalystApplicationExtension, unavailable)
        static func keyWindow() -> ASPresentationAnchor {
            #if os(macOS)
                NSApplication.shared.keyWindow ?? ASPresentationAnchor()  // class var shared; var keyWindow: NSWindow?
            #else
                UIApplication.shared.connectedScenes.compactMap { ($0 as? UIWindowScene)?.keyWindow }.first ?? ASPresentationAnchor()
            #endif
        }
    }
#endif
