import Foundation
import Testing

@testable import LatchkeyCore
@testable import LatchkeyJOSE
@testable import LatchkeyStore

/// Decisions about an account that two requests (or two instances) make at once: each is taken inside the store's
/// transaction, so exactly one of two racing requests wins.
extension StoreConformanceTests {
    /// Two stores on one database, as two instances have.
    func withTwoStores(_ kind: Kind, _ body: (any AuthStore, any AuthStore) async throws -> Void) async throws {
        let location: StoreLocation
        switch kind {
        case .sqlite: location = .sqlite(path: NSTemporaryDirectory() + "latchkey-race-\(UUID().uuidString).sqlite")
        case .postgres: location = .postgres(url: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"]!)
        }
        defer {
            if case .sqlite(let path) = location { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        }
        try await withSQLStore(location) { first in
            let second = try await SQLAuthStore.open(location)
            do { try await body(first, second) } catch {
                await second.close()
                throw error
            }
            await second.close()
        }
    }

    private func attempt<T: Sendable>(_ body: () async throws -> T) async -> Result<T, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    @Test("two unlinks racing over an account's two identities: one wins, the other is last_identity, and one identity stays", arguments: kinds)
    func unlinkRace(kind: Kind) async throws {
        try await withTwoStores(kind) { first, second in
            let services = (try await sessionService(first).signIns, try await sessionService(second).signIns)
            var bothUnlinked = 0
            for pair in 0..<50 {
                let (user, apple) = try await makeUser(first)
                let google = LinkedIdentity(
                    id: newIdentifier(), userID: user.id, provider: "google", subject: "\(run)-race-\(pair)", firstSeenAt: Self.now, lastSignInAt: Self.now)
                try await first.addIdentity(google)
                async let one = attempt { try await services.0.unlink(userID: user.id, provider: "apple", subject: apple.subject) }
                async let other = attempt { try await services.1.unlink(userID: user.id, provider: "google", subject: google.subject) }
                let outcomes = await [one, other]
                let unlinked = outcomes.filter { if case .success = $0 { true } else { false } }.count
                if unlinked == 2 { bothUnlinked += 1 }
                // The loser is told last_identity; under load a store may also be busy past its timeout (nothing changed).
                for case .failure(let error) in outcomes {
                    #expect((error as? LatchkeyError)?.code == .lastIdentity || error is AuthStoreError, "pair \(pair): \(error)")
                }
                #expect(try await first.identities(userID: user.id).count == 2 - unlinked, "pair \(pair)")
            }
            #expect(bothUnlinked == 0, "\(bothUnlinked) of 50 pairs unlinked both identities")
        }
    }

    @Test(
        "a provider deleting a user's last identity while another instance links a second one: the link is never deleted with the user",
        arguments: kinds)
    func accountDeletedWhileLinking(kind: Kind) async throws {
        try await withTwoStores(kind) { first, second in
            let events = ProviderEvents(store: first, policy: SessionPolicy(), timeSource: .fixed(Self.now))
            for pair in 0..<40 {
                let (user, apple) = try await makeUser(first)
                let google = LinkedIdentity(
                    id: newIdentifier(), userID: user.id, provider: "google", subject: "\(run)-link-\(pair)", firstSeenAt: Self.now, lastSignInAt: Self.now)
                async let deleted = attempt {
                    try await events.handle(ProviderAccountEvent(id: "\(run)-event-\(pair)", provider: "apple", kind: .accountDeleted, subject: apple.subject))
                }
                // The link lands as soon as the Apple identity is seen gone: when the user's fate is being decided.
                async let linked = attempt {
                    while try await second.identity(provider: "apple", subject: apple.subject) != nil { await Task.yield() }
                    try await second.addIdentity(google)
                }
                let (deletion, link) = await (deleted, linked)
                if case .failure(let error) = deletion { Issue.record("pair \(pair): the notification failed: \(error)") }
                let userLeft = try await first.user(id: user.id) != nil
                let googleLeft = try await first.identity(provider: "google", subject: google.subject) != nil
                switch link {
                case .success:
                    // The link counted: the user stays, with it.
                    #expect(userLeft && googleLeft, "pair \(pair): the link succeeded, then went with the user")
                case .failure:
                    // The user was gone first: nothing of theirs is left.
                    #expect(!userLeft && !googleLeft, "pair \(pair)")
                }
            }
        }
    }

    @Test("an unlink of an identity the user does not have, or of their last, changes nothing", arguments: kinds)
    func unlinkRefusals(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let (other, _) = try await makeUser(store)
            #expect(try await store.unlinkIdentity(id: apple.id, userID: other.id, reason: "test", at: Self.now) == .notFound)
            #expect(try await store.unlinkIdentity(id: "no-such-identity", userID: user.id, reason: "test", at: Self.now) == .notFound)
            #expect(try await store.unlinkIdentity(id: apple.id, userID: user.id, reason: "test", at: Self.now) == .lastIdentity)
            #expect(try await store.identities(userID: user.id).map(\.id) == [apple.id])
        }
    }

    @Test("an unlink revokes the identity's sessions and hands back its provider grant", arguments: kinds)
    func unlinkTakesGrantAndSessions(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, apple) = try await makeUser(store)
            let google = LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: "google", subject: "\(run)-grant", firstSeenAt: Self.now, lastSignInAt: Self.now)
            try await store.addIdentity(google)
            let grant = ProviderGrant(
                identityID: google.id, provider: "google", clientID: "app", sealedRefreshToken: "sealed", lastValidatedAt: Self.now, createdAt: Self.now)
            try await store.saveProviderGrant(grant)
            let throughGoogle = try await makeSession(store, user: user, identity: google)
            let throughApple = try await makeSession(store, user: user, identity: apple)
            #expect(try await store.unlinkIdentity(id: google.id, userID: user.id, reason: "identity_unlinked", at: Self.now) == .unlinked(grant))
            #expect(try await store.providerGrant(identityID: google.id) == nil)
            #expect(try await store.session(id: throughGoogle.id)?.isRevoked == true)
            #expect(try await store.session(id: throughApple.id)?.isRevoked == false)
        }
    }

    @Test("one new user's sign-up sent twice at once spends one use of the invite", arguments: kinds)
    func inviteSpentOnce(kind: Kind) async throws {
        try await withTwoStores(kind) { first, second in
            let (firstService, secondService) = (try await sessionService(first, requireInvite: true), try await sessionService(second, requireInvite: true))
            let services = (firstService.signIns, secondService.signIns)
            for attempt in 0..<10 {
                let (invite, code) = try await firstService.administration.createInvite(maxUses: 5, by: .cli)
                let subject = "\(run)-invite-\(attempt)"
                async let one = services.0.signIn(identity: googleIdentity(subject), provider: "google", inviteCode: code, claiming: "h.\(subject)-1.s")
                async let other = services.1.signIn(identity: googleIdentity(subject), provider: "google", inviteCode: code, claiming: "h.\(subject)-2.s")
                let (a, b) = try await (one, other)
                #expect(a.user.id == b.user.id)
                #expect(try await first.invites().first { $0.id == invite.id }?.uses == 1, "attempt \(attempt)")
            }
        }
    }

    @Test("sign-up refuses a missing, unknown or used-up invite and spends nothing", arguments: kinds)
    func inviteRefusals(kind: Kind) async throws {
        try await withStore(kind) { store in
            let service = try await sessionService(store, requireInvite: true)
            let signIns = service.signIns
            let (invite, code) = try await service.administration.createInvite(maxUses: 1, by: .cli)
            for (index, sent) in [nil, "inv_unknown"].enumerated() {
                let refused = await #expect(throws: LatchkeyError.self) {
                    try await signIns.signIn(identity: googleIdentity("\(run)-refused-\(index)"), provider: "google", inviteCode: sent)
                }
                #expect(refused?.code == .signupClosed)
            }
            _ = try await signIns.signIn(identity: googleIdentity("\(run)-first"), provider: "google", inviteCode: code)
            let usedUp = await #expect(throws: LatchkeyError.self) {
                try await signIns.signIn(identity: googleIdentity("\(run)-second"), provider: "google", inviteCode: code)
            }
            #expect(usedUp?.reason.contains("used up") == true)
            #expect(try await store.invites().first { $0.id == invite.id }?.uses == 1)
            // A returning user needs no invite at all.
            _ = try await signIns.signIn(identity: googleIdentity("\(run)-first"), provider: "google")
        }
    }

    @Test("adding an identity to a user who does not exist is notFound in every store", arguments: kinds)
    func identityForMissingUser(kind: Kind) async throws {
        try await withStore(kind) { store in
            let orphan = LinkedIdentity(
                id: newIdentifier(), userID: "no-such-user", provider: "google", subject: "\(run)-orphan", firstSeenAt: Self.now, lastSignInAt: Self.now)
            await #expect(throws: AuthStoreError.notFound) { try await store.addIdentity(orphan) }
        }
    }
}
