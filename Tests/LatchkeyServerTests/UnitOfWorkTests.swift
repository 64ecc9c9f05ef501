import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@testable import LatchkeyStore

/// A change, its audit event and its webhook deliveries are one unit of work: when the audit row cannot be written
/// (a trigger refuses it), the change rolls back with it and no delivery is owed; without the trigger all three commit.
@Suite("Server: each flow's change commits or rolls back with its audit event and webhook deliveries")
struct UnitOfWorkTests {
    static let endpoint = "https://backend.example/hooks"

    /// What the store holds that a flow adds to: audit events and owed deliveries.
    struct Records: Equatable {
        let audits: Int
        let deliveries: Int
    }

    static func records(_ harness: ServerHarness) async throws -> Records {
        Records(
            audits: try await harness.store.auditEvents(userID: nil, limit: 10_000).count,
            deliveries: try await harness.store.webhookDeliveries(status: nil, limit: 10_000).count)
    }

    /// Runs `body` while every audit insert fails, and checks that it wrote no audit event and owed no delivery.
    static func withFailingAudits(_ harness: ServerHarness, _ what: String, _ body: () async throws -> Void) async throws {
        let before = try await records(harness)
        try await harness.store.sqlWrite { db in
            try await db.raw("CREATE TRIGGER fail_audits BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'injected audit failure'); END").run()
        }
        do {
            try await body()
        } catch {
            Issue.record("\(what): \(error)")
        }
        try await harness.store.sqlWrite { db in try await db.raw("DROP TRIGGER fail_audits").run() }
        #expect(try await records(harness) == before, "\(what): an audit or delivery row was written without its change")
    }

    static func refused(_ answer: ServerHarness.Answer, _ what: String) {
        #expect(!(200..<300).contains(answer.status), "\(what) succeeded although its audit event could not be written: \(answer.text)")
    }

    @Test("logout, link, unlink, account deletion, reuse detection, a provider's account event and admin actions")
    func flowsRollBackTogether() async throws {
        try await ServerHarness.with(configure: {
            $0.webhooks = [WebhookEndpoint(url: Self.endpoint, secret: Secret(WebhookEndpoint.generateSecret()))]
            $0.session.reuseGraceWindow = 0
        }) { harness in
            let (_, jane) = try await harness.signedIn(email: "jane@example.com")
            let (_, admin) = try await AdminKeys(store: harness.store).create(name: "backend", readOnly: false)

            // Link: the identity, its grant, identity.linked and the audit event.
            try await Self.withFailingAudits(harness, "link") {
                let linked = try await harness.googleSignIn(email: "jane.g@example.com", path: "/v1/me/identities/google", bearer: jane.accessToken)
                Self.refused(linked, "link")
                #expect(try await harness.store.identities(userID: jane.user.id).count == 1)
            }
            let linked = try await harness.googleSignIn(email: "jane.g@example.com", path: "/v1/me/identities/google", bearer: jane.accessToken)
            #expect(linked.status == 200, "\(linked.text)")
            let google = try #require(try await harness.store.identities(userID: jane.user.id).first { $0.provider == "google" })

            // Unlink: the identity stays, with its sessions.
            try await Self.withFailingAudits(harness, "unlink") {
                Self.refused(try await harness.send("DELETE", "/v1/me/identities/google/\(google.subject)", bearer: jane.accessToken), "unlink")
                #expect(try await harness.store.identities(userID: jane.user.id).count == 2)
            }

            // Logout: the session stays live.
            try await Self.withFailingAudits(harness, "logout") {
                Self.refused(try await harness.send("POST", "/v1/logout", bearer: jane.accessToken), "logout")
                #expect(try await harness.store.session(id: jane.accessTokenSessionID)?.isRevoked == false)
            }

            // Reuse detection: the session is not revoked without its audit event and session.reuse_detected.
            let rotated = try await harness.refresh(jane.refreshToken).decode(TokenPairResponse.self)
            #expect(try await harness.refresh(rotated.refreshToken).status == 200)
            try await Self.withFailingAudits(harness, "reuse detection") {
                Self.refused(try await harness.refresh(jane.refreshToken), "reuse detection")
                #expect(try await harness.store.session(id: jane.accessTokenSessionID)?.isRevoked == false)
            }

            // Admin actions.
            try await Self.withFailingAudits(harness, "admin actions") {
                Self.refused(
                    try await harness.send("PUT", "/admin/v1/users/\(jane.user.id)/claims", body: #"{"plan":"pro"}"#, bearer: admin), "setting claims")
                #expect(try await harness.store.user(id: jane.user.id)?.claims == nil)
                Self.refused(try await harness.send("DELETE", "/admin/v1/users/\(jane.user.id)/sessions", bearer: admin), "revoking sessions")
                Self.refused(try await harness.send("DELETE", "/admin/v1/sessions/\(jane.accessTokenSessionID)", bearer: admin), "revoking a session")
                #expect(try await harness.store.session(id: jane.accessTokenSessionID)?.isRevoked == false)
                Self.refused(try await harness.send("POST", "/admin/v1/invites", body: "{}", bearer: admin), "creating an invite")
                #expect(try await harness.store.invites().isEmpty)
            }
            // The same with an invite and a failed delivery to act on, and a user to delete.
            let invite = try await harness.send("POST", "/admin/v1/invites", body: "{}", bearer: admin)
            let inviteID = try #require(invite.json["id"] as? String, "\(invite.text)")
            let failed = try #require(try await harness.store.webhookDeliveries(status: .pending, limit: 1).first)
            try await harness.store.sqlWrite { db in
                try await db.raw("UPDATE webhook_deliveries SET status = 'failed' WHERE id = \(bind: failed.id)").run()
            }
            let (_, carol) = try await harness.signedIn(email: "carol@example.com")
            try await Self.withFailingAudits(harness, "more admin actions") {
                Self.refused(try await harness.send("DELETE", "/admin/v1/invites/\(inviteID)", bearer: admin), "revoking an invite")
                #expect(try await harness.store.invites().first?.revokedAt == nil)
                Self.refused(try await harness.send("POST", "/admin/v1/webhooks/deliveries/\(failed.id)/retry", bearer: admin), "retrying a delivery")
                #expect(try await harness.store.webhookDeliveries(status: .failed, limit: 10).contains { $0.id == failed.id })
                Self.refused(try await harness.send("DELETE", "/admin/v1/users/\(carol.user.id)", bearer: admin), "deleting a user")
                #expect(try await harness.store.user(id: carol.user.id) != nil)
            }

            // A provider's account event: Bob's last identity and Bob stay.
            let (bobSub, bob) = try await harness.signedIn(email: "bob@example.com")
            try await Self.withFailingAudits(harness, "a provider's account event") {
                let event = ProviderAccountEvent(id: "event-1", provider: "apple", kind: .accountDeleted, subject: bobSub)
                let handled = try? await harness.server.sessions.events.handle(event)
                #expect(handled == nil, "the account event was applied although its audit event could not be written")
                let bobStays = try await harness.store.user(id: bob.user.id) != nil
                #expect(bobStays)
            }

            // Account deletion: the user stays, and no user.deleted is owed.
            try await Self.withFailingAudits(harness, "account deletion") {
                Self.refused(try await harness.send("DELETE", "/v1/me", bearer: bob.accessToken), "account deletion")
                #expect(try await harness.store.user(id: bob.user.id) != nil)
            }

            // Without the failure, each commits whole: its change, its audit event and its deliveries.
            let before = try await Self.records(harness)
            #expect(try await harness.send("DELETE", "/v1/me/identities/google/\(google.subject)", bearer: jane.accessToken).status == 200)
            #expect(try await harness.send("DELETE", "/v1/me", bearer: bob.accessToken).status == 200)
            let after = try await Self.records(harness)
            #expect(after.audits == before.audits + 2 && after.deliveries == before.deliveries + 2, "\(before) → \(after)")
        }
    }
}

extension SignInResponse {
    /// The session the access token belongs to (its `sid`).
    var accessTokenSessionID: String {
        let payload = accessToken.split(separator: ".")[1]
        return (jsonSegment(payload)["sid"] as? String) ?? ""
    }
}
