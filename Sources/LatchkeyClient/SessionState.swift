import Foundation
public import LatchkeyModels

/// The signed-in user as the server last described them (`GET /v1/me`, or the sign-in's answer).
public typealias LatchkeyUser = UserResponse

/// What an app renders: whether someone is signed in, and who.
public enum SessionState: Sendable, Equatable {
    /// Not known yet: the store cannot be read (it is locked before the device's first unlock). Show neither the
    /// sign-in screen nor the app.
    case unknown
    /// No session: never signed in, signed out, or ended by the server.
    case signedOut
    /// A session for this user.
    case signedIn(LatchkeyUser)
    /// A session whose user's profile the client does not have yet: stored by an earlier version, or a browser
    /// sign-in whose `GET /v1/me` got no answer (`userID` is nil then). The user is signed in: show the app. The client
    /// asks the server for the profile at launch and in the foreground (and ``LatchkeyClient/user()`` does), and the
    /// state becomes ``signedIn(_:)`` once it answers; offline, it stays here.
    case signedInWithoutProfile(userID: String?)

    /// The user, when signed in and their profile is known.
    public var user: LatchkeyUser? {
        if case .signedIn(let user) = self { return user }
        return nil
    }

    /// Whether there is a session: ``signedIn(_:)`` or ``signedInWithoutProfile(userID:)``.
    public var isSignedIn: Bool {
        switch self {
        case .signedIn, .signedInWithoutProfile: true
        case .unknown, .signedOut: false
        }
    }
}

/// Hands the session's state and events to every subscriber: each stream starts with the present (the state, or the
/// event that describes it) and then follows the changes.
final class SessionBroadcast: @unchecked Sendable {
    // @unchecked: every stored property is only read and written while holding `lock` (Mutex needs iOS 18).
    private let lock = NSLock()
    private var current: SessionState = .unknown
    /// The event a new `events` subscriber starts with.
    private var presentEvent: SessionEvent?
    private var stateSubscribers: [UUID: AsyncStream<SessionState>.Continuation] = [:]
    private var eventSubscribers: [UUID: AsyncStream<SessionEvent>.Continuation] = [:]

    var state: SessionState { lock.withLock { current } }

    /// Publishes `event`, and `state` to the state subscribers when it changed.
    func publish(_ event: SessionEvent, state: SessionState) {
        lock.withLock {
            let changed = state != current
            current = state
            switch event {
            case .refreshed: if presentEvent == nil || presentEvent == .storageUnavailable { presentEvent = .signedIn }
            default: presentEvent = event
            }
            for subscriber in eventSubscribers.values { subscriber.yield(event) }
            if changed { for subscriber in stateSubscribers.values { subscriber.yield(state) } }
        }
    }

    /// Publishes a new state with no event (the user's profile changed).
    func publish(state: SessionState) {
        lock.withLock {
            guard state != current else { return }
            current = state
            for subscriber in stateSubscribers.values { subscriber.yield(state) }
        }
    }

    func states() -> AsyncStream<SessionState> {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionState.self, bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        lock.withLock {
            continuation.yield(current)
            stateSubscribers[id] = continuation
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    func events() -> AsyncStream<SessionEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionEvent.self, bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        lock.withLock {
            if let presentEvent { continuation.yield(presentEvent) }
            eventSubscribers[id] = continuation
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    private func unsubscribe(_ id: UUID) {
        lock.withLock {
            stateSubscribers[id] = nil
            eventSubscribers[id] = nil
        }
    }
}
