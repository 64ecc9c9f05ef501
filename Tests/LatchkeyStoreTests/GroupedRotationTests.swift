import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Testing

@testable import LatchkeyStore

/// Rotations that arrive together share one transaction and a few statements; each must still get exactly what
/// it would have got alone.
extension StoreConformanceTests {

    @Test("many sessions rotating at once: grouped, each rotated once, successors stored, old tokens reused after grace", arguments: kinds)
    func groupedRotations(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let pairs = try await sessionsToRotate(store, user: user, identity: identity, count: 120, prefix: "g")
            let results = try await rotateAll(store, pairs, at: Self.now.addingTimeInterval(120))
            #expect(results.allSatisfy { if case .rotated = $0 { true } else { false } })
            #expect(try #require(store as? SQLAuthStore).largestRotationGroup > 1)
            for (presented, next) in pairs {
                let (old, _) = try #require(try await store.refreshToken(hash: presented))
                #expect(old.successorHash == next.hash)
                let (stored, family) = try #require(try await store.refreshToken(hash: next.hash))
                #expect(stored.rotatedAt == nil)
                #expect(stored.parentHash == presented)
                // Two minutes after the last use: written once for the group.
                #expect(family.lastUsedAt == Self.now.addingTimeInterval(120))
            }
            let nextPairs = pairs.map { _, next in
                (
                    next.hash,
                    RefreshTokenRecord(
                        hash: newIdentifier(), familyID: next.familyID, parentHash: next.hash, createdAt: Self.now, idleExpiresAt: next.idleExpiresAt)
                )
            }
            let again = try await rotateAll(store, nextPairs, at: Self.now.addingTimeInterval(130))
            #expect(again.allSatisfy { if case .rotated = $0 { true } else { false } })
            let reused = try await rotateAll(store, pairs, at: Self.now.addingTimeInterval(200))
            #expect(reused.allSatisfy { if case .reuseDetected = $0 { true } else { false } })
            #expect(try await store.sessions(userID: user.id).allSatisfy { $0.revocationReason == RotationRule.reuseReason })
        }
    }

    @Test("one token twice in a group: the same successor is a retry, another successor revokes the session", arguments: kinds)
    func tokenTwiceInAGroup(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-t0")
            let next = successor(family, parent: "\(run)-t0")
            let other = successor(family, parent: "\(run)-t0")
            // Twenty other sessions keep the batcher busy, so the three requests below queue up together.
            var pairs = try await sessionsToRotate(store, user: user, identity: identity, count: 20, prefix: "b")
            pairs += [("\(run)-t0", next), ("\(run)-t0", next), ("\(run)-t0", other)]
            let results = try await rotateAll(store, pairs, at: Self.now)
            let mine = results.suffix(3)
            #expect(mine.filter { if case .rotated = $0 { true } else { false } }.count == 1)
            #expect(try await store.session(id: family.id)?.revocationReason == RotationRule.reuseReason)
            #expect(results.prefix(20).allSatisfy { if case .rotated = $0 { true } else { false } })
        }
    }

    @Test("a request that fails in a group fails alone: the others in its group rotate", arguments: kinds)
    func failureInAGroup(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            var pairs = try await sessionsToRotate(store, user: user, identity: identity, count: 40, prefix: "f")
            // A successor whose hash is taken by another live token cannot be stored.
            let clash = try await makeSession(store, user: user, identity: identity, hash: "\(run)-taken")
            pairs[17].1 = successor(clash, parent: pairs[17].0, hash: "\(run)-taken")
            let outcomes = await withTaskGroup(of: (Int, Result<RotationResult, any Error>).self) { group in
                for (index, (presented, next)) in pairs.enumerated() {
                    group.addTask {
                        do { return (index, .success(try await store.rotate(presentedHash: presented, successor: next, now: Self.now, graceWindow: 10))) } catch
                        {
                            return (index, .failure(error))
                        }
                    }
                }
                return await group.reduce(into: [Int: Result<RotationResult, any Error>]()) { $0[$1.0] = $1.1 }
            }
            for (index, outcome) in outcomes {
                if index == 17 {
                    #expect(throws: AuthStoreError.duplicate) { try outcome.get() }
                } else {
                    guard case .success(.rotated) = outcome else { Issue.record("request \(index): \(outcome)"); continue }
                }
            }
            // Nothing of the failed request was kept.
            #expect(try await store.refreshToken(hash: pairs[17].0)?.0.rotatedAt == nil)
        }
    }

    /// `count` new sessions of the user: each first token's hash with a successor for it.
    private func sessionsToRotate(_ store: any AuthStore, user: UserAccount, identity: LinkedIdentity, count: Int, prefix: String) async throws
        -> [(String, RefreshTokenRecord)]
    {
        var pairs: [(String, RefreshTokenRecord)] = []
        for index in 0..<count {
            let hash = "\(run)-\(prefix)\(index)"
            pairs.append((hash, successor(try await makeSession(store, user: user, identity: identity, hash: hash), parent: hash)))
        }
        return pairs
    }

    /// Rotates every pair at once; results in the order of `pairs`.
    private func rotateAll(_ store: any AuthStore, _ pairs: [(String, RefreshTokenRecord)], at now: Date) async throws -> [RotationResult] {
        try await withThrowingTaskGroup(of: (Int, RotationResult).self) { group in
            for (index, (presented, next)) in pairs.enumerated() {
                group.addTask { (index, try await store.rotate(presentedHash: presented, successor: next, now: now, graceWindow: 10)) }
            }
            return try await group.reduce(into: [RotationResult](repeating: .unknown, count: pairs.count)) { $0[$1.0] = $1.1 }
        }
    }
}

extension StoreConformanceTests {
    @Test("64 sessions rotating in a loop for 3 s: every token read back at once and rotated once, never unknown", arguments: kinds)
    func rotationLoop(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            var firsts: [(String, SessionFamily)] = []
            for index in 0..<64 {
                let hash = "\(run)-l\(index)-0"
                firsts.append((hash, try await makeSession(store, user: user, identity: identity, hash: hash)))
            }
            let deadline = ContinuousClock.now + .seconds(3)
            let counts = try await withThrowingTaskGroup(of: Int.self) { group in
                for (first, family) in firsts {
                    group.addTask {
                        var current = first
                        var count = 0
                        while ContinuousClock.now < deadline {
                            guard try await store.refreshToken(hash: current) != nil else {
                                Issue.record("\(current) not found after \(count) rotations")
                                return count
                            }
                            let next = successor(family, parent: current)
                            let result = try await store.rotate(presentedHash: current, successor: next, now: Self.now, graceWindow: 10)
                            guard case .rotated = result else {
                                Issue.record("\(current) after \(count) rotations: \(result)")
                                return count
                            }
                            current = next.hash
                            count += 1
                        }
                        return count
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(counts.allSatisfy { $0 > 0 })
        }
    }
}

extension StoreConformanceTests {
    @Test("look-ups that arrive together share one query: each gets its own token and session, unknown ones nil", arguments: kinds)
    func groupedLookups(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            var families: [String: String] = [:]
            for index in 0..<60 {
                let hash = "\(run)-k\(index)"
                families[hash] = try await makeSession(store, user: user, identity: identity, hash: hash).id
            }
            // Every known hash twice, and as many unknown ones.
            let asked = families.keys.flatMap { [$0, $0, "\($0)-unknown"] }.shuffled()
            let answers = try await withThrowingTaskGroup(of: (String, String?).self) { group in
                for hash in asked { group.addTask { (hash, try await store.refreshToken(hash: hash).map { "\($0.0.hash) \($0.1.id)" }) } }
                return try await group.reduce(into: [(String, String?)]()) { $0.append($1) }
            }
            #expect(answers.count == asked.count)
            for (hash, answer) in answers {
                #expect(answer == families[hash].map { "\(hash) \($0)" })
            }
            #expect(try #require(store as? SQLAuthStore).largestLookupGroup > 1)
        }
    }
}

extension StoreConformanceTests {
    @Test("PostgreSQL: one token rotated by two stores at once gives one rotation and one retry, never a reuse")
    func twoStoresOneToken() async throws {
        guard let url = ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] else { return }
        try await withStore(.postgres) { store in
            let other = try await SQLAuthStore.open(.postgres(url: url))
            defer { Task { await other.close() } }
            let (user, identity) = try await makeUser(store)
            var outcomes: [String] = []
            for round in 0..<20 {
                let hash = "\(run)-two\(round)"
                let next = successor(try await makeSession(store, user: user, identity: identity, hash: hash), parent: hash)
                async let first = store.rotate(presentedHash: hash, successor: next, now: Self.now, graceWindow: 10)
                async let second = other.rotate(presentedHash: hash, successor: next, now: Self.now, graceWindow: 10)
                let results = try await [first, second]
                outcomes.append(
                    results.map { if case .rotated = $0 { "rotated" } else if case .retried = $0 { "retried" } else { "\($0)" } }.sorted().joined(
                        separator: "+"))
            }
            #expect(outcomes.allSatisfy { $0 == "retried+rotated" }, "\(outcomes)")
        }
    }
}
