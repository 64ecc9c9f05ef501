public import Observation

/// The session as a SwiftUI model: it follows ``LatchkeyClient/states()`` on the main actor, so views re-render when
/// someone signs in or out, or the user's profile changes. Keep one in the app's state
/// (`@State private var session = LatchkeySession(client: client)`) and choose the screen from ``state``:
///
/// ```swift
/// @MainActor func screen(for session: LatchkeySession) -> String {
///     switch session.state {
///     case .unknown: "launch screen"  // the store is not readable yet: neither signed in nor out
///     case .signedOut: "sign-in screen"
///     case .signedIn(let user): "home of \(user.id)"
///     case .signedInWithoutProfile: "home"  // signed in; the profile comes when the server answers
///     }
/// }
/// ```
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor
@Observable
public final class LatchkeySession {
    /// The current state: from the start what the client knows (`.unknown` only while its store cannot be read).
    public private(set) var state: SessionState

    /// The client it follows.
    @ObservationIgnored public let client: LatchkeyClient
    @ObservationIgnored private var following: Task<Void, Never>?

    /// A model following `client` for as long as it lives.
    public init(client: LatchkeyClient) {
        self.client = client
        state = client.broadcast.state
        following = Task { [weak self, states = client.states()] in
            for await state in states {
                guard let self else { return }
                self.state = state
            }
        }
    }

    deinit {
        following?.cancel()
    }
}
