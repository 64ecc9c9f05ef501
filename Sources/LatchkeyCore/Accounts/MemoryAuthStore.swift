public import Foundation
public import LatchkeyModels

/// An ``AuthStore`` in memory, for tests and the demo. Loses everything when the process ends.
public actor MemoryAuthStore: AuthStore, SignInStepParts {
    private var usersByID: [String: UserAccount] = [:]
    private var identitiesByID: [String: LinkedIdentity] = [:]
    private var grants: [String: ProviderGrant] = [:]
    private var validationClaims: [String: Date] = [:]
    private var families: [String: SessionFamily] = [:]
    private var tokens: [String: RefreshTokenRecord] = [:]
    private var keys: [String: SigningKeyRecord] = [:]
    private var notifications: Set<String> = []
    /// Each used identity token's expiry and subject, by its key.
    private var signInTokens: [String: (expiresAt: Date, subject: String)] = [:]
    private var lastSweep: Date?
    private var outbox: [String: OutboxItem] = [:]
    private var events: [AuditEvent] = []
    private var invitesByID: [String: Invite] = [:]
    private var oneTimeRecords: [String: OneTimeRecord] = [:]
    private var webhookDeliveriesByID: [String: WebhookDelivery] = [:]
    private var adminKeysByName: [String: AdminKey] = [:]

    public init() {}

    public func migrate() async throws {}
    public func ping() async throws {}

    public func identity(provider: String, subject: String) -> LinkedIdentity? {
        identitiesByID.values.first { $0.provider == provider && $0.subject == subject }
    }

    public func createUser(_ user: UserAccount, identity: LinkedIdentity) throws {
        guard self.identity(provider: identity.provider, subject: identity.subject) == nil, usersByID[user.id] == nil, identitiesByID[identity.id] == nil
        else { throw AuthStoreError.duplicate }
        usersByID[user.id] = user
        identitiesByID[identity.id] = identity
    }

    package func account(provider: String, subject: String) -> StoredAccount? {
        guard let identity = identity(provider: provider, subject: subject), let user = usersByID[identity.userID] else { return nil }
        return StoredAccount(identity: identity, user: user, identities: identities(userID: user.id))
    }

    package func recordSignIn(_ record: SignInRecord) throws {
        try atomically { try write(record) }
    }

    /// Runs `body`, leaving everything as it was when it throws (as a transaction rolled back does).
    private func atomically<T>(_ body: () throws -> T) throws -> T {
        let saved = (usersByID, identitiesByID, grants, validationClaims, families, tokens, signInTokens, events, invitesByID, webhookDeliveriesByID)
        do { return try body() } catch {
            (usersByID, identitiesByID, grants, validationClaims, families, tokens, signInTokens, events, invitesByID, webhookDeliveriesByID) = saved
            throw error
        }
    }

    private func write(_ record: SignInRecord) throws {
        switch record.account {
        case .create(let user, let identity): try createUser(user, identity: identity)
        case .update(let user, let identity):
            if var user, let stored = usersByID[user.id] {
                user.claims = stored.claims  // only setUserClaims changes them
                usersByID[user.id] = user
            }
            try updateIdentity(identity, notifying: [])
        }
        if let grant = record.grant { try saveProviderGrant(grant) }
        if let session = record.session { try createSession(session.family, firstToken: session.firstToken) }
        events += record.audits
        try enqueueWebhookDeliveries(record.notices)
    }

    public func signIn(_ plan: SignInPlan) throws -> SignInStepResult {
        try atomically {
            if let claim = plan.claim,
                !recordSignInToken(provider: claim.provider, subject: claim.subject, tokenHash: claim.tokenHash, expiresAt: claim.expiresAt)
            {
                return .tokenUsed
            }
            // The actor runs this whole method at once: nothing can link the identity between the look-up and the write.
            let found = account(provider: plan.provider, subject: plan.subject)
            guard let record = plan.record(for: found) else { return .declined }
            if let invite = plan.inviteRedemption(for: record), !redeemInvite(codeHash: invite.codeHash, at: invite.at) { return .declined }
            try write(record)
            return .recorded(found)
        }
    }

    public func updateIdentity(_ identity: LinkedIdentity, notifying notices: [WebhookDelivery]) throws {
        guard var stored = identitiesByID[identity.id] else { return }
        try enqueueWebhookDeliveries(notices)
        stored.email = identity.email
        stored.emailVerified = identity.emailVerified
        stored.givenName = identity.givenName
        stored.familyName = identity.familyName
        stored.claims = identity.claims
        stored.lastSignInAt = identity.lastSignInAt
        identitiesByID[identity.id] = stored
    }

    public func addIdentity(_ identity: LinkedIdentity, notifying notices: [WebhookDelivery]) throws {
        guard usersByID[identity.userID] != nil else { throw AuthStoreError.notFound }
        guard self.identity(provider: identity.provider, subject: identity.subject) == nil, identitiesByID[identity.id] == nil else {
            throw AuthStoreError.duplicate
        }
        try enqueueWebhookDeliveries(notices)
        identitiesByID[identity.id] = identity
    }

    public func unlinkIdentity(id: String, userID: String, reason: String, at: Date, notifying notices: [WebhookDelivery]) throws -> IdentityUnlink {
        guard let identity = identitiesByID[id], identity.userID == userID else { return .notFound }
        guard identities(userID: userID).count > 1 else { return .lastIdentity }
        try enqueueWebhookDeliveries(notices)
        let grant = grants[id]
        _ = revokeSessions(identityID: id, reason: reason, at: at)
        identitiesByID[id] = nil
        grants[id] = nil
        return .unlinked(grant)
    }

    public func removeIdentity(
        id: String, userID: String, reason: String, at: Date, deletingUserIfLast: Bool, notifying notices: [WebhookDelivery],
        userNotices: [WebhookDelivery]
    ) throws -> IdentityRemoval {
        guard let identity = identitiesByID[id], identity.userID == userID else {
            return IdentityRemoval(removed: false, sessionsRevoked: 0, userDeleted: false)
        }
        try enqueueWebhookDeliveries(notices)
        let revoked = revokeSessions(identityID: id, reason: reason, at: at)
        identitiesByID[id] = nil
        grants[id] = nil
        guard deletingUserIfLast, identities(userID: userID).isEmpty else {
            return IdentityRemoval(removed: true, sessionsRevoked: revoked, userDeleted: false)
        }
        try deleteUser(id: userID, notifying: userNotices)
        return IdentityRemoval(removed: true, sessionsRevoked: revoked, userDeleted: true)
    }

    public func deleteIdentity(id: String, notifying notices: [WebhookDelivery]) throws {
        guard identitiesByID[id] != nil else { return }
        try enqueueWebhookDeliveries(notices)
        identitiesByID[id] = nil
        grants[id] = nil
    }
    public func user(id: String) -> UserAccount? { usersByID[id] }
    public func identities(userID: String) -> [LinkedIdentity] {
        identitiesByID.values.filter { $0.userID == userID }.sorted { $0.firstSeenAt < $1.firstSeenAt }
    }
    public func users(limit: Int) -> [UserAccount] { Array(usersByID.values.sorted { $0.createdAt < $1.createdAt }.prefix(limit)) }

    public func deleteUser(id: String, notifying notices: [WebhookDelivery]) throws {
        guard usersByID[id] != nil else { return }
        try enqueueWebhookDeliveries(notices)
        let identityIDs = identitiesByID.values.filter { $0.userID == id }.map(\.id)
        for identityID in identityIDs {
            identitiesByID[identityID] = nil
            grants[identityID] = nil
        }
        let familyIDs = families.values.filter { $0.userID == id }.map(\.id)
        for familyID in familyIDs { families[familyID] = nil }
        tokens = tokens.filter { !familyIDs.contains($0.value.familyID) }
        usersByID[id] = nil
    }

    public func providerGrant(identityID: String) -> ProviderGrant? { grants[identityID] }
    public func saveProviderGrant(_ grant: ProviderGrant) throws {
        guard identitiesByID[grant.identityID] != nil else { throw AuthStoreError.notFound }
        grants[grant.identityID] = grant
        validationClaims[grant.identityID] = nil
    }

    public func markProviderGrantValidated(identityID: String, sealedRefreshToken: String, at: Date, replacingWith newSealedRefreshToken: String?) -> Bool {
        guard grants[identityID]?.sealedRefreshToken == sealedRefreshToken else { return false }
        grants[identityID]?.lastValidatedAt = at
        if let newSealedRefreshToken { grants[identityID]?.sealedRefreshToken = newSealedRefreshToken }
        validationClaims[identityID] = nil
        return true
    }

    public func claimProviderValidation(identityID: String, sealedRefreshToken: String, dueBefore: Date, now: Date, until: Date) -> Bool {
        guard let grant = grants[identityID], grant.sealedRefreshToken == sealedRefreshToken, grant.lastValidatedAt <= dueBefore,
            (validationClaims[identityID] ?? .distantPast) <= now
        else { return false }
        validationClaims[identityID] = until
        return true
    }

    public func postponeProviderValidation(identityID: String, until: Date) {
        guard grants[identityID] != nil else { return }
        validationClaims[identityID] = until
    }

    public func deleteProviderGrant(identityID: String, sealedRefreshToken: String, notifying notices: [WebhookDelivery]) throws -> Bool {
        guard grants[identityID]?.sealedRefreshToken == sealedRefreshToken else { return false }
        try enqueueWebhookDeliveries(notices)
        grants[identityID] = nil
        return true
    }

    public func createSession(_ family: SessionFamily, firstToken: RefreshTokenRecord) throws {
        guard families[family.id] == nil, tokens[firstToken.hash] == nil else { throw AuthStoreError.duplicate }
        guard usersByID[family.userID] != nil else { throw AuthStoreError.notFound }
        var family = family
        family.userClaims = nil  // kept with the user
        families[family.id] = family
        tokens[firstToken.hash] = firstToken
    }

    public func refreshToken(hash: String) -> (RefreshTokenRecord, SessionFamily)? {
        guard let record = tokens[hash], let family = families[record.familyID] else { return nil }
        return (record, family)
    }

    public func rotate(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval, accepting: (@Sendable (SessionFamily) -> Bool)?,
        onReuse: (@Sendable (SessionFamily) -> [WebhookDelivery])?
    ) throws -> RotationResult {
        var (tokens, families) = (self.tokens, self.families)
        let result = RotationRule.apply(
            presentedHash: presentedHash, successor: successor, now: now, graceWindow: graceWindow, tokens: &tokens, families: &families,
            accepting: accepting)
        // A successor must be new: one that names a stored token changes nothing.
        if case .rotated = result, self.tokens[successor.hash] != nil { throw AuthStoreError.duplicate }
        if case .reuseDetected(let family) = result, let onReuse { try enqueueWebhookDeliveries(onReuse(family)) }
        (self.tokens, self.families) = (tokens, families)
        // Read with the session, as the SQL store does, for the access token a rotation mints.
        switch result {
        case .rotated(var family):
            family.userClaims = usersByID[family.userID]?.claims
            return .rotated(family)
        case .retried(var family):
            family.userClaims = usersByID[family.userID]?.claims
            return .retried(family)
        default:
            return result
        }
    }

    public func session(id: String) -> SessionFamily? { families[id] }
    public func sessions(userID: String) -> [SessionFamily] { families.values.filter { $0.userID == userID }.sorted { $0.createdAt < $1.createdAt } }

    public func revokeSession(id: String, reason: String, at: Date) -> Bool {
        guard var family = families[id], !family.isRevoked else { return false }
        family.revokedAt = at
        family.revocationReason = reason
        families[id] = family
        return true
    }

    public func revokeSessions(userID: String, reason: String, at: Date) -> Int {
        families.values.filter { $0.userID == userID }.reduce(0) { count, family in count + (revokeSession(id: family.id, reason: reason, at: at) ? 1 : 0) }
    }

    public func revokeSessions(identityID: String, createdBefore: Date, reason: String, at: Date) -> Int {
        guard identitiesByID[identityID] != nil else { return 0 }
        return families.values.filter { $0.identityID == identityID && $0.createdAt < createdBefore }.reduce(0) { count, family in
            count + (revokeSession(id: family.id, reason: reason, at: at) ? 1 : 0)
        }
    }

    public func revokeSessions(identityID: String, reason: String, at: Date) -> Int {
        guard identitiesByID[identityID] != nil else { return 0 }
        return families.values.filter { $0.identityID == identityID }.reduce(0) { count, family in
            count + (revokeSession(id: family.id, reason: reason, at: at) ? 1 : 0)
        }
    }

    public func signingKeys() -> [SigningKeyRecord] { keys.values.sorted { $0.createdAt < $1.createdAt } }
    public func saveSigningKey(_ key: SigningKeyRecord) {
        guard var stored = keys[key.keyID] else {
            keys[key.keyID] = key
            return
        }
        stored.state = key.state
        stored.retireAfter = key.retireAfter
        keys[key.keyID] = stored
    }
    public func saveFirstSigningKey(_ key: SigningKeyRecord) throws -> Bool {
        guard !keys.values.contains(where: { $0.state == .active }) else { return false }
        guard keys[key.keyID] == nil else { throw AuthStoreError.duplicate }
        keys[key.keyID] = key
        return true
    }

    public func recordNotification(id: String, type: String, at: Date) -> Bool { notifications.insert(id).inserted }
    public func hasProcessedNotification(id: String) -> Bool { notifications.contains(id) }

    public func recordSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) -> Bool {
        let key = Self.signInTokenKey(provider, tokenHash, expiresAt)
        guard signInTokens[key] == nil else { return false }
        signInTokens[key] = (expiresAt, subject)
        return true
    }

    public func deleteSignInToken(provider: String, subject: String, tokenHash: String, expiresAt: Date) {
        let key = Self.signInTokenKey(provider, tokenHash, expiresAt)
        guard signInTokens[key]?.subject == subject else { return }
        signInTokens[key] = nil
    }

    /// What names a record, as the SQL stores' key does (which keeps the expiry to the millisecond).
    private static func signInTokenKey(_ provider: String, _ tokenHash: String, _ expiresAt: Date) -> String {
        [provider, tokenHash, String(expiresAt.millis)].joined(separator: "\u{0}")
    }

    public func enqueue(_ item: OutboxItem) throws {
        guard outbox[item.id] == nil else { throw AuthStoreError.duplicate }
        outbox[item.id] = item
    }
    public func claimDueOutboxItems(now: Date, limit: Int, leaseUntil: Date) -> [OutboxItem] {
        let due = outbox.values.filter { $0.completedAt == nil && $0.nextAttemptAt <= now }.sorted { $0.nextAttemptAt < $1.nextAttemptAt }.prefix(limit)
        return due.map { item in
            var claimed = item
            claimed.nextAttemptAt = leaseUntil
            outbox[item.id] = claimed
            return claimed
        }
    }
    public func updateOutboxItem(_ item: OutboxItem) {
        guard var stored = outbox[item.id], stored.completedAt == nil else { return }
        stored.attempts = item.attempts
        stored.nextAttemptAt = item.nextAttemptAt
        stored.lastError = item.lastError
        stored.completedAt = item.completedAt
        outbox[item.id] = stored
    }

    public func createInvite(_ invite: Invite) throws {
        guard invitesByID[invite.id] == nil, !invitesByID.values.contains(where: { $0.codeHash == invite.codeHash }) else { throw AuthStoreError.duplicate }
        invitesByID[invite.id] = invite
    }
    public func invites() -> [Invite] { invitesByID.values.sorted { $0.createdAt < $1.createdAt } }
    public func revokeInvite(id: String, at: Date) -> Bool {
        guard let invite = invitesByID[id] else { return false }
        if invite.revokedAt == nil { invitesByID[id]?.revokedAt = at }
        return true
    }
    package func redeemInvite(codeHash: String, at now: Date) -> Bool {
        guard let invite = invitesByID.values.first(where: { $0.codeHash == codeHash }), invite.isUsable(at: now) else { return false }
        invitesByID[invite.id]?.uses += 1
        return true
    }
    public func saveOneTimeRecord(_ record: OneTimeRecord) throws {
        let key = record.kind + ":" + record.keyHash
        guard oneTimeRecords[key] == nil else { throw AuthStoreError.duplicate }
        oneTimeRecords[key] = record
    }
    public func useOneTimeRecord(kind: String, keyHash: String, at: Date) -> OneTimeRecord? {
        let key = kind + ":" + keyHash
        guard let record = oneTimeRecords[key] else { return nil }
        if record.usedAt == nil { oneTimeRecords[key]?.usedAt = at }
        return record
    }
    public func outboxItems() -> [OutboxItem] { outbox.values.sorted { $0.createdAt < $1.createdAt } }

    public func audit(_ event: AuditEvent) throws {
        guard !events.contains(where: { $0.id == event.id }) else { throw AuthStoreError.duplicate }
        events.append(event)
    }
    public func auditEvents(userID: String?, limit: Int) -> [AuditEvent] {
        let matching = events.enumerated().filter { userID == nil || $0.element.userID == userID }
        return matching.sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.suffix(limit).map(\.element)
    }

    public func sweep(now: Date, unlessSweptWithin interval: TimeInterval) -> Int? {
        if interval > 0 {
            if let last = lastSweep, abs(now.timeIntervalSince(last)) < interval { return nil }
            lastSweep = now
        }
        let before = tokens.count + families.count + signInTokens.count
        signInTokens = signInTokens.filter { $0.value.expiresAt > now }
        let oneTimeBefore = oneTimeRecords.count
        oneTimeRecords = oneTimeRecords.filter { now.timeIntervalSince($0.value.expiresAt) < 86_400 }
        tokens = tokens.filter { $0.value.idleExpiresAt > now || ($0.value.rotatedAt.map { now.timeIntervalSince($0) < 86_400 } ?? false) }
        let dead = families.values.filter { family in
            (family.revokedAt.map { now.timeIntervalSince($0) >= 30 * 86_400 } ?? false) || now.timeIntervalSince(family.absoluteExpiresAt) >= 30 * 86_400
        }.map(\.id)
        for id in dead { families[id] = nil }
        tokens = tokens.filter { !dead.contains($0.value.familyID) }
        for (id, item) in outbox where item.completedAt != nil && !item.sealedPayload.isEmpty { outbox[id]?.sealedPayload = "" }
        webhookDeliveriesByID = webhookDeliveriesByID.filter { _, delivery in
            guard let finished = delivery.finishedAt else { return true }
            let retention = delivery.status == .failed ? WebhookDelivery.failedRetention : WebhookDelivery.deliveredRetention
            return now.timeIntervalSince(finished) < retention
        }
        return before - tokens.count - families.count - signInTokens.count + oneTimeBefore - oneTimeRecords.count
    }

    // MARK: Webhook deliveries

    public func enqueueWebhookDeliveries(_ deliveries: [WebhookDelivery]) throws {
        guard !deliveries.isEmpty else { return }
        let ids = deliveries.map(\.id)
        guard Set(ids).count == ids.count, !ids.contains(where: { webhookDeliveriesByID[$0] != nil }) else { throw AuthStoreError.duplicate }
        for delivery in deliveries { webhookDeliveriesByID[delivery.id] = delivery }
    }

    public func claimDueWebhookDeliveries(now: Date, limit: Int, leaseUntil: Date, endpoints: [String]) -> [WebhookDelivery] {
        let due = webhookDeliveriesByID.values.filter { $0.status == .pending && $0.nextAttemptAt <= now && endpoints.contains($0.endpoint) }
            .sorted { ($0.nextAttemptAt, $0.id) < ($1.nextAttemptAt, $1.id) }.prefix(max(0, limit))
        return due.map { delivery in
            webhookDeliveriesByID[delivery.id]?.nextAttemptAt = leaseUntil
            return delivery
        }
    }

    public func updateWebhookDelivery(_ delivery: WebhookDelivery) {
        guard var stored = webhookDeliveriesByID[delivery.id], stored.status == .pending else { return }
        stored.status = delivery.status
        stored.attempts = delivery.attempts
        stored.nextAttemptAt = delivery.nextAttemptAt
        stored.lastError = delivery.lastError
        stored.finishedAt = delivery.finishedAt
        webhookDeliveriesByID[delivery.id] = stored
    }

    public func webhookDeliveries(status: WebhookDelivery.Status?, limit: Int) -> [WebhookDelivery] {
        Array(
            webhookDeliveriesByID.values.filter { status == nil || $0.status == status }.sorted { ($0.createdAt, $0.id) > ($1.createdAt, $1.id) }
                .prefix(max(0, limit)))
    }

    public func webhookDeliveryCounts() -> [WebhookDeliveryCount] {
        let grouped = Dictionary(grouping: webhookDeliveriesByID.values) { "\($0.endpoint)\u{0}\($0.status.rawValue)" }
        return grouped.values.compactMap { group in group.first.map { WebhookDeliveryCount(endpoint: $0.endpoint, status: $0.status, count: group.count) } }
            .sorted { ($0.endpoint, $0.status.rawValue) < ($1.endpoint, $1.status.rawValue) }
    }

    public func retryWebhookDelivery(id: String, at: Date) -> Bool {
        guard var delivery = webhookDeliveriesByID[id], delivery.status == .failed else { return false }
        (delivery.status, delivery.attempts, delivery.nextAttemptAt, delivery.finishedAt) = (.pending, 0, at, nil)
        webhookDeliveriesByID[id] = delivery
        return true
    }

    // MARK: Administration

    public func searchUsers(_ search: UserSearch) -> [UserAccount] {
        // As the SQL store finds them: the e-mail as given, or in lower case.
        let spellings = Set([search.email, search.email?.lowercased()].compactMap { $0 })
        return Array(
            usersByID.values.filter { user in
                if let cursor = search.cursor, user.id <= cursor { return false }
                if let after = search.createdAfter, user.createdAt <= after { return false }
                let identities = identities(userID: user.id)
                if !spellings.isEmpty, !spellings.contains(user.email ?? ""), !identities.contains(where: { spellings.contains($0.email ?? "") }) {
                    return false
                }
                if search.provider != nil || search.subject != nil,
                    !identities.contains(where: { identity in
                        (search.provider.map { identity.provider == $0 } ?? true) && (search.subject.map { identity.subject == $0 } ?? true)
                    })
                {
                    return false
                }
                return true
            }
            .sorted { $0.id < $1.id }.prefix(max(0, search.limit)))
    }

    public func auditEvents(_ search: AuditSearch) -> [AuditEvent] {
        Array(
            events.filter { event in
                (search.cursor.map { event.id < $0 } ?? true) && (search.userID.map { event.userID == $0 } ?? true)
                    && (search.kind.map { event.kind == $0 } ?? true) && (search.since.map { event.at >= $0 } ?? true)
            }
            .sorted { $0.id > $1.id }.prefix(max(0, search.limit)))
    }

    public func setUserClaims(userID: String, claims: [String: JSONValue]?) -> Bool {
        guard usersByID[userID] != nil else { return false }
        usersByID[userID]?.claims = claims?.isEmpty == false ? claims : nil
        return true
    }

    public func createAdminKey(_ key: AdminKey) throws {
        guard adminKeysByName[key.name] == nil, !adminKeysByName.values.contains(where: { $0.keyHash == key.keyHash }) else {
            throw AuthStoreError.duplicate
        }
        adminKeysByName[key.name] = key
    }

    public func adminKeys() -> [AdminKey] { adminKeysByName.values.sorted { ($0.createdAt, $0.name) < ($1.createdAt, $1.name) } }
    public func adminKey(hash: String) -> AdminKey? { adminKeysByName.values.first { $0.keyHash == hash } }

    public func revokeAdminKey(name: String, at: Date) -> Bool {
        guard let key = adminKeysByName[name] else { return false }
        if key.revokedAt == nil { adminKeysByName[name]?.revokedAt = at }
        return true
    }
}
