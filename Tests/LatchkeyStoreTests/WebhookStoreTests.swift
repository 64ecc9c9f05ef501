import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyStore
import Testing

/// Webhook deliveries: written with the change they tell of (and never without it), claimed by one caller at a time,
/// finished once, retried on request.
extension StoreConformanceTests {
    func endpoints(_ name: String) -> WebhookEndpoints {
        WebhookEndpoints([WebhookEndpoint(url: "https://\(run)-\(name).example/hooks", secret: "whsec_unused")])
    }

    func deliveries(_ store: any AuthStore, _ endpoints: WebhookEndpoints) async throws -> [WebhookDelivery] {
        let url = endpoints.endpoints[0].url
        return try await store.webhookDeliveries(status: nil, limit: 10_000).filter { $0.endpoint == url }
    }

    /// Writes `change` and, when it happened, `notices`, in one unit of work, as the flows do; returns whether it happened.
    func write(
        _ store: any AuthStore, notifying notices: [WebhookDelivery], _ change: @escaping @Sendable (any StoreTransaction) async throws -> Bool
    ) async throws -> Bool {
        try await store.write { tx in
            guard try await change(tx) else { return false }
            try await tx.enqueue(notices)
            return true
        }
    }

    func unlink(_ store: any AuthStore, _ identityID: String, of userID: String, notifying notices: [WebhookDelivery]) async throws -> IdentityUnlink {
        try await store.write { tx in
            let unlink = try await tx.unlinkIdentity(id: identityID, userID: userID, reason: "test", at: Self.now)
            if case .unlinked = unlink { try await tx.enqueue(notices) }
            return unlink
        }
    }

    @Test("each change writes its deliveries with it; a change that does not happen writes none", arguments: kinds)
    func deliveriesWithTheirChange(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hooks = endpoints("changes")
            let (user, identity) = try await makeUser(store)
            let now = Self.now
            // A new identity: linked and notified together; the same account linked again: neither.
            let google = LinkedIdentity(
                id: newIdentifier(), userID: user.id, provider: "google", subject: "\(run)-g", firstSeenAt: now, lastSignInAt: now)
            try await store.write { tx in
                try await tx.addIdentity(google)
                try await tx.enqueue(hooks.deliveries(.identity(.identityLinked, google, at: now)))
            }
            var again = google
            again.id = newIdentifier()
            let twice = again
            await #expect(throws: AuthStoreError.duplicate) {
                try await store.write { tx in
                    try await tx.addIdentity(twice)
                    try await tx.enqueue(hooks.deliveries(.identity(.identityLinked, twice, at: now)))
                }
            }
            #expect(try await deliveries(store, hooks).map(\.kind) == ["identity.linked"])

            // Unlinking: notified when it unlinks, not when it refuses (the last identity) or finds nothing.
            let unlinked = hooks.deliveries(.identity(.identityUnlinked, google, at: now))
            #expect(try await unlink(store, google.id, of: user.id, notifying: unlinked) == .unlinked(nil))
            #expect(
                try await unlink(store, identity.id, of: user.id, notifying: hooks.deliveries(.identity(.identityUnlinked, identity, at: now)))
                    == .lastIdentity)
            #expect(
                try await unlink(store, google.id, of: user.id, notifying: hooks.deliveries(.identity(.identityUnlinked, google, at: now)))
                    == .notFound)
            #expect(try await deliveries(store, hooks).map(\.kind).sorted() == ["identity.linked", "identity.unlinked"])

            // A grant deleted only while it holds the token; an identity and a user deleted only while there.
            let grant = ProviderGrant(
                identityID: identity.id, provider: "apple", clientID: "c", sealedRefreshToken: "v1.t", lastValidatedAt: now, createdAt: now)
            try await store.saveProviderGrant(grant)
            let revoked = hooks.deliveries(.identity(.identityRevoked, identity, at: now))
            #expect(try await !write(store, notifying: revoked) { try await $0.deleteProviderGrant(identityID: identity.id, sealedRefreshToken: "v1.other") })
            #expect(try await write(store, notifying: revoked) { try await $0.deleteProviderGrant(identityID: identity.id, sealedRefreshToken: "v1.t") })
            #expect(
                try await write(store, notifying: hooks.deliveries(.emailChanged(user.id, provider: "apple", email: "n@example.com", verified: true, at: now)))
                {
                    try await $0.updateIdentity(identity)
                })
            let identityRevoked = hooks.deliveries(.identity(.identityRevoked, identity, at: now))
            #expect(try await write(store, notifying: identityRevoked) { try await $0.deleteIdentity(id: identity.id) })
            #expect(try await !write(store, notifying: identityRevoked) { try await $0.deleteIdentity(id: identity.id) })
            let emailGone = hooks.deliveries(.emailChanged(user.id, provider: "apple", email: nil, verified: nil, at: now))
            #expect(try await !write(store, notifying: emailGone) { try await $0.updateIdentity(identity) })
            let userDeleted = hooks.deliveries(.userDeleted(user.id, reason: .admin, at: now))
            #expect(try await write(store, notifying: userDeleted) { try await $0.deleteUser(id: user.id) })
            #expect(try await !write(store, notifying: userDeleted) { try await $0.deleteUser(id: user.id) })
            #expect(
                try await deliveries(store, hooks).map(\.kind).sorted() == [
                    "identity.linked", "identity.revoked", "identity.revoked", "identity.unlinked", "user.deleted", "user.email_changed",
                ])
            #expect(try await deliveries(store, hooks).allSatisfy { $0.status == .pending && $0.attempts == 0 })
        }
    }

    @Test("a sign-in's deliveries are written with it, and a sign-in that loses its race writes none", arguments: kinds)
    func signInDeliveries(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hooks = endpoints("sign-in")
            let subject = "\(run)-hooked"
            var first = signInRecord(subject: subject)
            guard case .create(let user, _) = first.account else { throw CancellationError() }
            first.notices = hooks.deliveries(.userCreated(user.id, provider: "google", at: Self.now))
            try await store.recordSignIn(first)
            var again = signInRecord(subject: subject)
            guard case .create(let loser, _) = again.account else { throw CancellationError() }
            again.notices = hooks.deliveries(.userCreated(loser.id, provider: "google", at: Self.now))
            await #expect(throws: AuthStoreError.duplicate) { try await store.recordSignIn(again) }
            #expect(try await deliveries(store, hooks).map(\.userID) == [user.id])
        }
    }

    @Test("a session revoked for reuse writes its deliveries with the revocation; a rotation does not", arguments: kinds)
    func reuseDeliveries(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hooks = endpoints("reuse")
            let (user, identity) = try await makeUser(store)
            let family = try await makeSession(store, user: user, identity: identity, hash: "\(run)-r0")
            let reuse = ReuseNotice(at: Self.now, origin: RequestOrigin(ip: "192.0.2.1", userAgent: "UA"), webhooks: hooks)
            let first = successor(family, parent: "\(run)-r0", hash: "\(run)-r1")
            let rotated = try await store.rotate(
                presentedHash: "\(run)-r0", successor: first, now: Self.now, graceWindow: 0, accepting: nil, reuse: reuse)
            #expect(rotated == .rotated(try #require(try await store.session(id: family.id))))
            _ = try await store.rotate(
                presentedHash: "\(run)-r1", successor: successor(family, parent: "\(run)-r1", hash: "\(run)-r2"), now: Self.now, graceWindow: 0,
                accepting: nil, reuse: reuse)
            #expect(try await deliveries(store, hooks).isEmpty)
            let replay = try await store.rotate(
                presentedHash: "\(run)-r0", successor: successor(family, parent: "\(run)-r0"), now: Self.now.addingTimeInterval(1), graceWindow: 0,
                accepting: nil, reuse: reuse)
            guard case .reuseDetected = replay else { throw CancellationError() }
            let written = try await deliveries(store, hooks)
            #expect(written.map(\.kind) == ["session.reuse_detected"])
            let audited = try await store.auditEvents(userID: user.id, limit: 10).filter { $0.kind == "refresh_token_reuse" }
            #expect(audited.map(\.detail) == ["session=\(family.id); the session was revoked"])
            #expect(written.first?.payload.contains(#""sessionId":"\#(family.id)""#) == true)
        }
    }

    @Test("deliveries: claimed by one caller until the lease ends, finished once, retried on request, counted per endpoint", arguments: kinds)
    func deliveryLifecycle(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hooks = endpoints("lifecycle")
            let url = hooks.endpoints[0].url
            let events = (0..<6).map { LifecycleEvent.userCreated("u\($0)", provider: "apple", at: Self.now.addingTimeInterval(Double($0))) }
            let written = hooks.deliveries(events)
            try await store.enqueueWebhookDeliveries(written)
            await #expect(throws: AuthStoreError.duplicate) { try await store.enqueueWebhookDeliveries([written[0]]) }
            try await store.enqueueWebhookDeliveries([])

            // Ten callers at once, two each: each due delivery goes to one of them.
            let lease = Self.now.addingTimeInterval(60)
            let claims = try await withThrowingTaskGroup(of: [WebhookDelivery].self) { group in
                for _ in 0..<10 {
                    group.addTask {
                        try await store.claimDueWebhookDeliveries(now: Self.now.addingTimeInterval(10), limit: 2, leaseUntil: lease, endpoints: [url])
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }.filter { $0.endpoint == url }
            #expect(claims.map(\.id).sorted() == written.map(\.id).sorted())
            #expect(
                try await store.claimDueWebhookDeliveries(now: Self.now.addingTimeInterval(59), limit: 100, leaseUntil: lease, endpoints: [url]).isEmpty)

            // Delivered and failed ones stay so: a late report of an expired lease changes nothing.
            var delivered = claims[0]
            (delivered.status, delivered.attempts, delivered.finishedAt) = (.delivered, 1, Self.now)
            try await store.updateWebhookDelivery(delivered)
            var late = claims[0]
            (late.attempts, late.lastError, late.nextAttemptAt) = (1, "HTTP 503", Self.now)
            try await store.updateWebhookDelivery(late)
            var failed = claims[1]
            (failed.status, failed.attempts, failed.lastError, failed.finishedAt) = (.failed, 10, "timeout", Self.now)
            try await store.updateWebhookDelivery(failed)
            var retrying = claims[2]
            (retrying.attempts, retrying.lastError, retrying.nextAttemptAt) = (1, "HTTP 500", Self.now.addingTimeInterval(5))
            try await store.updateWebhookDelivery(retrying)

            let stored = Dictionary(uniqueKeysWithValues: try await deliveries(store, hooks).map { ($0.id, $0) })
            #expect(stored[delivered.id] == delivered)
            #expect(stored[failed.id] == failed)
            #expect(stored[retrying.id] == retrying)
            let counts = try await store.webhookDeliveryCounts().filter { $0.endpoint == url }
            #expect(counts.map(\.status) == [.delivered, .failed, .pending])
            #expect(counts.map(\.count) == [1, 1, 4])
            #expect(try await store.webhookDeliveries(status: .failed, limit: 100).contains(failed))

            // Retried: due at once with a fresh count; a delivered one is not sent again, a pending one keeps its schedule,
            // an unknown one is not found.
            #expect(try await store.retryWebhookDelivery(id: failed.id, at: Self.now.addingTimeInterval(100)))
            #expect(try await !store.retryWebhookDelivery(id: delivered.id, at: Self.now))
            #expect(try await !store.retryWebhookDelivery(id: retrying.id, at: Self.now))
            #expect(try await !store.retryWebhookDelivery(id: "\(run)-none", at: Self.now))
            // Only the endpoints asked for: another instance's endpoint is left to it.
            #expect(
                try await store.claimDueWebhookDeliveries(
                    now: Self.now.addingTimeInterval(100), limit: 100, leaseUntil: lease, endpoints: ["https://\(run)-elsewhere.example/"]
                ).isEmpty)
            let again = try await store.claimDueWebhookDeliveries(now: Self.now.addingTimeInterval(100), limit: 100, leaseUntil: lease, endpoints: [url])
            // The retried one, the one waiting for its retry, and those whose lease ran out.
            #expect(again.map(\.id).sorted() == written.map(\.id).filter { $0 != delivered.id }.sorted())
            #expect(again.first { $0.id == failed.id }.map { ($0.status, $0.attempts, $0.finishedAt) } ?? (.failed, 1, nil) == (.pending, 0, nil))
        }
    }
}

extension StoreConformanceTests {
    @Test("the sweep drops deliveries delivered 7 days ago and failed 30 days ago, and keeps pending ones", arguments: kinds)
    func sweptDeliveries(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hooks = endpoints("sweep")
            let events = (0..<4).map { LifecycleEvent.userCreated("u\($0)", provider: "apple", at: Self.now) }
            var written = hooks.deliveries(events)
            (written[0].status, written[0].finishedAt) = (.delivered, Self.now)
            (written[1].status, written[1].finishedAt) = (.failed, Self.now)
            (written[2].status, written[2].finishedAt) = (.failed, Self.now.addingTimeInterval(20 * 86_400))
            try await store.enqueueWebhookDeliveries(written)
            try await store.sweep(now: Self.now.addingTimeInterval(7 * 86_400 - 1))
            #expect(try await deliveries(store, hooks).count == 4)
            try await store.sweep(now: Self.now.addingTimeInterval(30 * 86_400))
            #expect(try await deliveries(store, hooks).map(\.id).sorted() == [written[2].id, written[3].id].sorted())
        }
    }
}

extension StoreConformanceTests {
    @Test("a sign-in with a new verified e-mail changes the user's and tells the backend; an unverified one or the same one does not", arguments: kinds)
    func emailChangedAtSignIn(kind: Kind) async throws {
        try await withStore(kind) { store in
            let plain = try await sessionService(store)
            var policy = SessionPolicy()
            let hooks = endpoints("email")
            policy.webhooks = hooks
            let signIns = SessionService(store: store, accessTokens: plain.accessTokens, box: plain.grants.box, policy: policy).signIns
            let subject = "\(run)-mail"
            func signIn(_ email: String, verified: Bool) async throws -> UserAccount {
                var identity = googleIdentity(subject, email: email)
                identity.emailVerified = verified
                return try await signIns.signIn(identity: identity, provider: "google").user
            }
            let first = try await signIn("old@example.com", verified: true)
            #expect(try await deliveries(store, hooks).map(\.kind) == ["user.created"])
            #expect(try await signIn("old@example.com", verified: true).email == "old@example.com")
            #expect(try await signIn("unverified@example.com", verified: false).email == "old@example.com")
            #expect(try await deliveries(store, hooks).count == 1)
            let changed = try await signIn("new@example.com", verified: true)
            #expect(changed.id == first.id)
            #expect(changed.email == "new@example.com")
            #expect(try await store.user(id: first.id)?.email == "new@example.com")
            let notices = try await deliveries(store, hooks).filter { $0.kind == "user.email_changed" }
            #expect(notices.count == 1)
            #expect(notices.first?.payload.contains(#""email":"new@example.com""#) == true)
        }
    }
}

extension StoreConformanceTests {
    @Test("a sign-in group's deliveries to many endpoints are written in pieces the databases accept", arguments: kinds)
    func manyDeliveries(kind: Kind) async throws {
        try await withStore(kind) { store in
            let many = WebhookEndpoints((0..<40).map { WebhookEndpoint(url: "https://\(run)-\($0).example/hooks", secret: "whsec_unused") })
            let events = (0..<100).map { LifecycleEvent.userCreated("u\($0)", provider: "apple", at: Self.now) }
            try await store.enqueueWebhookDeliveries(many.deliveries(events))  // 4,000 rows, 48,000 values
            let counts = try await store.webhookDeliveryCounts().filter { $0.endpoint.hasPrefix("https://\(run)-") }
            #expect(counts.reduce(0) { $0 + $1.count } == 4_000)
        }
    }

    @Test("of two deletions of one user at once, one writes user.deleted", arguments: kinds)
    func oneDeletionNotice(kind: Kind) async throws {
        try await withStore(kind) { store in
            let hooks = endpoints("twice")
            let (user, _) = try await makeUser(store)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        _ = try await write(store, notifying: hooks.deliveries(.userDeleted(user.id, reason: .admin, at: Self.now))) {
                            try await $0.deleteUser(id: user.id)
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await deliveries(store, hooks).count == 1)
        }
    }
}
