import Crypto
import ExtrasBase64
public import Foundation
public import LatchkeyJOSE

/// A key of the admin API. The store keeps its hash only; the key itself is shown once, when it is made.
public struct AdminKey: Sendable, Equatable {
    public var name: String
    /// SHA-256 (hex) of the key.
    public var keyHash: String
    /// A read-only key may `GET`, never change anything.
    public var readOnly: Bool
    public var createdAt: Date
    public var revokedAt: Date?

    public init(name: String, keyHash: String, readOnly: Bool, createdAt: Date, revokedAt: Date? = nil) {
        self.name = name
        self.keyHash = keyHash
        self.readOnly = readOnly
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }
}

/// Makes, checks and revokes admin API keys (`lka_` and 32 random bytes, base64url).
public struct AdminKeys: Sendable {
    public let store: any AdminKeyStore
    public let timeSource: TimeSource

    public init(store: any AdminKeyStore, timeSource: TimeSource = .system) {
        self.store = store
        self.timeSource = timeSource
    }

    public static let prefix = "lka_"

    /// What a request's `Authorization` header proves.
    public enum Authentication: Sendable, Equatable {
        /// No key was ever made: the admin API is off.
        case disabled
        /// No key, a malformed one, or one that is unknown or revoked.
        case refused
        case key(AdminKey)
    }

    /// A new key named `name`: `.duplicate` when the name is taken (revoked keys keep their names).
    public func create(name: String, readOnly: Bool) async throws -> (key: AdminKey, secret: String) {
        guard Self.isValidName(name) else {
            throw LatchkeyError(.invalidRequest, "an admin key's name is 1 to 64 letters, digits, '.', '_' or '-'")
        }
        let secret = Self.prefix + Base64.encodeToString(bytes: systemRandomBytes(32), options: [.base64UrlAlphabet, .omitPaddingCharacter])
        let key = AdminKey(name: name, keyHash: Self.hash(secret), readOnly: readOnly, createdAt: timeSource.now)
        try await store.createAdminKey(key)
        return (key, secret)
    }

    /// Checks a bearer token. Its shape is checked before any look-up; the look-up is by hash, so how long it takes
    /// says nothing about how much of a key was right.
    public func authenticate(_ bearer: String?) async throws -> Authentication {
        if let bearer, Self.isWellFormed(bearer), let key = try await store.adminKey(hash: Self.hash(bearer)), key.revokedAt == nil {
            return .key(key)
        }
        return try await store.adminKeys().isEmpty ? .disabled : .refused
    }

    public static func hash(_ secret: String) -> String { lowercaseHex(SHA256.hash(data: Array(secret.utf8))) }

    /// `lka_` and 43 base64url characters.
    static func isWellFormed(_ secret: String) -> Bool {
        secret.utf8.count == prefix.utf8.count + 43 && secret.hasPrefix(prefix)
            && secret.utf8.dropFirst(prefix.utf8.count).allSatisfy { isBase64URL($0) }
    }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x2D || byte == 0x5F
    }

    static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count) && name.utf8.allSatisfy { isBase64URL($0) || $0 == 0x2E }
    }
}

/// Which users `GET /admin/v1/users` lists: every filter given must hold; oldest first, after `cursor` (a user id).
public struct UserSearch: Sendable, Equatable {
    /// The user's e-mail or one of their identities', as given or in lower case (a scan of users and identities).
    public var email: String?
    /// With ``subject``: the user with that provider account.
    public var provider: String?
    public var subject: String?
    public var createdAfter: Date?
    public var cursor: String?
    public var limit: Int
    /// True: guests only; false: no guests.
    public var anonymous: Bool?

    public init(
        email: String? = nil, provider: String? = nil, subject: String? = nil, createdAfter: Date? = nil, cursor: String? = nil, limit: Int = 50,
        anonymous: Bool? = nil
    ) {
        self.anonymous = anonymous
        self.email = email
        self.provider = provider
        self.subject = subject
        self.createdAfter = createdAfter
        self.cursor = cursor
        self.limit = limit
    }
}

/// Which audit events `GET /admin/v1/audit` lists: newest first, before `cursor` (an event id).
public struct AuditSearch: Sendable, Equatable {
    public var userID: String?
    public var kind: String?
    public var since: Date?
    /// Events before this instant only.
    public var until: Date?
    /// Past this event: older ones, or newer ones with ``oldestFirst``.
    public var cursor: String?
    public var limit: Int
    /// Oldest first (an export), instead of newest first (a support tool's page).
    public var oldestFirst: Bool

    public init(
        userID: String? = nil, kind: String? = nil, since: Date? = nil, until: Date? = nil, cursor: String? = nil, limit: Int = 50, oldestFirst: Bool = false
    ) {
        self.userID = userID
        self.kind = kind
        self.since = since
        self.until = until
        self.cursor = cursor
        self.limit = limit
        self.oldestFirst = oldestFirst
    }
}
