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
            let context = PresentationContext(anchor: anchor)
            let callback: URL = try await withCheckedThrowingContinuation { continuation in
                let session = ASWebAuthenticationSession(url: url, callbackURLScheme: callbackScheme) { url, error in
                    if let url {
                        continuation.resume(returning: url)
                    } else {
                        continuation.resume(throwing: error ?? LatchkeyClientError.invalidResponse("the web sheet ended without a callback"))
                    }
                }
                session.presentationContextProvider = context
                session.prefersEphemeralWebBrowserSession = prefersEphemeralWebBrowserSession
                // When start() fails the completion handler runs with an error, which resumes the continuation.
                session.start()
            }
            return try await completeAuthorization(callbackURL: callback)
        }
    }

    /// Presents the web sheet from the given window.
    private final class PresentationContext: NSObject, ASWebAuthenticationPresentationContextProviding {
        let anchor: ASPresentationAnchor
        init(anchor: ASPresentationAnchor) { self.anchor = anchor }
        func presentationAnchor(for session: ASWebAuthenticationSession) -> ASPresentationAnchor { anchor }
    }
#endif
