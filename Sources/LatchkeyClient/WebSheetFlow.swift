import Foundation

/// The decisions around the web sheet (`ASWebAuthenticationSession`), kept out of the Apple-only shell so they are
/// tested everywhere: which callback to wait for, one sheet at a time, and what its errors mean. Its result is
/// delivered once, and its task's cancellation closes it, through `SystemSheet`.
enum WebSheetFlow {
    /// What the sheet waits for: a redirect to a custom scheme, or (iOS 17.4, macOS 14.4) to an https universal link.
    enum Callback: Equatable {
        case customScheme(String)
        case https(host: String, path: String)
    }

    /// The callback for `redirectURI`, the client's redirect URI at the server.
    static func callback(for redirectURI: String, httpsCallbacksAvailable: Bool) throws(LatchkeyClientError) -> Callback {
        guard let components = URLComponents(string: redirectURI), let scheme = components.scheme?.lowercased(), !scheme.isEmpty else {
            throw .webSheetUnavailable("the redirect URI \(redirectURI.prefix(200)) has no scheme")
        }
        switch scheme {
        case "https":
            guard httpsCallbacksAvailable else { throw .webSheetUnavailable("https redirect URIs need iOS 17.4 or macOS 14.4") }
            guard let host = components.host, !host.isEmpty else { throw .webSheetUnavailable("the https redirect URI has no host") }
            return .https(host: host, path: components.path.isEmpty ? "/" : components.path)
        case "http":
            throw .webSheetUnavailable("a web sheet cannot return to an http redirect URI; use a custom scheme or https")
        default:
            return .customScheme(scheme)
        }
    }

    /// What the sheet's completion handler was given, as the result of the sign-in step.
    ///
    /// `ASWebAuthenticationSessionError` (domain `com.apple.AuthenticationServices.WebAuthenticationSession`):
    /// `canceledLogin` = 1, `presentationContextNotProvided` = 2, `presentationContextInvalid` = 3.
    static func outcome(callbackURL: URL?, error: (any Error)?) -> Result<URL, LatchkeyClientError> {
        if let callbackURL { return .success(callbackURL) }
        let error = error as NSError?
        guard let error, error.domain == "com.apple.AuthenticationServices.WebAuthenticationSession" else {
            return .failure(.webSheetUnavailable("the web sheet ended without a callback\(error.map { " (\($0.domain) \($0.code))" } ?? "")"))
        }
        switch error.code {
        case 1: return .failure(.cancelled)
        case 2, 3: return .failure(.webSheetUnavailable("the web sheet has no window to present from (error \(error.code))"))
        default: return .failure(.webSheetUnavailable("the web sheet failed (error \(error.code))"))
        }
    }

    /// One web sheet at a time in the process: a second is refused while the first is up, instead of presenting two
    /// sheets whose callbacks would race.
    final class Gate: @unchecked Sendable {
        // @unchecked: `open` is only read and written while holding `lock`.
        private let lock = NSLock()
        private var open = false

        static let shared = Gate()

        /// Takes the gate; the caller calls ``leave()`` when its sheet is gone.
        func enter() throws(LatchkeyClientError) {
            let taken = lock.withLock { () -> Bool in
                defer { open = true }
                return open
            }
            if taken { throw .webSheetUnavailable("another web sheet is being shown") }
        }

        func leave() { lock.withLock { open = false } }
    }
}
