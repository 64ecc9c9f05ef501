import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyStore
import LatchkeyTestSupport
import Testing

/// One suite, both databases: SQLite always, PostgreSQL when LATCHKEY_TEST_DATABASE_URL is set.
@Suite("Store conformance", .serialized)
struct StoreConformanceTests {
    /// Keeps values unique across runs against a persistent PostgreSQL.
    let run = String(UUID().uuidString.prefix(8))
    /// When the identity tokens of a test were checked (and expire).
    let tokenTime = Date().addingTimeInterval(300)

    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, postgres
        var testDescription: String { rawValue }
    }

    static var kinds: [Kind] {
        ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] == nil ? [.sqlite] : [.sqlite, .postgres]
    }

    /// Runs `body` against a fresh, migrated store of `kind`.
    func withStore(_ kind: Kind, _ body: (any SignInStepParts) async throws -> Void) async throws {
        switch kind {
        case .sqlite:
            try await withTemporaryStore { try await body($0) }
        case .postgres:
            try await withSQLStore(.postgres(url: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"]!), body)
        }
    }

    func withSQLStore(_ location: StoreLocation, _ body: (any SignInStepParts) async throws -> Void) async throws {
        let store = try await SQLAuthStore.open(location)
        try await store.migrate()
        do { try await body(store) } catch {
            await store.close()
            throw error
        }
        await store.close()
    }

    static let now = Date(timeIntervalSince1970: 1_767_225_600)

    func makeUser(_ store: any AuthStore, subject: String = "000123.\(UUID().uuidString).0456") async throws -> (UserAccount, LinkedIdentity) {
        let user = UserAccount(id: newIdentifier(), createdAt: Self.now, email: "a@example.com", emailVerified: true, givenName: "Ann")
        let identity = LinkedIdentity(
            id: newIdentifier(), userID: user.id, provider: "apple", subject: subject, email: "a@example.com", isPrivateEmail: false, realUserStatus: 2,
            firstSeenAt: Self.now, lastSignInAt: Self.now)
        try await store.createUser(user, identity: identity)
        return (user, identity)
    }

    func makeSession(_ store: any AuthStore, user: UserAccount, identity: LinkedIdentity, hash: String = newIdentifier()) async throws -> SessionFamily {
        let family = SessionFamily(
            id: newIdentifier(), userID: user.id, identityID: identity.id, clientID: "com.example.app", createdAt: Self.now, lastUsedAt: Self.now,
            absoluteExpiresAt: Self.now.addingTimeInterval(86_400 * 90))
        try await store.createSession(
            family,
            firstToken: RefreshTokenRecord(
                hash: hash, familyID: family.id, parentHash: nil, createdAt: Self.now, idleExpiresAt: Self.now.addingTimeInterval(86_400 * 30)))
        return family
    }

    func successor(_ family: SessionFamily, parent: String, hash: String = newIdentifier()) -> RefreshTokenRecord {
        RefreshTokenRecord(hash: hash, familyID: family.id, parentHash: parent, createdAt: Self.now, idleExpiresAt: Self.now.addingTimeInterval(86_400 * 30))
    }

    @Test("users and identities round-trip; an identity cannot be created twice", arguments: kinds)
    func users(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store, subject: "\(run)-sub-1")
            #expect(try await store.user(id: user.id) == user)
            let found = try #require(try await store.identity(provider: "apple", subject: "\(run)-sub-1"))
            #expect(found.id == identity.id)
            #expect(found.realUserStatus == 2)
            #expect(found.isPrivateEmail == false)
            #expect(found.emailVerified == nil)
            await #expect(throws: AuthStoreError.duplicate) { _ = try await makeUser(store, subject: "\(run)-sub-1") }
            var changed = found
            changed.emailForwardingEnabled = false
            try await store.updateIdentity(changed)
            #expect(try await store.identities(userID: user.id).first?.emailForwardingEnabled == false)
            #expect(try await store.users(limit: 100_000).map(\.id).contains(user.id))
        }
    }

    @Test("guests, fixed-window counters, imported users, disabling and app-transfer records behave alike on each database", arguments: kinds)
    func guestsImportsAndTransfers(kind: Kind) async throws {
        try await withStore(kind) { store in
            let now = Date()
            // Counters: one window counts up, the next starts again; keys count apart.
            let key = "\(run)-anonymous|203.0.113.9"
            let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / 3600).rounded(.down) * 3600)
            #expect(try await store.countEvent(key: key, window: 3600, at: start) == 1)
            #expect(try await store.countEvent(key: key, window: 3600, at: start.addingTimeInterval(10)) == 2)
            #expect(try await store.countEvent(key: key + "x", window: 3600, at: start) == 1)
            #expect(try await store.countEvent(key: key, window: 3600, at: start.addingTimeInterval(3600)) == 1)

            // A guest, an imported user with an Apple identity, disabled.
            let guest = UserAccount(id: "\(run)-guest", createdAt: now.addingTimeInterval(-10 * 86_400), isAnonymous: true)
            let imported = UserAccount(
                id: "\(run)-imported", createdAt: now, claims: ["plan": .string("pro")], disabledAt: now,
                importedFrom: ImportOrigin(source: "auth0", id: "auth0|\(run)", at: now))
            let apple = LinkedIdentity(
                id: "\(run)-apple", userID: imported.id, provider: "apple", subject: "\(run)-old", firstSeenAt: now, lastSignInAt: now)
            try await store.write { tx in
                try await tx.insertAccounts([NewAccount(user: guest, identities: []), NewAccount(user: imported, identities: [apple])])
                #expect(try await tx.importedUserIDs(source: "auth0", sourceIDs: ["auth0|\(run)", "other"]) == ["auth0|\(run)": imported.id])
                #expect(try await tx.existingUserIDs([guest.id, "\(run)-nobody"]) == [guest.id])
                #expect(try await tx.identityOwners([ProviderAccountKey(provider: "apple", subject: "\(run)-old")]).values.first == imported.id)
            }
            let read = try #require(try await store.user(id: imported.id))
            #expect(
                read.importedFrom?.source == "auth0" && read.importedFrom?.id == "auth0|\(run)" && read.disabledAt != nil && read.claims == imported.claims
                    && !read.isAnonymous)
            #expect(try await store.user(id: guest.id)?.isAnonymous == true)
            #expect(try await store.idleAnonymousUsers(before: now.addingTimeInterval(-86_400), limit: 10).contains(guest.id))
            #expect(try await store.write { tx in try await tx.setUserDisabled(userID: imported.id, at: nil) })
            #expect(try await store.user(id: imported.id)?.disabledAt == nil)
            #expect(try await store.write { tx in try await tx.clearAnonymous(userID: guest.id) })
            #expect(try await store.user(id: guest.id)?.isAnonymous == false)
            #expect(try await store.write { tx in try await tx.clearAnonymous(userID: guest.id) } == false)

            // A transfer record: prepared, found by its transfer_sub, moved once.
            #expect(try await store.appleIdentitiesToPrepare(targetTeam: "RECIPIENT1", after: nil, limit: 100_000).contains { $0.id == apple.id })
            try await store.saveAppleTransfer(
                AppleTransferRecord(identityID: apple.id, oldSubject: apple.subject, transferSubject: "\(run)-t", targetTeam: "RECIPIENT1", preparedAt: now))
            #expect(try await store.appleIdentitiesToPrepare(targetTeam: "RECIPIENT1", after: nil, limit: 100_000).contains { $0.id == apple.id } == false)
            #expect(try await store.appleTransfer(transferSubject: "\(run)-t")?.identityID == apple.id)
            var movedIdentity = apple
            movedIdentity.subject = "\(run)-new"
            let moved = movedIdentity
            #expect(try await store.write { tx in try await tx.moveTransferredIdentity(moved, at: now) })
            #expect(try await store.write { tx in try await tx.moveTransferredIdentity(moved, at: now) } == false)
            #expect(try await store.identity(provider: "apple", subject: "\(run)-new")?.id == apple.id)
            #expect(try await store.appleTransfer(identityID: apple.id)?.newSubject == "\(run)-new")
        }
    }

    @Test("rotation: rotated, retried within grace, reuse after it revokes the family", arguments: kinds)
    func rotation(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-h0")
            let next = successor(family, parent: "\(run)-h0", hash: "\(run)-h1")
            guard case .rotated = try await store.rotate(presentedHash: "\(run)-h0", successor: next, now: Self.now, graceWindow: 10) else {
                Issue.record("not rotated"); return
            }
            guard case .retried = try await store.rotate(presentedHash: "\(run)-h0", successor: next, now: Self.now.addingTimeInterval(5), graceWindow: 10)
            else { Issue.record("not retried"); return }
            guard
                case .reuseDetected = try await store.rotate(presentedHash: "\(run)-h0", successor: next, now: Self.now.addingTimeInterval(11), graceWindow: 10)
            else { Issue.record("no reuse"); return }
            guard
                case .revoked = try await store.rotate(
                    presentedHash: "\(run)-h1", successor: successor(family, parent: "\(run)-h1"), now: Self.now.addingTimeInterval(12), graceWindow: 10)
            else { Issue.record("successor survived"); return }
            #expect(try await store.session(id: family.id)?.revocationReason == "refresh_token_reuse")
            #expect(try await store.rotate(presentedHash: "nope", successor: next, now: Self.now, graceWindow: 10) == .unknown)
        }
    }

    @Test("a different successor within the grace window is reuse, not a retry", arguments: kinds)
    func retryMustMatch(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-a0")
            _ = try await store.rotate(
                presentedHash: "\(run)-a0", successor: successor(family, parent: "\(run)-a0", hash: "\(run)-a1"), now: Self.now, graceWindow: 10)
            guard
                case .reuseDetected = try await store.rotate(
                    presentedHash: "\(run)-a0", successor: successor(family, parent: "\(run)-a0", hash: "\(run)-a2"), now: Self.now, graceWindow: 10)
            else {
                Issue.record("accepted another successor"); return
            }
        }
    }

    @Test("a retry after the successor was itself used is reuse", arguments: kinds)
    func retryAfterSuccessorUsed(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-s0")
            let first = successor(family, parent: "\(run)-s0", hash: "\(run)-s1")
            _ = try await store.rotate(presentedHash: "\(run)-s0", successor: first, now: Self.now, graceWindow: 10)
            _ = try await store.rotate(
                presentedHash: "\(run)-s1", successor: successor(family, parent: "\(run)-s1", hash: "\(run)-s2"), now: Self.now, graceWindow: 10)
            guard
                case .reuseDetected = try await store.rotate(presentedHash: "\(run)-s0", successor: first, now: Self.now.addingTimeInterval(1), graceWindow: 10)
            else {
                Issue.record("a spent successor was handed out again"); return
            }
        }
    }

    @Test("a retry within the grace window of a session or successor that has expired meanwhile is expired, not retried", arguments: kinds)
    func retryAfterExpiry(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-x0")
            let next = successor(family, parent: "\(run)-x0", hash: "\(run)-x1")  // idle for 30 days; the session lasts 90
            _ = try await store.rotate(presentedHash: "\(run)-x0", successor: next, now: Self.now, graceWindow: 10)
            let day = 86_400.0
            for (after, grace) in [(31 * day, 32 * day), (91 * day, 92 * day)] {
                #expect(
                    try await store.rotate(presentedHash: "\(run)-x0", successor: next, now: Self.now.addingTimeInterval(after), graceWindow: grace) == .expired
                )
            }
            #expect(try await store.session(id: family.id)?.isRevoked == false)
        }
    }

    @Test("expired tokens and sessions do not rotate", arguments: kinds)
    func expiry(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-e0")
            #expect(
                try await store.rotate(
                    presentedHash: "\(run)-e0", successor: successor(family, parent: "\(run)-e0"), now: Self.now.addingTimeInterval(86_400 * 31),
                    graceWindow: 10) == .expired)
        }
    }

    @Test("concurrent rotations of one token yield exactly one successor", arguments: kinds)
    func concurrentRotation(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-c0")
            let next = successor(family, parent: "\(run)-c0", hash: "\(run)-c1")
            let results = try await withThrowingTaskGroup(of: RotationResult.self) { group in
                for _ in 0..<20 { group.addTask { try await store.rotate(presentedHash: "\(run)-c0", successor: next, now: Self.now, graceWindow: 10) } }
                return try await group.reduce(into: [RotationResult]()) { $0.append($1) }
            }
            #expect(results.filter { if case .rotated = $0 { true } else { false } }.count == 1)
            #expect(results.filter { if case .retried = $0 { true } else { false } }.count == 19)
        }
    }

    @Test("sessions revoke one by one, per user and per identity", arguments: kinds)
    func revocation(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let first = try await makeSession(store, user: user, identity: identity)
            _ = try await makeSession(store, user: user, identity: identity)
            _ = try await makeSession(store, user: user, identity: identity)
            #expect(try await store.revokeSession(id: first.id, reason: "signed_out", at: Self.now))
            #expect(try await !store.revokeSession(id: first.id, reason: "signed_out", at: Self.now))
            #expect(try await store.revokeSessions(identityID: identity.id, reason: "apple_consent_revoked", at: Self.now) == 2)
            #expect(try await store.revokeSessions(userID: user.id, reason: "x", at: Self.now) == 0)
            #expect(try await store.sessions(userID: user.id).allSatisfy(\.isRevoked))
        }
    }

    @Test("deleting a user removes identities, grants, sessions and tokens", arguments: kinds)
    func deletion(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            _ = try await makeSession(store, user: user, identity: identity, hash: "\(run)-d0")
            try await store.saveProviderGrant(
                ProviderGrant(
                    identityID: identity.id, provider: "apple", clientID: "com.example.app", sealedRefreshToken: "v1.x", lastValidatedAt: Self.now,
                    createdAt: Self.now))
            #expect(try await store.providerGrant(identityID: identity.id)?.sealedRefreshToken == "v1.x")
            try await store.deleteUser(id: user.id)
            #expect(try await store.user(id: user.id) == nil)
            #expect(try await store.identity(provider: "apple", subject: identity.subject) == nil)
            #expect(try await store.providerGrant(identityID: identity.id) == nil)
            #expect(try await store.sessions(userID: user.id).isEmpty)
            #expect(try await store.refreshToken(hash: "\(run)-d0") == nil)
        }
    }

    @Test("notifications are recorded once; keys, outbox and audit round-trip", arguments: kinds)
    func bookkeeping(kind: Kind) async throws {
        try await withStore(kind) { store in
            let id = newIdentifier()
            #expect(try await !store.hasProcessedNotification(id: id))
            #expect(try await store.recordNotification(id: id, type: "consent-revoked", at: Self.now))
            #expect(try await !store.recordNotification(id: id, type: "consent-revoked", at: Self.now))
            #expect(try await store.hasProcessedNotification(id: id))

            let key = SigningKeyRecord(keyID: "k-\(id)", algorithm: "ES256", sealedPrivateKey: "v1.s", publicKeyPEM: "pem", state: .active, createdAt: Self.now)
            try await store.saveSigningKey(key)
            var retiring = key
            retiring.state = .retiring
            retiring.retireAfter = Self.now.addingTimeInterval(600)
            try await store.saveSigningKey(retiring)
            #expect(try await store.signingKeys().first { $0.keyID == key.keyID } == retiring)

            var item = OutboxItem(
                id: newIdentifier(), kind: OutboxItem.revocation, provider: "apple", clientID: "c", sealedPayload: "v1.t", nextAttemptAt: Self.now,
                createdAt: Self.now)
            try await store.enqueue(item)
            #expect(try await store.claimDueOutboxItems(now: Self.now, limit: 1000, leaseUntil: Self.now.addingTimeInterval(300)).map(\.id).contains(item.id))
            item.completedAt = Self.now
            item.attempts = 2
            try await store.updateOutboxItem(item)
            #expect(
                try await !store.claimDueOutboxItems(now: Self.now.addingTimeInterval(600), limit: 1000, leaseUntil: Self.now.addingTimeInterval(900)).map(\.id)
                    .contains(item.id))
            #expect(try await store.outboxItems().first { $0.id == item.id }?.attempts == 2)
            // An instance whose lease ran out mid-call reports a failure after another finished the item: it stays finished.
            var late = item
            late.completedAt = nil
            late.attempts = 1
            late.lastError = "provider_unavailable"
            try await store.updateOutboxItem(late)
            #expect(try await store.outboxItems().first { $0.id == item.id }?.completedAt == item.completedAt)
            #expect(try await store.outboxItems().first { $0.id == item.id }?.attempts == 2)

            let user = newIdentifier()
            try await store.audit(AuditEvent(at: Self.now, userID: user, kind: "signed_in", detail: "d"))
            try await store.audit(AuditEvent(at: Self.now.addingTimeInterval(1), userID: user, kind: "signed_out"))
            #expect(try await store.auditEvents(userID: user, limit: 10).map(\.kind) == ["signed_in", "signed_out"])
            try await store.ping()
        }
    }

    @Test("a first signing key is saved only while no key is active, also when callers race (on PostgreSQL, three instances)", arguments: kinds)
    func firstSigningKey(kind: Kind) async throws {
        switch kind {
        case .sqlite:
            try await withStore(kind) { store in try await firstSigningKey(racing: [store, store, store]) }
        case .postgres:
            // Three stores are three instances: each has its own connections and write batches.
            var stores: [SQLAuthStore] = []
            do {
                for _ in 0..<3 {
                    stores.append(try await SQLAuthStore.open(.postgres(url: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"]!)))
                }
                try await firstSigningKey(racing: stores)
            } catch {
                for store in stores { await store.close() }
                throw error
            }
            for store in stores { await store.close() }
        }
    }

    func firstSigningKey(racing stores: [any AuthStore]) async throws {
        func key(_ name: String) -> SigningKeyRecord {
            SigningKeyRecord(keyID: "\(run)-\(name)", algorithm: "ES256", sealedPrivateKey: "v1.s", publicKeyPEM: "pem", state: .active, createdAt: Self.now)
        }
        for store in stores { try await store.ping() }
        // Rounds, because a race is won by timing (without its lock, PostgreSQL saved several keys in every round).
        for round in 0..<5 {
            // The PostgreSQL test database persists across runs and tests: retire whatever is active there.
            for var key in try await stores[0].signingKeys() where key.state == .active {
                key.state = .retired
                try await stores[0].saveSigningKey(key)
            }
            let won = try await withThrowingTaskGroup(of: String?.self) { group in
                for index in 0..<12 {
                    let store = stores[index % stores.count]
                    let contender = key("first-\(round)-\(index)")
                    group.addTask { try await store.saveFirstSigningKey(contender) ? contender.keyID : nil }
                }
                return try await group.reduce(into: [String]()) { if let id = $1 { $0.append(id) } }
            }
            #expect(won.count == 1, "round \(round)")
            #expect(try await stores[1].signingKeys().filter { $0.state == .active }.map(\.keyID) == won)
        }
        #expect(try await !stores[2].saveFirstSigningKey(key("late")))
        #expect(try await !stores[2].signingKeys().contains { $0.keyID == key("late").keyID })
    }

    @Test("grants: upsert, validation and deletion only while unchanged; revocation spares newer sessions", arguments: kinds)
    func grantRaces(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let old = ProviderGrant(
                identityID: identity.id, provider: "apple", clientID: "c", sealedRefreshToken: "v1.old", lastValidatedAt: Self.now, createdAt: Self.now)
            try await store.saveProviderGrant(old)
            var new = old
            new.sealedRefreshToken = "v1.new"
            try await store.saveProviderGrant(new)
            #expect(try await store.providerGrant(identityID: identity.id)?.sealedRefreshToken == "v1.new")
            #expect(
                try await !store.markProviderGrantValidated(
                    identityID: identity.id, sealedRefreshToken: "v1.old", at: Self.now.addingTimeInterval(60), replacingWith: "v1.lost"))
            #expect(try await store.providerGrant(identityID: identity.id)?.sealedRefreshToken == "v1.new")
            #expect(
                try await store.markProviderGrantValidated(
                    identityID: identity.id, sealedRefreshToken: "v1.new", at: Self.now.addingTimeInterval(60), replacingWith: nil))
            #expect(try await store.providerGrant(identityID: identity.id)?.lastValidatedAt == Self.now.addingTimeInterval(60))
            // A provider that rotated the token: its new one takes the validated one's place.
            #expect(
                try await store.markProviderGrantValidated(
                    identityID: identity.id, sealedRefreshToken: "v1.new", at: Self.now.addingTimeInterval(61), replacingWith: "v1.rotated"))
            #expect(try await store.providerGrant(identityID: identity.id)?.sealedRefreshToken == "v1.rotated")
            #expect(try await !store.deleteProviderGrant(identityID: identity.id, sealedRefreshToken: "v1.new"))
            #expect(try await store.deleteProviderGrant(identityID: identity.id, sealedRefreshToken: "v1.rotated"))

            let older = try await makeSession(store, user: user, identity: identity)
            var later = SessionFamily(
                id: newIdentifier(), userID: user.id, identityID: identity.id, clientID: "c", createdAt: Self.now.addingTimeInterval(100), lastUsedAt: Self.now,
                absoluteExpiresAt: Self.now.addingTimeInterval(86_400))
            try await store.createSession(
                later,
                firstToken: RefreshTokenRecord(
                    hash: newIdentifier(), familyID: later.id, parentHash: nil, createdAt: Self.now, idleExpiresAt: Self.now.addingTimeInterval(86_400)))
            #expect(try await store.revokeSessions(identityID: identity.id, createdBefore: Self.now.addingTimeInterval(50), reason: "x", at: Self.now) == 1)
            #expect(try await store.session(id: older.id)?.isRevoked == true)
            later = try #require(try await store.session(id: later.id))
            #expect(!later.isRevoked)
        }
    }

    @Test("a grant's validation is claimed by one caller at a time, until the claim ends, validation or a new grant", arguments: kinds)
    func validationClaims(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (_, identity) = try await makeUser(store)
            let day: TimeInterval = 86_400
            let grant = ProviderGrant(
                identityID: identity.id, provider: "apple", clientID: "c", sealedRefreshToken: "v1.t", lastValidatedAt: Self.now.addingTimeInterval(-2 * day),
                createdAt: Self.now)
            try await store.saveProviderGrant(grant)
            func claim(at now: Date, token: String = "v1.t") async throws -> Bool {
                try await store.claimProviderValidation(
                    identityID: identity.id, sealedRefreshToken: token, dueBefore: now.addingTimeInterval(-day), now: now, until: now.addingTimeInterval(60))
            }
            #expect(try await !claim(at: Self.now, token: "v1.other"))
            // Ten callers at once (on PostgreSQL, over several connections): one wins.
            let winners = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<10 { group.addTask { try await claim(at: Self.now) } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(winners == 1)
            #expect(try await !claim(at: Self.now.addingTimeInterval(59)))
            #expect(try await claim(at: Self.now.addingTimeInterval(61)))  // the holder died: another may ask
            #expect(
                try await store.markProviderGrantValidated(
                    identityID: identity.id, sealedRefreshToken: "v1.t", at: Self.now.addingTimeInterval(62), replacingWith: nil))
            #expect(try await !claim(at: Self.now.addingTimeInterval(63)))  // validated: not due for a day
            let later = Self.now.addingTimeInterval(62 + day)
            try await store.postponeProviderValidation(identityID: identity.id, until: later.addingTimeInterval(3600))
            #expect(try await !claim(at: later))
            #expect(try await claim(at: later.addingTimeInterval(3601)))
            var replaced = grant
            replaced.sealedRefreshToken = "v1.new"
            try await store.saveProviderGrant(replaced)
            #expect(try await claim(at: Self.now, token: "v1.new"))  // a new grant starts unclaimed
        }
    }

    @Test("outbox items are claimed once for their lease, also by concurrent callers, and again after it", arguments: kinds)
    func outboxClaims(kind: Kind) async throws {
        try await withStore(kind) { store in
            var ids: Set<String> = []
            for _ in 0..<20 {
                let item = OutboxItem(
                    id: newIdentifier(), kind: OutboxItem.revocation, provider: "apple", clientID: "c", sealedPayload: "v1.t", nextAttemptAt: Self.now,
                    createdAt: Self.now)
                try await store.enqueue(item)
                ids.insert(item.id)
            }
            let lease = Self.now.addingTimeInterval(300)
            // Four callers at once, five items each at most: every item goes to exactly one of them.
            let claimed = try await withThrowingTaskGroup(of: [String].self) { group in
                for _ in 0..<4 { group.addTask { try await store.claimDueOutboxItems(now: Self.now, limit: 5, leaseUntil: lease).map(\.id) } }
                return try await group.reduce([]) { $0 + $1 }.filter { ids.contains($0) }
            }
            #expect(claimed.count == Set(claimed).count)
            let rest = try await store.claimDueOutboxItems(now: Self.now, limit: 1000, leaseUntil: lease).map(\.id).filter { ids.contains($0) }
            #expect(Set(claimed + rest) == ids)
            #expect(claimed.count + rest.count == ids.count)
            #expect(
                try await store.claimDueOutboxItems(now: Self.now.addingTimeInterval(299), limit: 1000, leaseUntil: lease).allSatisfy { !ids.contains($0.id) })
            // The lease ended without an update (the instance died): the items are due again.
            let retried = try await store.claimDueOutboxItems(now: lease, limit: 1000, leaseUntil: lease.addingTimeInterval(300))
            #expect(Set(retried.map(\.id)).isSuperset(of: ids))
            for var item in retried {
                item.completedAt = lease
                try await store.updateOutboxItem(item)
            }
            #expect(
                try await store.claimDueOutboxItems(now: lease.addingTimeInterval(9_999), limit: 1000, leaseUntil: lease).allSatisfy { !ids.contains($0.id) })
        }
    }

    @Test("a profile is the user with identities behind a live session, and nothing otherwise", arguments: kinds)
    func profile(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity)
            let (found, identities) = try #require(try await store.profile(userID: user.id, sessionID: family.id))
            #expect(found == user)
            #expect(identities.map(\.id) == [identity.id])
            #expect(identities.first?.realUserStatus == 2)
            #expect(try await store.profile(userID: "someone-else", sessionID: family.id) == nil)
            try await store.revokeSession(id: family.id, reason: "x", at: Self.now)
            #expect(try await store.profile(userID: user.id, sessionID: family.id) == nil)
        }
    }

    @Test("a sign-in token is recorded once per provider and subject, can be released, and is swept after it expires", arguments: kinds)
    func signInTokens(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hash = "\(run)-identity-token-hash"
            let expiry = Self.now.addingTimeInterval(600)
            #expect(try await store.recordSignInToken(provider: "apple", subject: "sub-1", tokenHash: hash, expiresAt: expiry))
            #expect(try await store.recordSignInToken(provider: "apple", subject: "sub-1", tokenHash: hash, expiresAt: expiry) == false)
            #expect(try await store.recordSignInToken(provider: "google", subject: "sub-1", tokenHash: hash, expiresAt: expiry))
            try await store.deleteSignInToken(provider: "google", subject: "sub-1", tokenHash: hash, expiresAt: expiry)
            #expect(try await store.recordSignInToken(provider: "google", subject: "sub-1", tokenHash: hash, expiresAt: expiry))
            // A record is named by its expiry too (which follows from the token): releasing another expiry's record
            // leaves this one.
            try await store.deleteSignInToken(provider: "google", subject: "sub-1", tokenHash: hash, expiresAt: expiry.addingTimeInterval(1))
            #expect(try await store.recordSignInToken(provider: "google", subject: "sub-1", tokenHash: hash, expiresAt: expiry) == false)
            // Before expiry the sweep keeps it; after, it goes and the hash could be recorded again.
            _ = try await store.sweep(now: Self.now)
            #expect(try await store.recordSignInToken(provider: "apple", subject: "sub-1", tokenHash: hash, expiresAt: expiry) == false)
            #expect(try await store.sweep(now: expiry.addingTimeInterval(1)) >= 2)
            #expect(try await store.recordSignInToken(provider: "apple", subject: "sub-1", tokenHash: hash, expiresAt: expiry))
        }
    }

    /// A sign-in's record for a new user, or (with `user`/`identity` given) a returning one, with a session and an audit event.
    func signInRecord(subject: String, creating: Bool = true, user: UserAccount? = nil, identity: LinkedIdentity? = nil, grant token: String? = nil)
        -> SignInRecord
    {
        let user = user ?? UserAccount(id: newIdentifier(), createdAt: Self.now, email: "s@example.com", emailVerified: true, givenName: "Sam")
        let identity =
            identity
            ?? LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: "google", subject: subject, email: "s@example.com", claims: ["hd": "example.com"],
                firstSeenAt: Self.now, lastSignInAt: Self.now)
        let family = SessionFamily(
            id: newIdentifier(), userID: user.id, identityID: identity.id, clientID: "com.example.app", createdAt: Self.now, lastUsedAt: Self.now,
            absoluteExpiresAt: Self.now.addingTimeInterval(86_400 * 90), userAgent: "tests")
        let first = RefreshTokenRecord(
            hash: newIdentifier(), familyID: family.id, parentHash: nil, createdAt: Self.now, idleExpiresAt: Self.now.addingTimeInterval(86_400 * 30))
        return SignInRecord(
            account: creating ? .create(user, identity) : .update(user: user, identity: identity),
            grant: token.map {
                ProviderGrant(
                    identityID: identity.id, provider: "google", clientID: "c", sealedRefreshToken: $0, lastValidatedAt: Self.now, createdAt: Self.now)
            },
            session: SessionStart(family: family, firstToken: first),
            audits: [AuditEvent(at: Self.now, userID: user.id, kind: "signed_in", detail: "session=\(family.id)")])
    }

    @Test("a sign-in writes its account, grant, session and audit at once; creating a linked identity is a duplicate and writes nothing", arguments: kinds)
    func signInRecords(kind: Kind) async throws {
        try await withStore(kind) { store in
            let subject = "\(run)-signin"
            #expect(try await store.account(provider: "google", subject: subject) == nil)
            let first = signInRecord(subject: subject, grant: "v1.first")
            try await store.recordSignIn(first)
            guard case .create(let user, let identity) = first.account, let session = first.session else { throw CancellationError() }
            #expect(try await store.account(provider: "google", subject: subject) == StoredAccount(identity: identity, user: user, identities: [identity]))
            #expect(try await store.providerGrant(identityID: identity.id) == first.grant)
            #expect(try await store.session(id: session.family.id) == session.family)
            #expect(try await store.refreshToken(hash: session.firstToken.hash)?.0 == session.firstToken)
            #expect(try await store.auditEvents(userID: user.id, limit: 10).map(\.kind) == ["signed_in"])

            // The same person signing up again (a race another sign-in won): nothing of it is written.
            let again = signInRecord(subject: subject, grant: "v1.again")
            await #expect(throws: AuthStoreError.duplicate) { try await store.recordSignIn(again) }
            guard case .create(let loser, _) = again.account else { throw CancellationError() }
            #expect(try await store.user(id: loser.id) == nil)
            #expect(try await store.session(id: again.session!.family.id) == nil)
            #expect(try await store.auditEvents(userID: loser.id, limit: 10).isEmpty)
            #expect(try await store.providerGrant(identityID: identity.id)?.sealedRefreshToken == "v1.first")

            // A returning sign-in changes the user and identity, and starts another session.
            var changedUser = user
            changedUser.familyName = "Smith"
            var changedIdentity = identity
            changedIdentity.lastSignInAt = Self.now.addingTimeInterval(60)
            changedIdentity.claims["tid"] = "tenant"
            let returning = signInRecord(subject: subject, creating: false, user: changedUser, identity: changedIdentity, grant: "v1.returning")
            try await store.recordSignIn(returning)
            #expect(try await store.user(id: user.id) == changedUser)
            #expect(try await store.providerGrant(identityID: identity.id)?.sealedRefreshToken == "v1.returning")
            #expect(try await store.sessions(userID: user.id).count == 2)

            // An account is found by any of its identities, with all of them, oldest first.
            let apple = LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: "apple", subject: "\(run)-signin-apple", firstSeenAt: Self.now.addingTimeInterval(120),
                lastSignInAt: Self.now.addingTimeInterval(120))
            try await store.addIdentity(apple)
            let found = try #require(try await store.account(provider: "apple", subject: apple.subject))
            #expect(found.identity == apple)
            #expect(found.user == changedUser)
            #expect(found.identities == [changedIdentity, apple])
            #expect(try await store.account(provider: "google", subject: subject)?.identity == changedIdentity)
        }
    }

    @Test("concurrent sign-ins: a token claimed many times at once and an identity created many times at once each have one winner", arguments: kinds)
    func concurrentSignIns(kind: Kind) async throws {
        try await withStore(kind) { store in
            let shared = "\(run)-contested"
            let outcomes = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
                for index in 0..<40 {
                    let subject = index < 10 ? shared : "\(run)-distinct-\(index)"
                    let record = signInRecord(subject: subject)
                    group.addTask {
                        do {
                            try await store.recordSignIn(record)
                            return (subject, true)
                        } catch AuthStoreError.duplicate {
                            return (subject, false)
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.filter { $0.0 == shared && $0.1 }.count == 1)
            #expect(outcomes.filter { $0.0 != shared && !$0.1 }.isEmpty)
            for index in 10..<40 {
                #expect(try await store.account(provider: "google", subject: "\(run)-distinct-\(index)") != nil)
            }
            let contested = try #require(try await store.account(provider: "google", subject: shared))
            #expect(try await store.sessions(userID: contested.user.id).count == 1)

            let expiry = Self.now.addingTimeInterval(600)
            let claims = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
                for index in 0..<30 {
                    let hash = index < 10 ? "\(run)-same-token" : "\(run)-token-\(index)"
                    group.addTask { (index, try await store.recordSignInToken(provider: "google", subject: "s", tokenHash: hash, expiresAt: expiry)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(claims.filter { $0.0 < 10 && $0.1 }.count == 1)
            #expect(claims.filter { $0.0 >= 10 && !$0.1 }.isEmpty)
        }
    }

    @Test(
        "a sweep with an interval runs once per interval across the instances sharing a store, and a record from a clock far ahead does not hold it back",
        arguments: kinds)
    func sweepOncePerInterval(kind: Kind) async throws {
        try await withStore(kind) { store in
            // A month after the sessions below were revoked, so a sweep that runs removes them. A persistent PostgreSQL
            // keeps the last record of an earlier run, 800 s after this start: outside the window of 600.
            let start = Self.now.addingTimeInterval(86_400 * 31)
            let (user, identity) = try await makeUser(store)
            func deadSession(_ name: String) async throws -> SessionFamily {
                let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-\(name)")
                try await store.revokeSession(id: family.id, reason: "x", at: Self.now)
                return family
            }
            let first = try await deadSession("m0")
            #expect(try await store.sweep(now: start, unlessSweptWithin: 600) != nil)
            #expect(try await store.session(id: first.id) == nil)

            // Another instance 300 s later: skipped, and what it would have swept stays.
            let second = try await deadSession("m1")
            #expect(try await store.sweep(now: start.addingTimeInterval(300), unlessSweptWithin: 600) == nil)
            #expect(try await store.session(id: second.id) != nil)
            #expect(try await store.refreshToken(hash: "\(run)-m1") != nil)

            // Past the interval, the next one sweeps.
            #expect(try await store.sweep(now: start.addingTimeInterval(700), unlessSweptWithin: 600) != nil)
            #expect(try await store.session(id: second.id) == nil)

            // A clock an hour ahead records its sweep; the others are not held back by it.
            #expect(try await store.sweep(now: start.addingTimeInterval(5_000), unlessSweptWithin: 600) != nil)
            #expect(try await store.sweep(now: start.addingTimeInterval(800), unlessSweptWithin: 600) != nil)
        }
    }

    @Test("sweep removes expired tokens and long-dead sessions", arguments: kinds)
    func sweep(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-w0")
            try await store.revokeSession(id: family.id, reason: "x", at: Self.now)
            #expect(try await store.sweep(now: Self.now.addingTimeInterval(86_400 * 31)) >= 1)
            #expect(try await store.session(id: family.id) == nil)
            #expect(try await store.refreshToken(hash: "\(run)-w0") == nil)
        }
    }

    @Test("migrations are idempotent and recorded")
    func migrations() async throws {
        let path = NSTemporaryDirectory() + "latchkey-migrate-\(UUID().uuidString).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let store = try await SQLAuthStore.open(.sqlite(path: path))
        try await store.migrate()
        try await store.migrate()
        #expect(try await store.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])
        await store.close()
    }

    @Test("database URLs are read, and passwords never printed")
    func locations() throws {
        #expect(try StoreLocation(url: "postgres://u:secret@db:5432/latchkey").description == "postgres://u:***@db:5432/latchkey")
        #expect(try StoreLocation(url: "sqlite:///var/lib/latchkey.sqlite") == .sqlite(path: "/var/lib/latchkey.sqlite"))
        #expect(try StoreLocation(url: "data/latchkey.sqlite") == .sqlite(path: "data/latchkey.sqlite"))
        #expect(throws: LatchkeyError(.invalidConfiguration, "")) { try StoreLocation(url: "mysql://x") }
    }

    @Test("identities: a second one links, a taken one is a duplicate, unlinking drops its grant; claims round-trip", arguments: kinds)
    func linkedIdentities(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let (other, _) = try await makeUser(store)
            let google = LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: "google", subject: "g-\(run)",
                claims: ["hd": "example.com", "iss": "https://accounts.google.com"],
                firstSeenAt: Self.now, lastSignInAt: Self.now)
            try await store.addIdentity(google)
            var taken = google
            taken.id = newIdentifier()
            taken.userID = other.id
            await #expect(throws: AuthStoreError.duplicate) { try await store.addIdentity(taken) }
            #expect(try await store.identities(userID: user.id).map(\.provider).sorted() == ["apple", "google"])
            #expect(try await store.identity(provider: "google", subject: "g-\(run)")?.claims["hd"] == "example.com")
            try await store.saveProviderGrant(
                ProviderGrant(
                    identityID: google.id, provider: "google", clientID: "web", sealedRefreshToken: "v1.g", lastValidatedAt: Self.now, createdAt: Self.now))
            #expect(try await store.providerGrant(identityID: google.id)?.provider == "google")
            try await store.deleteIdentity(id: google.id)
            #expect(try await store.providerGrant(identityID: google.id) == nil)
            #expect(try await store.identities(userID: user.id).map(\.id) == [apple.id])
        }
    }

    @Test("invites: each use counts once, and expired, used-up and revoked codes are refused", arguments: kinds)
    func invites(kind: Kind) async throws {
        try await withStore(kind) { store in
            let twice = Invite(id: newIdentifier(), codeHash: "twice-\(run)", createdAt: Self.now, maxUses: 2, note: "beta")
            let expired = Invite(id: newIdentifier(), codeHash: "expired-\(run)", createdAt: Self.now, expiresAt: Self.now.addingTimeInterval(60))
            try await store.createInvite(twice)
            try await store.createInvite(expired)
            #expect(try await store.redeemInvite(codeHash: "twice-\(run)", at: Self.now))
            #expect(try await store.redeemInvite(codeHash: "twice-\(run)", at: Self.now))
            #expect(try await !store.redeemInvite(codeHash: "twice-\(run)", at: Self.now))
            #expect(try await !store.redeemInvite(codeHash: "expired-\(run)", at: Self.now.addingTimeInterval(61)))
            #expect(try await !store.redeemInvite(codeHash: "unknown-\(run)", at: Self.now))
            #expect(try await store.revokeInvite(id: expired.id, at: Self.now))
            #expect(try await !store.redeemInvite(codeHash: "expired-\(run)", at: Self.now))
            #expect(try await !store.revokeInvite(id: "no-such-invite", at: Self.now))
            let listed = try await store.invites().filter { [twice.id, expired.id].contains($0.id) }
            #expect(listed.first { $0.id == twice.id }?.uses == 2)
            #expect(listed.first { $0.id == expired.id }?.revokedAt != nil)
        }
    }

    @Test("one-time records: the first use wins (also when many race), a replay sees it used, and the sweep keeps them a day past expiry", arguments: kinds)
    func oneTimeRecords(kind: Kind) async throws {
        try await withStore(kind) { store in
            let record = OneTimeRecord(kind: "code", keyHash: "code-\(run)", sealedPayload: "sealed", expiresAt: Self.now.addingTimeInterval(60))
            try await store.saveOneTimeRecord(record)
            await #expect(throws: AuthStoreError.duplicate) { try await store.saveOneTimeRecord(record) }
            #expect(try await store.useOneTimeRecord(kind: "flow", keyHash: "code-\(run)", at: Self.now) == nil, "kinds are separate")
            let firsts = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<8 { group.addTask { try await store.useOneTimeRecord(kind: "code", keyHash: "code-\(run)", at: Self.now)?.usedAt == nil } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(firsts == 1)
            let replay = try #require(try await store.useOneTimeRecord(kind: "code", keyHash: "code-\(run)", at: Self.now.addingTimeInterval(5)))
            #expect(replay.sealedPayload == "sealed")
            #expect(replay.usedAt != nil)
            _ = try await store.sweep(now: Self.now.addingTimeInterval(3600))
            #expect(try await store.useOneTimeRecord(kind: "code", keyHash: "code-\(run)", at: Self.now) != nil, "kept a day past expiry")
            _ = try await store.sweep(now: Self.now.addingTimeInterval(60 + 86_401))
            #expect(try await store.useOneTimeRecord(kind: "code", keyHash: "code-\(run)", at: Self.now) == nil)
        }
    }
}
