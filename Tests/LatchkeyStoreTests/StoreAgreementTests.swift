import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyStore
import LatchkeyTestSupport
import Testing

/// What each store method does with a duplicate key, a missing parent and a repeated call: one outcome, the one its
/// doc comment in `AuthStore.swift` names, in every store.
extension StoreConformanceTests {
    func identity(_ user: UserAccount, id: String = newIdentifier(), provider: String = "google", subject: String? = nil) -> LinkedIdentity {
        LinkedIdentity(
            id: id, userID: user.id, provider: provider, subject: subject ?? "\(run)-\(newIdentifier())", email: "b@example.com", firstSeenAt: Self.now,
            lastSignInAt: Self.now)
    }

    @Test("createUser: a taken user id, identity id or provider account is a duplicate, and nothing is written", arguments: kinds)
    func createUserDuplicates(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let newcomer = UserAccount(id: newIdentifier(), createdAt: Self.now)
            // The identity's id is taken; its provider account is new.
            await #expect(throws: AuthStoreError.duplicate) { try await store.createUser(newcomer, identity: identity(newcomer, id: apple.id)) }
            #expect(try await store.user(id: newcomer.id) == nil)
            #expect(try await store.identities(userID: user.id) == [apple])
            let fresh = identity(user)
            await #expect(throws: AuthStoreError.duplicate) { try await store.createUser(user, identity: fresh) }
            #expect(try await store.identity(provider: fresh.provider, subject: fresh.subject) == nil)
        }
    }

    @Test("addIdentity: a taken identity id is a duplicate and leaves the identity holding it as it was", arguments: kinds)
    func addIdentityDuplicateID(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let (other, _) = try await makeUser(store)
            let clash = identity(other, id: apple.id)
            await #expect(throws: AuthStoreError.duplicate) { try await store.addIdentity(clash) }
            #expect(try await store.identities(userID: user.id) == [apple])
            #expect(try await store.identity(provider: clash.provider, subject: clash.subject) == nil)
        }
    }

    @Test("updateIdentity: changes the profile and last sign-in only; an identity that is gone stays gone", arguments: kinds)
    func updateIdentityScope(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let (other, _) = try await makeUser(store)
            var changed = apple
            changed.email = "c@example.com"
            changed.lastSignInAt = Self.now.addingTimeInterval(60)
            changed.userID = other.id
            changed.subject = "\(run)-moved"
            changed.firstSeenAt = Self.now.addingTimeInterval(30)
            try await store.updateIdentity(changed)
            let stored = try #require(try await store.identities(userID: user.id).first)
            #expect(stored.email == "c@example.com")
            #expect(stored.lastSignInAt == changed.lastSignInAt)
            #expect(stored.subject == apple.subject)
            #expect(stored.firstSeenAt == apple.firstSeenAt)
            #expect(try await store.identities(userID: other.id).count == 1)

            let gone = identity(user)
            try await store.updateIdentity(gone)
            #expect(try await store.identity(provider: gone.provider, subject: gone.subject) == nil)
        }
    }

    @Test("createSession: a taken session id or token hash is a duplicate, a missing user notFound, and nothing is written", arguments: kinds)
    func createSessionOutcomes(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: apple, hash: "\(run)-s0")
            var again = family
            again.clientID = "com.example.other"
            await #expect(throws: AuthStoreError.duplicate) {
                try await store.createSession(again, firstToken: successor(again, parent: "x", hash: "\(run)-s1"))
            }
            #expect(try await store.session(id: family.id)?.clientID == "com.example.app")
            #expect(try await store.refreshToken(hash: "\(run)-s1") == nil)

            let second = SessionFamily(
                id: newIdentifier(), userID: user.id, identityID: apple.id, clientID: "com.example.app", createdAt: Self.now, lastUsedAt: Self.now,
                absoluteExpiresAt: Self.now.addingTimeInterval(86_400))
            await #expect(throws: AuthStoreError.duplicate) {
                try await store.createSession(second, firstToken: successor(second, parent: "x", hash: "\(run)-s0"))
            }
            #expect(try await store.session(id: second.id) == nil)
            #expect(try await store.refreshToken(hash: "\(run)-s0")?.1.id == family.id)

            var orphan = second
            orphan.id = newIdentifier()
            orphan.userID = newIdentifier()
            await #expect(throws: AuthStoreError.notFound) {
                try await store.createSession(orphan, firstToken: successor(orphan, parent: "x", hash: "\(run)-s2"))
            }
            #expect(try await store.session(id: orphan.id) == nil)
            #expect(try await store.refreshToken(hash: "\(run)-s2") == nil)
        }
    }

    @Test("rotate: a successor naming a stored token is a duplicate, and the presented token stays unused", arguments: kinds)
    func rotateOntoStoredToken(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: apple, hash: "\(run)-r0")
            let other = try await makeSession(store, user: user, identity: apple, hash: "\(run)-r1")
            await #expect(throws: AuthStoreError.duplicate) {
                _ = try await store.rotate(
                    presentedHash: "\(run)-r0", successor: successor(family, parent: "\(run)-r0", hash: "\(run)-r1"), now: Self.now, graceWindow: 10)
            }
            #expect(try await store.refreshToken(hash: "\(run)-r0")?.0.rotatedAt == nil)
            #expect(try await store.refreshToken(hash: "\(run)-r1")?.1.id == other.id)
            let next = successor(family, parent: "\(run)-r0", hash: "\(run)-r2")
            guard case .rotated = try await store.rotate(presentedHash: "\(run)-r0", successor: next, now: Self.now, graceWindow: 10) else {
                Issue.record("not rotated")
                return
            }
        }
    }

    @Test("revokeSessions(identityID:): an identity no longer linked has no sessions to revoke (revoke before unlinking)", arguments: kinds)
    func revokeSessionsOfUnlinkedIdentity(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let google = identity(user)
            try await store.addIdentity(google)
            let family = try await makeSession(store, user: user, identity: google)
            try await store.deleteIdentity(id: google.id)
            #expect(try await store.revokeSessions(identityID: google.id, reason: "x", at: Self.now) == 0)
            #expect(try await store.revokeSessions(identityID: google.id, createdBefore: Self.now.addingTimeInterval(1), reason: "x", at: Self.now) == 0)
            #expect(try await store.session(id: family.id)?.isRevoked == false)
            #expect(try await store.revokeSessions(identityID: apple.id, reason: "x", at: Self.now) == 0)
        }
    }

    @Test("saveProviderGrant: a grant for an identity that is not linked is notFound", arguments: kinds)
    func grantForMissingIdentity(kind: Kind) async throws {
        try await withStore(kind) { store in
            let grant = ProviderGrant(
                identityID: newIdentifier(), provider: "google", clientID: "web", sealedRefreshToken: "v1.g", lastValidatedAt: Self.now, createdAt: Self.now)
            await #expect(throws: AuthStoreError.notFound) { try await store.saveProviderGrant(grant) }
            let stored = try await store.providerGrant(identityID: grant.identityID)
            #expect(stored == nil)
        }
    }

    @Test("saveSigningKey: a saved key's material, algorithm and creation time never change; its state and retirement do", arguments: kinds)
    func signingKeyResave(kind: Kind) async throws {
        try await withStore(kind) { store in
            let key = SigningKeyRecord(
                keyID: "\(run)-resave", algorithm: "ES256", sealedPrivateKey: "v1.s", publicKeyPEM: "pem", state: .retired, createdAt: Self.now)
            try await store.saveSigningKey(key)
            var other = SigningKeyRecord(
                keyID: key.keyID, algorithm: "ES384", sealedPrivateKey: "v1.other", publicKeyPEM: "other", state: .retiring,
                createdAt: Self.now.addingTimeInterval(60), retireAfter: Self.now.addingTimeInterval(600))
            try await store.saveSigningKey(other)
            other.algorithm = key.algorithm
            other.sealedPrivateKey = key.sealedPrivateKey
            other.publicKeyPEM = key.publicKeyPEM
            other.createdAt = key.createdAt
            #expect(try await store.signingKeys().first { $0.keyID == key.keyID } == other)
        }
    }

    @Test("saveFirstSigningKey: a key id that is taken is a duplicate, also while no key is active", arguments: kinds)
    func firstSigningKeyTakenID(kind: Kind) async throws {
        try await withStore(kind) { store in
            // The PostgreSQL test database persists across runs: retire whatever is active there.
            for var key in try await store.signingKeys() where key.state == .active {
                key.state = .retired
                try await store.saveSigningKey(key)
            }
            let retired = SigningKeyRecord(
                keyID: "\(run)-taken", algorithm: "ES256", sealedPrivateKey: "v1.s", publicKeyPEM: "pem", state: .retired, createdAt: Self.now)
            try await store.saveSigningKey(retired)
            var active = retired
            active.state = .active
            active.sealedPrivateKey = "v1.new"
            await #expect(throws: AuthStoreError.duplicate) { _ = try await store.saveFirstSigningKey(active) }
            #expect(try await store.signingKeys().first { $0.keyID == retired.keyID } == retired)
        }
    }

    @Test("deleteSignInToken: releases only the record of that subject", arguments: kinds)
    func releaseOtherSubject(kind: Kind) async throws {
        try await withStore(kind) { store in
            let expiry = tokenTime.addingTimeInterval(600)
            #expect(try await store.recordSignInToken(provider: "google", subject: "\(run)-a", tokenHash: "\(run)-t", expiresAt: expiry))
            try await store.deleteSignInToken(provider: "google", subject: "\(run)-b", tokenHash: "\(run)-t", expiresAt: expiry)
            #expect(try await !store.recordSignInToken(provider: "google", subject: "\(run)-a", tokenHash: "\(run)-t", expiresAt: expiry))
            try await store.deleteSignInToken(provider: "google", subject: "\(run)-a", tokenHash: "\(run)-t", expiresAt: expiry)
            #expect(try await store.recordSignInToken(provider: "google", subject: "\(run)-a", tokenHash: "\(run)-t", expiresAt: expiry))
        }
    }

    @Test("createInvite: a taken id or code is a duplicate, and the invite holding it stays as it was", arguments: kinds)
    func inviteDuplicates(kind: Kind) async throws {
        try await withStore(kind) { store in
            let invite = Invite(id: newIdentifier(), codeHash: "\(run)-code", createdAt: Self.now, maxUses: 2, note: "first")
            try await store.createInvite(invite)
            var sameID = invite
            sameID.codeHash = "\(run)-other"
            sameID.note = "second"
            await #expect(throws: AuthStoreError.duplicate) { try await store.createInvite(sameID) }
            var sameCode = invite
            sameCode.id = newIdentifier()
            sameCode.note = "third"
            await #expect(throws: AuthStoreError.duplicate) { try await store.createInvite(sameCode) }
            let listed = try await store.invites().filter { [invite.id, sameCode.id].contains($0.id) || $0.codeHash == sameID.codeHash }
            #expect(listed == [invite])
        }
    }

    @Test("revokeInvite: revoking again is true and keeps the first revocation's time; an unknown invite is false", arguments: kinds)
    func inviteRevokedTwice(kind: Kind) async throws {
        try await withStore(kind) { store in
            let invite = Invite(id: newIdentifier(), codeHash: "\(run)-revoked", createdAt: Self.now)
            try await store.createInvite(invite)
            #expect(try await store.revokeInvite(id: invite.id, at: Self.now))
            #expect(try await store.revokeInvite(id: invite.id, at: Self.now.addingTimeInterval(60)))
            #expect(try await store.invites().first { $0.id == invite.id }?.revokedAt == Self.now)
            #expect(try await !store.revokeInvite(id: newIdentifier(), at: Self.now))
        }
    }

    @Test("enqueue: a taken id is a duplicate, and the item holding it stays as it was", arguments: kinds)
    func outboxDuplicate(kind: Kind) async throws {
        try await withStore(kind) { store in
            let item = OutboxItem(
                id: newIdentifier(), kind: OutboxItem.revocation, provider: "apple", clientID: "c", sealedPayload: "v1.t", nextAttemptAt: Self.now,
                createdAt: Self.now)
            try await store.enqueue(item)
            var again = item
            again.sealedPayload = "v1.other"
            await #expect(throws: AuthStoreError.duplicate) { try await store.enqueue(again) }
            #expect(try await store.outboxItems().first { $0.id == item.id } == item)
        }
    }

    @Test("updateOutboxItem: records the outcome only (attempts, next attempt, error, completion); a missing item stays missing", arguments: kinds)
    func outboxUpdateScope(kind: Kind) async throws {
        try await withStore(kind) { store in
            let item = OutboxItem(
                id: newIdentifier(), kind: OutboxItem.revocation, provider: "apple", clientID: "c", sealedPayload: "v1.t", nextAttemptAt: Self.now,
                createdAt: Self.now)
            try await store.enqueue(item)
            var outcome = item
            outcome.attempts = 1
            outcome.nextAttemptAt = Self.now.addingTimeInterval(60)
            outcome.lastError = "provider_unavailable"
            outcome.sealedPayload = "v1.changed"
            outcome.provider = "google"
            outcome.clientID = "other"
            outcome.createdAt = Self.now.addingTimeInterval(5)
            try await store.updateOutboxItem(outcome)
            var expected = item
            expected.attempts = 1
            expected.nextAttemptAt = outcome.nextAttemptAt
            expected.lastError = "provider_unavailable"
            #expect(try await store.outboxItems().first { $0.id == item.id } == expected)

            var missing = item
            missing.id = newIdentifier()
            try await store.updateOutboxItem(missing)
            #expect(try await !store.outboxItems().contains { $0.id == missing.id })
        }
    }

    @Test("audit: a taken event id is a duplicate; auditEvents gives the latest by time, oldest first", arguments: kinds)
    func auditOutcomes(kind: Kind) async throws {
        try await withStore(kind) { store in
            let user = newIdentifier()
            let first = AuditEvent(at: Self.now.addingTimeInterval(2), userID: user, kind: "third")
            try await store.audit(first)
            try await store.audit(AuditEvent(at: Self.now, userID: user, kind: "first"))
            try await store.audit(AuditEvent(at: Self.now.addingTimeInterval(1), userID: user, kind: "second"))
            await #expect(throws: AuthStoreError.duplicate) { try await store.audit(AuditEvent(id: first.id, at: Self.now, userID: user, kind: "again")) }
            #expect(try await store.auditEvents(userID: user, limit: 10).map(\.kind) == ["first", "second", "third"])
            #expect(try await store.auditEvents(userID: user, limit: 2).map(\.kind) == ["second", "third"])
        }
    }

    @Test("sweep: a session revoked 30 days ago goes, with its unexpired tokens, and they are counted", arguments: kinds)
    func sweepBoundaryAndCount(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let family = SessionFamily(
                id: newIdentifier(), userID: user.id, identityID: apple.id, clientID: "com.example.app", createdAt: Self.now, lastUsedAt: Self.now,
                absoluteExpiresAt: Self.now.addingTimeInterval(86_400 * 90))
            try await store.createSession(
                family,
                firstToken: RefreshTokenRecord(
                    hash: "\(run)-swept", familyID: family.id, parentHash: nil, createdAt: Self.now, idleExpiresAt: Self.now.addingTimeInterval(86_400 * 60)))
            try await store.revokeSession(id: family.id, reason: "x", at: Self.now)
            let swept = try await store.sweep(now: Self.now.addingTimeInterval(86_400 * 30))
            #expect(try await store.session(id: family.id) == nil)
            #expect(try await store.refreshToken(hash: "\(run)-swept") == nil)
            // The PostgreSQL test database is shared with other suites: their rows may go too.
            if kind == .postgres { #expect(swept >= 2) } else { #expect(swept == 2) }
        }
    }
}
