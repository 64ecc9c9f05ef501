public import Foundation

/// A provider account by provider and subject, as identities are keyed.
public struct ProviderAccountKey: Sendable, Hashable {
    public var provider: String
    public var subject: String

    public init(provider: String, subject: String) {
        self.provider = provider
        self.subject = subject
    }
}

/// A user to insert with their identities: one brought in by `latchkey users import`, or a guest (none).
public struct NewAccount: Sendable, Equatable {
    public var user: UserAccount
    public var identities: [LinkedIdentity]

    public init(user: UserAccount, identities: [LinkedIdentity]) {
        self.user = user
        self.identities = identities
    }
}

/// One Apple identity's part in an app transfer (Apple's TN3159): the sending team's `transfer_sub` for it, and
/// whether the recipient team has moved it to its own subject yet.
public struct AppleTransferRecord: Sendable, Equatable {
    public var identityID: String
    /// The subject under the sending team.
    public var oldSubject: String
    /// Apple's transfer identifier; nil when Apple refused to make one (``failure`` says why).
    public var transferSubject: String?
    /// The recipient team's id, as `prepare` sent it.
    public var targetTeam: String
    public var preparedAt: Date
    public var movedAt: Date?
    /// The subject under the recipient team, once moved.
    public var newSubject: String?
    /// Apple's last refusal (at `prepare` or `complete`).
    public var failure: String?

    public init(
        identityID: String, oldSubject: String, transferSubject: String?, targetTeam: String, preparedAt: Date, movedAt: Date? = nil,
        newSubject: String? = nil, failure: String? = nil
    ) {
        self.identityID = identityID
        self.oldSubject = oldSubject
        self.transferSubject = transferSubject
        self.targetTeam = targetTeam
        self.preparedAt = preparedAt
        self.movedAt = movedAt
        self.newSubject = newSubject
        self.failure = failure
    }
}

/// Where an app transfer stands, over every Apple identity.
public struct AppleTransferSummary: Sendable, Equatable {
    /// Every Apple identity in the store.
    public var appleIdentities: Int
    /// Identities with a `transfer_sub`, moved or not.
    public var prepared: Int
    /// Identities moved to the recipient team's subject.
    public var moved: Int
    /// Identities Apple gave no `transfer_sub` for.
    public var refused: Int
    /// Prepared identities given up after the window (`latchkey apple transfer close`).
    public var closed: Int
    /// The team the identities were prepared for (the latest, if several).
    public var targetTeam: String?
    /// The first move Latchkey saw: the 60-day window is counted from it (Apple counts from the transfer's acceptance,
    /// which Latchkey cannot see; the first sign-in or `complete` after it is the nearest mark).
    public var firstMovedAt: Date?

    public init(
        appleIdentities: Int = 0, prepared: Int = 0, moved: Int = 0, refused: Int = 0, closed: Int = 0, targetTeam: String? = nil,
        firstMovedAt: Date? = nil
    ) {
        self.appleIdentities = appleIdentities
        self.prepared = prepared
        self.moved = moved
        self.refused = refused
        self.closed = closed
        self.targetTeam = targetTeam
        self.firstMovedAt = firstMovedAt
    }

    /// Apple's transfer window: 60 days.
    public static let window: TimeInterval = 60 * 86_400

    /// Prepared identities neither moved nor given up.
    public var left: Int { prepared - moved - closed }

    /// When the window ends; nil before the first move.
    public var windowEndsAt: Date? { firstMovedAt.map { $0.addingTimeInterval(Self.window) } }

    /// Whether the window ended with identities still unmoved: an unknown Apple subject may be one of them.
    public func endedIncomplete(at now: Date) -> Bool {
        guard let end = windowEndsAt else { return false }
        return left > 0 && now >= end
    }
}

/// App transfers and imports: what `latchkey apple transfer` and `latchkey users import` read.
public protocol MigrationStore: Sendable {
    /// Apple identities with no transfer record for `targetTeam` yet (or one Apple refused), in id order after `after`.
    func appleIdentitiesToPrepare(targetTeam: String, after: String?, limit: Int) async throws -> [LinkedIdentity]
    /// Saves (or replaces) the transfer record of an identity.
    func saveAppleTransfer(_ record: AppleTransferRecord) async throws
    /// Prepared transfers not moved and not closed, in identity id order after `after`.
    func unmovedAppleTransfers(after: String?, limit: Int) async throws -> [AppleTransferRecord]
    /// The transfer record of an identity.
    func appleTransfer(identityID: String) async throws -> AppleTransferRecord?
    /// The transfer record holding `transferSubject`.
    func appleTransfer(transferSubject: String) async throws -> AppleTransferRecord?
    /// Where the transfer stands; ``AppleTransferSummary/appleIdentities`` only `countingIdentities` (a scan of every
    /// Apple identity, which the sign-in path does without).
    func appleTransferSummary(countingIdentities: Bool) async throws -> AppleTransferSummary
    /// Gives up the prepared transfers left unmoved (after the window); how many.
    func closeAppleTransfers(at: Date) async throws -> Int
    /// Apple identities without an Apple refresh token (imported, or left by a transfer): deletion cannot revoke them.
    func appleIdentitiesWithoutGrant() async throws -> Int
}

extension MigrationStore {
    /// Where the transfer stands, every Apple identity counted.
    public func appleTransferSummary() async throws -> AppleTransferSummary { try await appleTransferSummary(countingIdentities: true) }
}

/// Guests and the fleet-wide counters that limit them.
public protocol GuestStore: Sendable {
    /// Counts one event under `key` in the fixed window of `window` seconds that holds `at`, in the store (so that every
    /// instance of a fleet counts together); returns the window's count with this one.
    func countEvent(key: String, window: TimeInterval, at: Date) async throws -> Int
    /// Guests with no session used since `cutoff` and made before it, oldest first.
    func idleAnonymousUsers(before cutoff: Date, limit: Int) async throws -> [String]
}
