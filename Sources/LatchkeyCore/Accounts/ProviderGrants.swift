public import Foundation
public import LatchkeyJOSE
public import Logging
import Synchronization

/// How a provider is asked about a user's authorization (the refresh token it issued). Each identity
/// provider the server is configured with adapts its REST client to this.
public protocol ProviderAuthorizationLink: Sendable {
    /// The provider's name for people, such as `Apple`, used in error descriptions.
    var displayName: String { get }
    /// Asks the provider whether `refreshToken` is still good.
    func validate(refreshToken: String, clientID: String) async -> ProviderValidation
    /// Revokes `refreshToken` at the provider.
    func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError)
}

public enum ProviderValidation: Sendable, Equatable {
    case valid
    /// Valid, and the provider answered a new refresh token in place of the one it was asked with (a provider that
    /// rotates them may refuse the old one next time): it replaces the stored one.
    case replaced(newRefreshToken: String)
    /// The provider refused the token: the user revoked the authorization.
    case revoked
    /// No answer; the reason is safe to log.
    case unreachable(String)
}

extension ProviderValidation: CustomStringConvertible {
    /// Never shows a new refresh token.
    public var description: String {
        switch self {
        case .valid: "valid"
        case .replaced: "replaced"
        case .revoked: "revoked"
        case .unreachable(let reason): "unreachable(\(reason))"
        }
    }
}

/// Tokens held at providers: kept sealed, validated about once a day while sessions refresh (so a user who
/// disconnected the app at the provider loses the sessions it began), and revoked at the provider — at once,
/// or through the outbox when the provider cannot be reached.
public struct ProviderGrants: Sendable {
    public let store: any ProviderGrantStore & OutboxStore & TransactionalStore & MigrationStore
    public let box: SecretBox
    /// Each provider's link, by provider name (`apple`, `google`, …).
    public let links: [String: any ProviderAuthorizationLink]
    public let policy: SessionPolicy
    public let timeSource: TimeSource
    private let validations = ValidationFlights()
    private let logger: Logger?

    public init(
        store: any ProviderGrantStore & OutboxStore & TransactionalStore & MigrationStore, box: SecretBox, links: [String: any ProviderAuthorizationLink],
        policy: SessionPolicy,
        timeSource: TimeSource,
        logger: Logger? = nil
    ) {
        self.store = store
        self.box = box
        self.links = links
        self.policy = policy
        self.timeSource = timeSource
        self.logger = logger
    }

    /// The provider's name for people, for error descriptions.
    func displayName(of provider: String) -> String { links[provider]?.displayName ?? provider }

    /// Keeps the token a provider issued for this identity, sealed, replacing an older one.
    func save(_ providerRefreshToken: String?, identity: LinkedIdentity, clientID: String) async throws {
        guard let grant = try grant(providerRefreshToken, identity: identity, clientID: clientID) else { return }
        try await store.saveProviderGrant(grant)
    }

    /// The grant that keeps the token a provider issued for this identity, sealed; nil without a token.
    func grant(_ providerRefreshToken: String?, identity: LinkedIdentity, clientID: String) throws -> ProviderGrant? {
        guard let providerRefreshToken else { return nil }
        let now = timeSource.now
        return ProviderGrant(
            identityID: identity.id, provider: identity.provider, clientID: clientID, sealedRefreshToken: try box.seal(providerRefreshToken),
            lastValidatedAt: now, createdAt: now)
    }

    /// Revokes the identity's provider grant at its provider, or queues the revocation; true when revoked now.
    func revoke(of identity: LinkedIdentity) async throws -> Bool? {
        guard let grant = try await store.providerGrant(identityID: identity.id) else { return nil }
        return try await revoke(grant)
    }

    /// Revokes `grant` at its provider, or queues the revocation; true when revoked now.
    func revoke(_ grant: ProviderGrant) async throws -> Bool {
        do {
            guard let link = links[grant.provider] else {
                throw LatchkeyError(.providerUnavailable, "the \(grant.provider) provider is not configured")
            }
            try await link.revoke(refreshToken: try box.open(grant.sealedRefreshToken), clientID: grant.clientID)
            return true
        } catch let error as LatchkeyError where error.code == .invalidGrant {
            // The provider no longer knows the token: nothing is left to revoke.
            return true
        } catch {
            let now = timeSource.now
            let item = OutboxItem(
                id: newIdentifier(), kind: OutboxItem.revocation, provider: grant.provider, clientID: grant.clientID,
                sealedPayload: grant.sealedRefreshToken, nextAttemptAt: now.addingTimeInterval(30),
                lastError: (error as? LatchkeyError)?.errorCode ?? "error", createdAt: now
            )
            try await store.enqueue(item)
            return false
        }
    }

    /// Whether this instance knows the identity's grant (or its absence) needs no validation now: a refresh may then
    /// skip ``checkAuthorization(identityID:userID:)``.
    func isKnownValidated(identityID: String) -> Bool { validations.isNotDue(identityID, now: timeSource.now) }

    /// Validates the stored provider refresh token when the last validation is older than the interval.
    /// One instance of a fleet asks (it claims the grant in the store); the others go on meanwhile, within the grace
    /// period. After the provider could not be reached, no instance asks about that grant for ``ValidationFlights/failureBackoff``.
    func checkAuthorization(identityID: String, userID: String) async throws {
        let now = timeSource.now
        // Most refreshes find the grant validated within the day: remembered here, they skip the read.
        if validations.isNotDue(identityID, now: now) { return }
        guard let grant = try await store.providerGrant(identityID: identityID), let providerLink = links[grant.provider] else {
            // A grant saved from now on is new, so not due before the interval has passed either.
            validations.remember(identityID, notDueUntil: now.addingTimeInterval(policy.providerValidationInterval), now: now)
            return
        }
        let name = providerLink.displayName
        guard now.timeIntervalSince(grant.lastValidatedAt) >= policy.providerValidationInterval else {
            validations.remember(identityID, notDueUntil: grant.lastValidatedAt.addingTimeInterval(policy.providerValidationInterval), now: now)
            return
        }
        let started = now
        // Within the grace period a slow provider must not hold the refresh: the flight goes on without it.
        let withinGrace = now.timeIntervalSince(grant.lastValidatedAt) <= policy.providerUnreachableGrace
        let result: ProviderValidation
        if let failure = validations.recentFailure(identityID, now: now) {
            result = .unreachable(failure)
        } else {
            let answer = await validations.run(identityID, waitingAtMost: withinGrace ? .seconds(policy.providerValidationWait) : nil) {
                // Another refresh, here or on another instance, may be asking or may have asked already.
                let dueBefore = now.addingTimeInterval(-policy.providerValidationInterval)
                guard
                    (try? await store.claimProviderValidation(
                        identityID: identityID, sealedRefreshToken: grant.sealedRefreshToken, dueBefore: dueBefore, now: now,
                        until: now.addingTimeInterval(Self.validationClaim))) == true
                else {
                    // Another request or instance is asking. Within the grace period this refresh goes on; past it, the
                    // answer is awaited (for about the provider timeout) rather than refusing.
                    let deadline = ContinuousClock.now + (withinGrace ? .zero : Self.answerWait)
                    while true {
                        guard let fresh = try? await store.providerGrant(identityID: identityID) else { break }
                        if fresh.lastValidatedAt > dueBefore { return .valid }
                        guard ContinuousClock.now < deadline else { break }
                        try? await Task.sleep(for: .milliseconds(200))
                    }
                    return .unreachable("another request or instance is asking \(name)")
                }
                guard let token = try? box.open(grant.sealedRefreshToken) else { return .unreachable("the stored token cannot be opened") }
                let result = await providerLink.validate(refreshToken: token, clientID: grant.clientID)
                switch result {
                case .valid, .replaced:
                    // Only the token that was validated is marked; a grant replaced meanwhile keeps its own state.
                    var replacement: String?
                    if case .replaced(let newToken) = result { replacement = try? box.seal(newToken) }
                    _ = try? await store.markProviderGrantValidated(
                        identityID: identityID, sealedRefreshToken: grant.sealedRefreshToken, at: timeSource.now, replacingWith: replacement)
                    return .valid
                case .unreachable(let reason):
                    // Once per identity per backoff, fleet-wide: the operator may have to fix credentials or reach the provider.
                    logger?.warning(
                        "\(name) could not validate an authorization; sessions keep working within the grace period",
                        metadata: ["provider": "\(grant.provider)", "reason": "\(reason)"])
                    validations.recordFailure(identityID, reason: reason, at: timeSource.now)
                    try? await store.postponeProviderValidation(
                        identityID: identityID, until: timeSource.now.addingTimeInterval(ValidationFlights.failureBackoff))
                    return result
                case .revoked:
                    if await dropsForTransfer(grant, identityID: identityID, userID: userID) { return .valid }
                    // Applied here, once, whether or not a refresh still waits for the answer.
                    return await endSessions(of: grant, identityID: identityID, userID: userID, startedBefore: started)
                }
            }
            // No answer in time: the flight carries on and applies what the provider says.
            guard let answer else { return }
            result = answer
        }
        switch result {
        case .valid, .replaced:
            return
        case .revoked:
            throw LatchkeyError(
                .invalidGrant,
                "the \(name) authorization was revoked (\(name) refused the stored refresh token); all sessions of this \(name) account were ended — sign in again"
            )
        case .unreachable(let reason):
            logger?.debug("the provider did not validate the authorization now", metadata: ["provider": "\(grant.provider)", "reason": "\(reason)"])
            if now.timeIntervalSince(grant.lastValidatedAt) > policy.providerUnreachableGrace {
                throw LatchkeyError(
                    .temporarilyUnavailable,
                    "\(name) has not confirmed this authorization for more than \(Int(policy.providerUnreachableGrace / 3600)) h and cannot be reached now; try again later"
                )
            }
        }
    }

    /// An Apple grant refused while its identity waits to move in an app transfer: the sending team's token is no use
    /// to the recipient team, and the user revoked nothing. The grant is deleted (the next sign-in with a code brings
    /// one) and the sessions stay; true when that is what happened.
    private func dropsForTransfer(_ grant: ProviderGrant, identityID: String, userID: String) async -> Bool {
        guard grant.provider == "apple", let record = try? await store.appleTransfer(identityID: identityID), record.transferSubject != nil,
            record.movedAt == nil
        else { return false }
        let now = timeSource.now
        let dropped = try? await store.write { tx in
            guard try await tx.deleteProviderGrant(identityID: identityID, sealedRefreshToken: grant.sealedRefreshToken) else { return false }
            try await tx.audit(at: now, userID, "apple_grant_dropped_for_transfer", "identity=\(identityID)")
            return true
        }
        return dropped != nil
    }

    /// After the provider refused the grant's token: deletes the grant and ends the identity's sessions begun before
    /// the validation started. `.valid` when a sign-in brought a new authorization meanwhile (it keeps its grant and
    /// session); `.unreachable` when the store could not record it (the grant stays, to be asked about again).
    private func endSessions(of grant: ProviderGrant, identityID: String, userID: String, startedBefore started: Date) async -> ProviderValidation {
        do {
            let now = timeSource.now
            let revoked = policy.webhooks.deliveries(
                LifecycleEvent.identity(
                    .identityRevoked, userID: userID, identityID: identityID, provider: grant.provider, subject: nil, at: now, reason: "invalid_grant"))
            let kind = "\(grant.provider)_authorization_revoked"
            // The grant, the sessions, identity.revoked and the audit event in one transaction.
            let ended = try await store.write { tx in
                guard try await tx.deleteProviderGrant(identityID: identityID, sealedRefreshToken: grant.sealedRefreshToken) else { return false }
                let count = try await tx.revokeSessions(identityID: identityID, createdBefore: started, reason: kind, at: now)
                try await tx.enqueue(revoked)
                try await tx.audit(at: now, userID, kind, "found at daily validation; \(count) session(s) revoked")
                return true
            }
            return ended ? .revoked : .valid
        } catch {
            logger?.error(
                "\(displayName(of: grant.provider)) refused a stored authorization, but ending its sessions failed; the grant is asked about again later",
                metadata: ["provider": "\(grant.provider)", "error": "\(String(describing: error))"])
            return .unreachable("the store could not end the sessions")
        }
    }

    /// How long an instance holds the right to ask a provider about a grant: past the provider HTTP timeout, so
    /// a second instance only asks when the first one died.
    static let validationClaim: TimeInterval = 60
    /// How long a refresh past the grace period waits for the answer another instance is getting.
    static let answerWait: Duration = .seconds(12)

    /// After this many failed attempts (about a week with the backoff) an owed revocation is given up.
    static let maximumOutboxAttempts = 40

    /// The longest one revocation can take against a provider that answers slowly: three attempts of 10 s and backoff.
    static let slowestRevocation: TimeInterval = 40

    /// Retries owed provider calls, up to `limit`; returns how many succeeded. The items are claimed in the store for
    /// `lease`: no other instance takes them meanwhile, and if this one dies before recording the outcome, another
    /// retries them after it.
    public func processOutbox(limit: Int = 50, lease: TimeInterval = 300) async throws -> Int {
        var done = 0
        var taken = 0
        // Claim no more at a time than the lease covers at the slowest: past it another instance takes over the items
        // still waiting here, and the provider is called twice.
        let claimable = max(1, min(limit, Int(lease / Self.slowestRevocation)))
        while taken < limit {
            let now = timeSource.now
            let items = try await store.claimDueOutboxItems(now: now, limit: min(claimable, limit - taken), leaseUntil: now.addingTimeInterval(lease))
            taken += items.count
            for item in items {
                // Shutting down: the items left keep their lease and are retried after it, here or by another instance.
                try Task.checkCancellation()
                if try await attempt(item) { done += 1 }
            }
            if items.count < claimable { break }
        }
        return done
    }

    /// Makes one owed provider call and records the outcome; true when it was done.
    private func attempt(_ claimed: OutboxItem) async throws -> Bool {
        var item = claimed
        var done = false
        do {
            guard let link = links[item.provider] else {
                throw LatchkeyError(.providerUnavailable, "the \(item.provider) provider is not configured")
            }
            try await link.revoke(refreshToken: try box.open(item.sealedPayload), clientID: item.clientID)
            item.completedAt = timeSource.now
            item.lastError = nil
            item.sealedPayload = ""
            done = true
        } catch {
            // A call cut short by a shutdown is no answer from the provider; the lease brings the item back.
            if Task.isCancelled { throw CancellationError() }
            item.attempts += 1
            item.lastError = (error as? LatchkeyError)?.errorCode ?? "error"
            let unknownToken = (error as? LatchkeyError)?.code == .invalidGrant
            if unknownToken || item.attempts >= Self.maximumOutboxAttempts {
                // The provider no longer knows the token (nothing left to revoke), or it is hopeless: stop, keep the record.
                item.completedAt = timeSource.now
                item.sealedPayload = ""
                done = unknownToken
            } else {
                item.nextAttemptAt = timeSource.now.addingTimeInterval(min(30 * pow(2, Double(item.attempts)), 6 * 3600))
            }
        }
        try await store.updateOutboxItem(item)
        return done
    }

}

/// One provider validation per identity at a time; concurrent refreshes share its result.
/// After a failure, the provider is not asked again about that identity for ``failureBackoff`` (per process).
final class ValidationFlights: Sendable {
    static let failureBackoff: TimeInterval = 3600
    private let flights = Mutex<[String: Task<ProviderValidation, Never>]>([:])
    private let failures = Mutex<[String: (at: Date, reason: String)]>([:])
    /// Grants (or their absence) seen validated recently, until their next validation is due. Never too long: a
    /// grant only becomes due later than it was (validated, postponed, replaced by a newer one) or goes away.
    private let notDue = Mutex<[RememberedIdentity: Date]>([:])

    func isNotDue(_ key: String, now: Date) -> Bool {
        let key = RememberedIdentity(key)
        return notDue.withLock { notDue in notDue[key].map { now < $0 } ?? false }
    }

    func remember(_ key: String, notDueUntil: Date, now: Date) {
        let key = RememberedIdentity(key)
        notDue.withLock { notDue in
            if notDue.count >= Self.remembered {
                notDue = notDue.filter { now < $0.value }
                if notDue.count > Self.remembered / 2 { notDue = [:] }
            }
            notDue[key] = notDueUntil
        }
    }

    var rememberedCount: Int { notDue.withLock { $0.count } }

    /// At most this many grants are remembered as not due (about 50 bytes each).
    static let remembered = 20_000

    /// The answer of the flight for `key`, started with `work` unless one is under way; nil when `waitingAtMost` passed
    /// first (the flight goes on, and is shared by whoever asks next).
    func run(_ key: String, waitingAtMost wait: Duration? = nil, _ work: @escaping @Sendable () async -> ProviderValidation) async -> ProviderValidation? {
        let (task, isNew) = flights.withLock { flights in
            if let existing = flights[key] { return (existing, false) }
            let task = Task { await work() }
            flights[key] = task
            return (task, true)
        }
        if isNew {
            // The flight leaves the table when it ends, whether or not anyone still waits for it.
            Task {
                _ = await task.value
                self.flights.withLock { if $0[key] == task { $0[key] = nil } }
            }
        }
        guard let wait else { return await task.value }
        // Not a task group: it would wait for its child, and a child awaiting the flight cannot be cancelled.
        return await withCheckedContinuation { continuation in
            let first = FirstAnswer(continuation)
            Task { first.resume(await task.value) }
            Task {
                try? await Task.sleep(for: wait)
                first.resume(nil)
            }
        }
    }

    func recentFailure(_ key: String, now: Date) -> String? {
        failures.withLock { failures in
            guard let failure = failures[key] else { return nil }
            if now.timeIntervalSince(failure.at) < Self.failureBackoff { return failure.reason }
            failures[key] = nil
            return nil
        }
    }

    func recordFailure(_ key: String, reason: String, at: Date) {
        failures.withLock { failures in
            if failures.count > 10_000 { failures = failures.filter { at.timeIntervalSince($0.value.at) < Self.failureBackoff } }
            failures[key] = (at, reason)
        }
    }
}

/// A remembered grant's identity: 16 bytes in the table when its id is a lowercase 8-4-4-4-12 hex identifier, as
/// ``newIdentifier()`` writes them (one text per value, so no two ids share a key), else the id's text. A 36-byte
/// string is a heap allocation of 80 bytes besides its place in the table.
enum RememberedIdentity: Hashable {
    case hex(UInt64, UInt64)
    case text(String)

    init(_ id: String) {
        var id = id
        self = id.withUTF8 { Self.hex($0) } ?? .text(id)
    }

    private static func hex(_ bytes: UnsafeBufferPointer<UInt8>) -> RememberedIdentity? {
        guard bytes.count == 36 else { return nil }
        var (high, low, digits): (UInt64, UInt64, Int) = (0, 0, 0)
        for (index, byte) in bytes.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return nil }
                continue
            }
            let value: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            if digits < 16 { high = high << 4 | UInt64(value) } else { low = low << 4 | UInt64(value) }
            digits += 1
        }
        return .hex(high, low)
    }
}

/// Resumes a continuation with the first of several answers.
private final class FirstAnswer: Sendable {
    private let continuation: CheckedContinuation<ProviderValidation?, Never>
    private let answered = Atomic(false)

    init(_ continuation: CheckedContinuation<ProviderValidation?, Never>) { self.continuation = continuation }

    func resume(_ answer: ProviderValidation?) {
        guard answered.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        continuation.resume(returning: answer)
    }
}
