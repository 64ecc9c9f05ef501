#if canImport(AuthenticationServices) && (os(iOS) || os(macOS) || os(visionOS))
    public import AuthenticationServices
    public import Foundation

    extension LatchkeyClient {
        /// Runs the browser flow in an `ASWebAuthenticationSession`: opens ``authorizationURL(provider:clientID:redirectURI:)``,
        /// waits for the redirect to `callbackScheme`, and finishes with ``completeAuthorization(callbackURL:)``.
        ///
        /// - Parameters:
        ///   - redirectURI: the client's redirect URI with the custom scheme, such as `com.example.app:/oauth2redirect`.
        ///   - callbackScheme: that URI's scheme, `com.example.app`.
        ///   - anchor: where the sheet is presented from (the key window).
        @MainActor
        public func signInWithWebSheet(
            provider: String? = nil, clientID: String, redirectURI: String, callbackScheme: String, anchor: ASPresentationAnchor,
            prefersEphemeralWebBrowserSession: Bool = false
        ) async throws -> SignedIn {
            let url = authorizationURL(provider: provider, clientID: clientID, redirectURI: redirectURI)
            let sheet = WebSheet(anchor: anchor)
            let callback: URL = try await withCheckedThrowingContinuation { continuation in
                let session = ASWebAuthenticationSession(url: url, callbackURLScheme: callbackScheme) { url, error in
                    if let url {
                        continuation.resume(returning: url)
                    } else {
                        continuation.resume(throwing: error ?? LatchkeyClientError.invalidResponse("the web sheet ended without a callback"))
                    }
                }
                session.presentationContextProvider = sheet
                session.prefersEphemeralWebBrowserSession = prefersEphemeralWebBrowserSession
                sheet.session = session
                // When start() fails the completion handler runs with an error, which resumes the continuation.
                session.start()
            }
            // The session and its (weakly held) presentation context live until here.
            sheet.session = nil
            return try await completeAuthorization(callbackURL: callback)
        }
    }

    /// Presents the web sheet from the given window, and keeps the session alive while it is shown.
    @MainActor
    private final class WebSheet: NSObject, ASWebAuthenticationPresentationContextProviding {
        let anchor: ASPresentationAnchor
        var session: ASWebAuthenticationSession?
        init(anchor: ASPresentationAnchor) { self.anchor = anchor }
        func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor { anchor }
    }
#endif
