import Foundation
import SQLKit
import Testing

@testable import LatchkeyCore
@testable import LatchkeyJOSE
@testable import LatchkeyStore

/// A sign-in claims its identity token, finds its account and writes, in one step of the store; only a new user who
/// needs an invite, or a first sign-in another one beat, takes more.
extension StoreConformanceTests {
    func sessionService(_ store: any AuthStore, requireInvite: Bool) async throws -> SessionService {
        let plain = try await sessionService(store)
        var policy = SessionPolicy()
        policy.requireInvite = requireInvite
        return SessionService(store: store, accessTokens: plain.accessTokens, box: plain.grants.box, policy: policy)
    }

    func googleIdentity(_ subject: String, email: String? = nil) -> VerifiedIdentity {
        // One time for every token of a test, as a token's `exp` is part of what it signs.
        var identity = VerifiedIdentity(issuer: "https://accounts.google.com", subject: subject, audience: "app", checkedAt: tokenTime)
        identity.email = email
        return identity
    }

    @Test("a sign-in takes one store step with its token's claim; a used token writes nothing; a returning user is found", arguments: kinds)
    func oneStepSignIn(kind: Kind) async throws {
        try await withStore(kind) { store in
            let sql = try #require(store as? SQLAuthStore)
            let signIns = try await sessionService(store).signIns
            let subject = "\(run)-step"
            let first = try await signIns.signIn(identity: googleIdentity(subject, email: "a@example.com"), provider: "google", claiming: "h.p1.s")
            #expect(first.isNewUser)
            #expect(first.user.email == "a@example.com")
            #expect((sql.signInSteps, sql.separateClaims) == (1, 0))

            // The same token again (its signed part, whatever the signature): refused, and no second session.
            let replay = await #expect(throws: LatchkeyError.self) {
                try await signIns.signIn(identity: googleIdentity(subject), provider: "google", claiming: "h.p1.other")
            }
            #expect(replay?.code == .tokenAlreadyUsed)
            #expect(try await store.sessions(userID: first.user.id).count == 1)

            // A returning sign-in with a fresh token keeps the e-mail it had and starts a second session, in one step.
            let again = try await signIns.signIn(identity: googleIdentity(subject), provider: "google", userAgent: "UA", claiming: "h.p2.s")
            #expect(!again.isNewUser)
            #expect((again.user.id, again.user.email) == (first.user.id, "a@example.com"))
            #expect(again.identities.map(\.id) == first.identities.map(\.id))
            #expect(try await store.sessions(userID: first.user.id).map(\.userAgent).sorted { ($0 ?? "") < ($1 ?? "") } == [nil, "UA"])
            #expect((sql.signInSteps, sql.separateClaims) == (3, 0))
            #expect(try await store.auditEvents(userID: first.user.id, limit: 10).map(\.kind).sorted() == ["signed_in", "signed_in", "user_created"])
        }
    }

    @Test("a group's account look-ups search identities by (provider, subject), never read them all")
    func lookUpsUseTheIndex() async throws {
        try await withStore(.sqlite) { store in
            let sql = try #require(store as? SQLAuthStore)
            let signIns = try await sessionService(store).signIns
            for index in 0..<20 { _ = try await signIns.signIn(identity: googleIdentity("\(run)-plan-\(index)"), provider: "google") }
            let keys = [AccountKey(provider: "google", subject: "\(run)-plan-1"), AccountKey(provider: "google", subject: "\(run)-plan-2")]
            for query in [SQLAuthStore.accountsLookup(keys), SQLAuthStore.linkedLookup(keys)] {
                let plan = try await sql.queryPlan(query)
                #expect(plan.contains { $0.hasPrefix("SEARCH identities USING") && $0.contains("(provider=? AND subject=?)") }, "\(plan)")
                // Only the keys themselves are read in full.
                #expect(plan.filter { $0.hasPrefix("SCAN") }.allSatisfy { $0.contains("VALUES CLAUSE") }, "\(plan)")
            }
        }
    }

    @Test("revocations by identity find the sessions among its user's (sessions have no index on identity_id), not by reading the table")
    func revocationsByIdentityUseTheUsersIndex() async throws {
        try await withStore(.sqlite) { store in
            let sql = try #require(store as? SQLAuthStore)
            let plan = try await sql.queryPlan("SELECT COUNT(*) AS n FROM sessions WHERE " + SQLAuthStore.sessionsOfIdentity("\(run)-identity"))
            #expect(plan.contains { $0.hasPrefix("SEARCH sessions USING INDEX sessions_user (user_id=?)") }, "\(plan)")
            #expect(plan.contains { $0.hasPrefix("SEARCH identities USING INDEX sqlite_autoindex_identities_1 (id=?)") }, "\(plan)")
            #expect(!plan.contains { $0.hasPrefix("SCAN") }, "\(plan)")
            // The index that every sign-in wrote to is gone (migration 7): by identity alone, the table is read.
            let byIdentityAlone = try await sql.queryPlan("SELECT id FROM sessions WHERE identity_id = \(bind: "\(run)-identity")")
            #expect(byIdentityAlone == ["SCAN sessions"])
        }
    }

    @Test("SQLite checkpoints its WAL every 4,000 frames, not SQLite's 1,000: the log grows past 1,000 frames and stops near 4,000")
    func checkpointInterval() async throws {
        let path = NSTemporaryDirectory() + "latchkey-test-\(UUID().uuidString).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        try await withSQLStore(.sqlite(path: path)) { store in
            // Each user is a commit that writes at least six pages (the user's table and key, the identity's table and
            // its three indexes): 800 of them write more than 4,800 frames. The log file keeps its largest size.
            for _ in 0..<800 { _ = try await makeUser(store) }
            let bytes = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
            let frames = bytes / (24 + 4096)
            #expect(frames > 1_100 && frames <= 4_100, "\(frames) frames")
        }
    }

    @Test("a released claim is found by the used-token table's key (expiry first), not by reading the table")
    func releaseUsesTheKey() async throws {
        try await withStore(.sqlite) { store in
            let sql = try #require(store as? SQLAuthStore)
            let claim = SignInTokenClaim(provider: "google", subject: "\(run)-release", tokenHash: "hash", expiresAt: Self.now)
            let plan = try await sql.queryPlan(SQLAuthStore.releaseClaim(claim))
            #expect(plan.count == 1, "\(plan)")
            #expect(
                plan.allSatisfy { $0.hasPrefix("SEARCH used_sign_in_tokens USING") && $0.hasSuffix("(expires_at=? AND provider=? AND token_hash=?)") },
                "\(plan)")
        }
    }

    @Test("sign-up by invite: without one nothing is written and the token may be used again; with one the user is created", arguments: kinds)
    func inviteSignUp(kind: Kind) async throws {
        try await withStore(kind) { store in
            let service = try await sessionService(store, requireInvite: true)
            let signIns = service.signIns
            let identity = googleIdentity("\(run)-invited")
            for code in [nil, "inv_unknown"] {
                let refused = await #expect(throws: LatchkeyError.self) {
                    try await signIns.signIn(identity: identity, provider: "google", inviteCode: code, claiming: "h.invited.s")
                }
                #expect(refused?.code == .signupClosed)
            }
            #expect(try await store.account(provider: "google", subject: identity.subject) == nil)
            let (_, code) = try await service.administration.createInvite(by: .cli)
            let created = try await signIns.signIn(identity: identity, provider: "google", inviteCode: code, claiming: "h.invited.s")
            #expect(created.isNewUser)
            // Known now: no invite needed, and the used invite is not asked for.
            let returning = try await signIns.signIn(identity: identity, provider: "google", claiming: "h.invited-again.s")
            #expect(!returning.isNewUser)
            #expect(returning.user.id == created.user.id)
        }
    }

    @Test("concurrent sign-ins: one user per new identity, one session per token, whatever the groups", arguments: kinds)
    func concurrentStepSignIns(kind: Kind) async throws {
        try await withStore(kind) { store in
            let signIns = try await sessionService(store).signIns
            let contested = "\(run)-first-time"
            // 0..<10: the same new person with ten tokens; 10..<20: one token sent ten times; the rest: one each.
            let outcomes = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
                for index in 0..<40 {
                    let subject = index < 10 ? contested : index < 20 ? "\(run)-replayed" : "\(run)-other-\(index)"
                    let token = index >= 10 && index < 20 ? "h.replayed.s" : "h.\(index).s"
                    group.addTask {
                        do {
                            return (index, try await signIns.signIn(identity: googleIdentity(subject), provider: "google", claiming: token).user.id)
                        } catch let error as LatchkeyError where error.code == .tokenAlreadyUsed {
                            return (index, nil)
                        }
                    }
                }
                return try await group.reduce(into: [Int: String?]()) { $0[$1.0] = $1.1 }
            }
            let contestedUsers = Set((0..<10).compactMap { outcomes[$0] ?? nil })
            #expect(contestedUsers.count == 1)
            #expect((0..<10).allSatisfy { outcomes[$0] != nil && outcomes[$0]! != nil })
            #expect((10..<20).filter { outcomes[$0]! != nil }.count == 1)
            #expect((20..<40).allSatisfy { outcomes[$0]! != nil })
            let user = try #require(contestedUsers.first)
            #expect(try await store.sessions(userID: user).count == 10)
            #expect(try await store.identities(userID: user).count == 1)
            let replayed = try #require(try await store.account(provider: "google", subject: "\(run)-replayed"))
            #expect(try await store.sessions(userID: replayed.user.id).count == 1)
        }
    }

    @Test(
        "returning sign-ins in one group: each user and identity gets its own changes, a user signing in twice at once keeps both sessions", arguments: kinds
    )
    func groupedReturningSignIns(kind: Kind) async throws {
        try await withStore(kind) { store in
            let sql = try #require(store as? SQLAuthStore)
            let signIns = try await sessionService(store).signIns
            let count = 16
            var firsts: [SignInService.SignInOutcome] = []
            for index in 0..<count {
                firsts.append(try await signIns.signIn(identity: googleIdentity("\(run)-back-\(index)"), provider: "google", claiming: "h.first\(index).s"))
            }
            #expect(firsts.allSatisfy { $0.user.email == nil && $0.user.givenName == nil })
            #expect(sql.largestSignInGroup == 1)
            // Each returns with details of its own; the first returns twice at once.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0...count {
                    let person = index == count ? 0 : index
                    var identity = googleIdentity("\(run)-back-\(person)", email: "back\(person)@example.com")
                    identity.emailVerified = person % 2 == 0
                    identity.isPrivateEmail = person % 3 == 0
                    identity.realUserStatus = person % 2 == 0 ? .likelyReal : nil
                    identity.transferSubject = person == 5 ? "transfer-5" : nil
                    group.addTask {
                        _ = try await signIns.signIn(identity: identity, provider: "google", givenName: "Given\(person)", claiming: "h.back\(index).s")
                    }
                }
                try await group.waitForAll()
            }
            #expect(sql.largestSignInGroup > 1, "no two returning sign-ins shared a step")
            for (index, first) in firsts.enumerated() {
                let account = try #require(try await store.account(provider: "google", subject: "\(run)-back-\(index)"))
                #expect(account.user.id == first.user.id)
                #expect(account.user.email == "back\(index)@example.com")
                #expect(account.user.emailVerified == (index % 2 == 0))
                #expect(account.user.givenName == "Given\(index)")
                let identity = account.identity
                #expect(identity.id == first.identities.first?.id)
                #expect(identity.email == "back\(index)@example.com")
                #expect(identity.emailVerified == (index % 2 == 0))
                #expect(identity.isPrivateEmail == (index % 3 == 0))
                #expect(identity.realUserStatus == (index % 2 == 0 ? RealUserStatus.likelyReal.rawValue : nil))
                #expect(identity.transferSubject == (index == 5 ? "transfer-5" : nil))
                #expect(identity.givenName == "Given\(index)")
                #expect(try await store.sessions(userID: first.user.id).count == (index == 0 ? 3 : 2))
            }
        }
    }

    @Test(
        "sign-ins of one account in one group act in order: each keeps what the earlier ones wrote, a second first sign-in joins the user the first created",
        arguments: kinds)
    func oneAccountTwiceInAGroup(kind: Kind) async throws {
        try await withStore(kind) { store in
            let sql = try #require(store as? SQLAuthStore)
            let signIns = try await sessionService(store).signIns
            func plan(_ subject: String, givenName: String? = nil, familyName: String? = nil, token: String) throws -> SignInPlan {
                try signIns.makePlan(
                    identity: googleIdentity(subject), provider: "google", givenName: givenName, familyName: familyName, providerRefreshToken: nil,
                    startsSession: true, userAgent: nil, inviteCode: nil, claiming: token)
            }

            // A returning user: one sign-in brings a given name, the next (in the same group) only a family name.
            let subject = "\(run)-order"
            let first = try await signIns.signIn(identity: googleIdentity(subject), provider: "google", claiming: "h.order0.s")
            #expect(first.user.givenName == nil && first.user.familyName == nil)
            let named = [try plan(subject, givenName: "Ann", token: "h.order1.s"), try plan(subject, familyName: "Lee", token: "h.order2.s")]
            let results = try await sql.signInGroup(named)
            guard case .recorded(let seenBySecond?) = results[1] else {
                Issue.record("the second sign-in was not recorded: \(results)")
                return
            }
            #expect(seenBySecond.user.givenName == "Ann", "the second sign-in did not see what the first wrote")
            let account = try #require(try await store.account(provider: "google", subject: subject))
            #expect((account.user.givenName, account.user.familyName) == ("Ann", "Lee"))
            #expect((account.identity.givenName, account.identity.familyName) == ("Ann", "Lee"))
            #expect(try await store.sessions(userID: first.user.id).count == 3)

            // Two first sign-ins of a new identity: the first creates the user, the second signs in to that user.
            let fresh = "\(run)-order-new"
            let firsts = [try plan(fresh, givenName: "Bo", token: "h.order3.s"), try plan(fresh, familyName: "Ray", token: "h.order4.s")]
            let created = try await sql.signInGroup(firsts)
            #expect(created[0] == .recorded(nil))
            guard case .recorded(let joined?) = created[1] else {
                Issue.record("the second first sign-in was not recorded: \(created)")
                return
            }
            let resolved = try #require(firsts[1].resolution(for: joined))
            #expect(!resolved.account.isNewUser)
            let newAccount = try #require(try await store.account(provider: "google", subject: fresh))
            #expect(resolved.account.user.id == newAccount.user.id)
            #expect((newAccount.user.givenName, newAccount.user.familyName) == ("Bo", "Ray"))
            #expect(try await store.sessions(userID: newAccount.user.id).count == 2)
        }
    }
}
