#if canImport(AuthenticationServices) && (os(iOS) || os(macOS) || os(visionOS))
    // Apple-only: a translation of WebSheetFlow into AuthenticationServices calls. Every decision is in
    // WebSheetFlow.swift, tested on Linux; AppleShellBudgetTests keeps this file free of its own.
    public import AuthenticationServices
    public import Foundation
    #if os(macOS)
        import AppKit
    #else
        import UIKit
    #endif

    extension LatchkeyClient {
        /// Runs the browser flow in an `ASWebAuthenticationSession`: opens ``authorizationURL(provider:clientID:redirectURI:)``,
        /// waits for the redirect, and finishes with ``completeAuthorization(callbackURL:)``.
        ///
        /// - Parameters:
        ///   - redirectURI: the client's redirect URI: a custom scheme such as `com.example.app:/oauth2redirect`, or
        ///     (iOS 17.4, macOS 14.4) an https universal link.
        ///   - anchor: the window to present from; the key window when nil (SwiftUI has none to pass).
        /// - Throws: ``LatchkeyClientError/cancelled`` when the user closes the sheet, ``LatchkeyClientError/webSheetUnavailable``
        ///   when it cannot be shown (another sheet is up, no window, `start()` refused).
        @MainActor
        public func signInWithWebSheet(
            provider: String? = nil, clientID: String, redirectURI: String, anchor: ASPresentationAnchor? = nil,
            prefersEphemeralWebBrowserSession: Bool = false
        ) async throws -> SignedIn {
            var httpsCallbacks = false
            if #available(iOS 17.4, macOS 14.4, visionOS 1.1, *) { httpsCallbacks = true }
            let callback = try WebSheetFlow.callback(for: redirectURI, httpsCallbacksAvailable: httpsCallbacks)
            try WebSheetFlow.Gate.shared.enter()
            defer { WebSheetFlow.Gate.shared.leave() }
            let url = authorizationURL(provider: provider, clientID: clientID, redirectURI: redirectURI)
            let presenter = WebSheetPresenter(anchor: anchor ?? WebSheetPresenter.keyWindow())
            var session: ASWebAuthenticationSession?
            let callbackURL: URL = try await withCheckedThrowingContinuation { continuation in
                let once = WebSheetFlow.ResumeOnce(continuation)
                // @Sendable, not main-actor: AuthenticationServices calls it off the main thread (always on macOS), and
                // may call it twice; ResumeOnce takes the first.
                let completion: @Sendable (URL?, (any Error)?) -> Void = { url, error in
                    once.resume(WebSheetFlow.outcome(callbackURL: url, error: error))
                }
                session = Self.webSession(url: url, callback: callback, completion: completion)
                session?.presentationContextProvider = presenter
                session?.prefersEphemeralWebBrowserSession = prefersEphemeralWebBrowserSession
                // `start() -> Bool`: false means the sheet will never call back.
                if session?.start() != true { once.resume(.failure(.webSheetUnavailable("ASWebAuthenticationSession.start() refused"))) }
            }
            withExtendedLifetime((session, presenter)) {}
            return try await completeAuthorization(callbackURL: callbackURL)
        }

        /// `init(url:callback:completionHandler:)` (iOS 17.4, macOS 14.4), or `init(url:callbackURLScheme:completionHandler:)`.
        @MainActor
        private static func webSession(
            url: URL, callback: WebSheetFlow.Callback, completion: @escaping @Sendable (URL?, (any Error)?) -> Void
        ) -> ASWebAuthenticationSession {
            guard #available(iOS 17.4, macOS 14.4, visionOS 1.1, *) else {
                guard case .customScheme(let scheme) = callback else { preconditionFailure("WebSheetFlow.callback allows https on 17.4+ only") }
                return ASWebAuthenticationSession(url: url, callbackURLScheme: scheme, completionHandler: completion)
            }
            let translated: ASWebAuthenticationSession.Callback =
                switch callback {
                case .customScheme(let scheme): .customScheme(scheme)
                case .https(let host, let path): .https(host: host, path: path)
                }
            return ASWebAuthenticationSession(url: url, callback: translated, completionHandler: completion)
        }
    }

    /// `ASWebAuthenticationPresentationContextProviding`: the window the sheet is presented from. The protocol is not
    /// main-actor isolated, but AuthenticationServices asks it on the main thread: `@preconcurrency` checks that at run time.
    @MainActor
    final class WebSheetPresenter: NSObject, @preconcurrency ASWebAuthenticationPresentationContextProviding {
        let anchor: ASPresentationAnchor
        init(anchor: ASPresentationAnchor) { self.anchor = anchor }
        func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor { anchor }

        /// The key window: `UIWindowScene.keyWindow` (iOS 15) of the connected scenes, or `NSApplication.keyWindow`.
        static func keyWindow() -> ASPresentationAnchor {
            #if os(macOS)
                NSApplication.shared.keyWindow ?? ASPresentationAnchor()
            #else
                UIApplication.shared.connectedScenes.compactMap { ($0 as? UIWindowScene)?.keyWindow }.first ?? ASPresentationAnchor()
            #endif
        }
    }
#endif
