import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Synchronization
import Testing

@testable import LatchkeyStore

/// A refresh reads its session as it rotates the token, in one step of the store, unless the provider authorization
/// of the session's identity may need validating or the token is another client's: then it reads first.
extension StoreConformanceTests {
    func sessionService(_ store: any AuthStore) async throws -> SessionService {
        let box = try SecretBox(base64Key: SecretBox.generateKey())
        let keys = AccessTokenKeys(propagationDelay: 0)
        try await keys.load([try AccessTokenKeys.generateRecord(box: box, now: Date())], box: box)
        return SessionService(store: store, accessTokens: AccessTokenService(issuer: "https://id.example.com", audience: "api", keys: keys), box: box)
    }

    @Test("a refresh takes one store step once its identity is known not to need validating; reads first otherwise", arguments: kinds)
    func oneStepRefresh(kind: Kind) async throws {
        try await withStore(kind) { store in
            let sql = try #require(store as? SQLAuthStore)
            let service = try await sessionService(store)
            let (user, identity) = try await makeUser(store)
            var token = try await service.issuer.startSession(userID: user.id, identityID: identity.id, clientID: "app", userAgent: nil).refreshToken

            // The first refresh of an identity this instance knows nothing about reads the session (and the grant) first.
            token = try await service.refresh(token).refreshToken
            #expect(sql.tokenLookupCount == 1)
            for _ in 0..<5 { token = try await service.refresh(token).refreshToken }
            #expect(sql.tokenLookupCount == 1)

            // A session without an identity needs no validation at all.
            var plain = try await service.issuer.startSession(userID: user.id, identityID: nil, clientID: "app", userAgent: nil).refreshToken
            for _ in 0..<3 { plain = try await service.refresh(plain).refreshToken }
            #expect(sql.tokenLookupCount == 1)

            // Another client's token endpoint: refused after a read, and the token is left as it was.
            await #expect(throws: LatchkeyError.self) { try await service.refresh(token, forClient: "other") }
            #expect(sql.tokenLookupCount == 2)
            let refused = await #expect(throws: LatchkeyError.self) { try await service.refresh(token, forClient: "other") }
            #expect(refused?.reason.contains("another client") == true)
            token = try await service.refresh(token, forClient: "app").refreshToken

            // A revoked session is refused in the one step, with the revocation's reason.
            try await store.revokeSessions(userID: user.id, reason: "signed_out", at: Date())
            let revoked = await #expect(throws: LatchkeyError.self) { try await service.refresh(token) }
            #expect(revoked?.code == .invalidGrant)
            #expect(revoked?.reason.contains("signed_out") == true)
            #expect(sql.tokenLookupCount == 3)
        }
    }

    @Test("a rotation whose condition refuses the session changes nothing; the successor joins the presented token's session", arguments: kinds)
    func declinedRotation(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-d0")
            var next = successor(family, parent: "\(run)-d0", hash: "\(run)-d1")
            next.familyID = "not-the-family"
            let seen = Mutex<SessionFamily?>(nil)
            let declined = try await store.rotate(presentedHash: "\(run)-d0", successor: next, now: Self.now, graceWindow: 10) { family in
                seen.withLock { $0 = family }
                return false
            }
            #expect(declined == .declined(family))
            #expect(seen.withLock { $0 } == family)
            let (untouched, _) = try #require(try await store.refreshToken(hash: "\(run)-d0"))
            #expect(untouched.rotatedAt == nil)
            #expect(try await store.refreshToken(hash: "\(run)-d1") == nil)

            let rotated = try await store.rotate(presentedHash: "\(run)-d0", successor: next, now: Self.now, graceWindow: 10) { _ in true }
            guard case .rotated = rotated else {
                Issue.record("expected a rotation, got \(rotated)")
                return
            }
            let (stored, storedFamily) = try #require(try await store.refreshToken(hash: "\(run)-d1"))
            #expect(stored.familyID == family.id)
            #expect(storedFamily.id == family.id)
            // An unknown token is unknown, whatever the condition.
            #expect(try await store.rotate(presentedHash: "\(run)-none", successor: next, now: Self.now, graceWindow: 10) { _ in false } == .unknown)
        }
    }
}
