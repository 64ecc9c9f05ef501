public import Foundation
public import LatchkeyModels

/// Where a ``LatchkeyClient`` keeps its session between launches, shared by every client (and process) using it.
///
/// ``InMemoryTokenStore`` keeps nothing across launches, ``FileTokenStore`` is a file (put it in an app-group
/// container to share the session with extensions), and `KeychainTokenStore` is the Keychain on Apple platforms.
public protocol TokenStore: Sendable {
    /// The stored session, or nil when there is none.
    ///
    /// Throws when the storage cannot be read now (a locked Keychain, an unreadable file); the client then
    /// reports ``SessionEvent/storageUnavailable`` and keeps the session: an error is never read as "signed out".
    func load() throws -> StoredSession?

    /// Stores `new` (nil deletes) only if the stored value still equals `expected`, atomically with respect to
    /// every client sharing the storage, and returns whether it did; on false nothing changed.
    func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool
}

/// A session as a ``TokenStore`` keeps it. Times are whole seconds, so a stored copy compares equal to the original.
public struct StoredSession: Codable, Sendable, Equatable {
    public var accessToken: String
    /// The scheme the access token goes with: `DPoP` for a session bound to the device key (``DeviceBinding/dpop``),
    /// `Bearer` otherwise; nil in sessions stored by earlier versions, which are bearer sessions.
    public var tokenType: String?
    public var refreshToken: String
    /// When the access token expires, from `expiresIn` at receipt.
    public var expiresAt: Date
    /// When to renew it: about two minutes before ``expiresAt``.
    public var refreshAt: Date
    public var userID: String?
    /// The user as the server last described them; nil in sessions stored by earlier versions until `GET /v1/me` answers.
    public var user: LatchkeyUser?
    /// Set while a refresh presenting ``refreshToken`` is (or may be) in flight; see ``PendingRefresh``.
    public var pendingRefresh: PendingRefresh?

    /// A refresh attempt recorded before it was sent. The server may have rotated the token already, so the next
    /// attempt presents the same refresh token again (the server answers with the same, still unused, successor);
    /// other clients wait for the owner instead of spending the token too.
    public struct PendingRefresh: Codable, Sendable, Equatable {
        public var startedAt: Date
        /// The client instance that sent it.
        public var owner: String
        public var processID: Int32
    }

    init(tokens: TokenPairResponse, userID: String?, user: LatchkeyUser? = nil, receivedAt: Date, refreshAhead: TimeInterval) {
        let received = receivedAt.wholeSeconds
        let lifetime = TimeInterval(max(0, tokens.expiresIn))
        accessToken = tokens.accessToken
        tokenType = tokens.tokenType
        refreshToken = tokens.refreshToken
        expiresAt = received.addingTimeInterval(lifetime)
        refreshAt = received.addingTimeInterval(lifetime - min(refreshAhead, lifetime / 2))
        self.userID = userID
        self.user = user
    }
}

extension StoredSession {
    /// The access token with its scheme.
    var credential: AccessCredential { AccessCredential(token: accessToken, tokenType: tokenType) }

    /// This session with `user` as its user.
    func describing(_ user: LatchkeyUser) -> StoredSession {
        var session = self
        session.user = user
        session.userID = user.id
        return session
    }
}

extension Date {
    var wholeSeconds: Date { Date(timeIntervalSince1970: timeIntervalSince1970.rounded(.down)) }
}

/// A ``TokenStore`` in memory: nothing survives the process. For tests and previews.
public final class InMemoryTokenStore: TokenStore, @unchecked Sendable {
    // @unchecked: `value` is only read and written while holding `lock`.
    private let lock = NSLock()
    private var value: StoredSession?

    /// An empty store.
    public init() {}

    public func load() throws -> StoredSession? {
        lock.withLock { value }
    }

    public func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
        lock.withLock {
            guard value == expected else { return false }
            value = new
            return true
        }
    }
}

extension StoredSession {
    /// The JSON a file or Keychain item holds.
    func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = .sortedKeys
        return try encoder.encode(self)
    }

    static func decoded(from data: Data) throws -> StoredSession {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try decoder.decode(StoredSession.self, from: data)
    }
}
