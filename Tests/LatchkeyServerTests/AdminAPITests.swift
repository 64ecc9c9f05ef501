import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// The admin API: off until a key exists, every key checked, every write audited, every bad input a 4xx.
@Suite("Server: the admin API")
struct AdminAPITests {
    /// A token's claims, unverified (the server verified it; the test reads what it says).
    static func claims(_ token: String) throws -> [String: Any] {
        let jws = try CompactJWS(parsing: token, maximumSize: 16_384)
        return try #require(try JSONSerialization.jsonObject(with: Data(jws.payload)) as? [String: Any])
    }

    @Test("no key: every /admin path is 404; with keys: none, a wrong, truncated or revoked key is 401, a read-only key writing is 403")
    func keys() async throws {
        try await ServerHarness.with { harness in
            let admin = AdminKeys(store: harness.store)
            for path in ["/admin/v1/users", "/admin/v1/audit", "/admin/v1/invites"] {
                #expect(try await harness.send("GET", path).status == 404)
                #expect(try await harness.send("GET", path, bearer: "lka_" + String(repeating: "A", count: 43)).status == 404)
            }
            let (_, secret) = try await admin.create(name: "backend", readOnly: false)
            let (_, reader) = try await admin.create(name: "support", readOnly: true)
            #expect(secret.hasPrefix("lka_") && secret.count == 47)
            await #expect(throws: AuthStoreError.duplicate) { _ = try await admin.create(name: "backend", readOnly: true) }
            await #expect(throws: LatchkeyError.self) { _ = try await admin.create(name: "has space", readOnly: true) }

            #expect(try await harness.send("GET", "/admin/v1/users", bearer: secret).status == 200)
            let missing = try await harness.send("GET", "/admin/v1/users")
            #expect((missing.status, missing.error) == (401, "invalid_token"))
            #expect(missing.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            for wrong in [String(secret.dropLast()), String(secret.dropLast()) + "x", secret + "A", "lka_", "Bearer", String(repeating: "A", count: 47)] {
                #expect(try await harness.send("GET", "/admin/v1/users", bearer: wrong).status == 401, "\(wrong.prefix(8))")
            }
            // An access token is not an admin key.
            let (_, tokens) = try await harness.signedIn()
            #expect(try await harness.send("GET", "/admin/v1/users", bearer: tokens.accessToken).status == 401)

            #expect(try await harness.send("GET", "/admin/v1/invites", bearer: reader).status == 200)
            let refused = try await harness.send("POST", "/admin/v1/invites", body: "{}", bearer: reader)
            #expect((refused.status, refused.error) == (403, "insufficient_scope"))
            #expect(try await harness.send("DELETE", "/admin/v1/users/\(tokens.user.id)", bearer: reader).status == 403)
            #expect(try await harness.store.user(id: tokens.user.id) != nil)

            #expect(try await harness.store.revokeAdminKey(name: "support", at: harness.clock.now))
            #expect(try await harness.send("GET", "/admin/v1/invites", bearer: reader).status == 401)
            // Every key revoked: keys exist, so a revoked one is still refused (401), not hidden (404).
            #expect(try await harness.store.revokeAdminKey(name: "backend", at: harness.clock.now))
            #expect(try await harness.send("GET", "/admin/v1/users", bearer: secret).status == 401)
        }
    }

    @Test("users: pages by cursor, found by e-mail, by provider and subject, by creation time; one user with identities, sessions and claims")
    func users() async throws {
        try await ServerHarness.with { harness in
            let (_, secret) = try await AdminKeys(store: harness.store).create(name: "backend", readOnly: true)
            var made: [SignInResponse] = []
            for index in 0..<5 { made.append(try await harness.signedIn(email: "user\(index)@example.com").tokens) }
            func list(_ query: String) async throws -> AdminUserList {
                let answer = try await harness.send("GET", "/admin/v1/users" + query, bearer: secret)
                #expect(answer.status == 200, "\(query): \(answer.text)")
                return try answer.decode(AdminUserList.self)
            }
            let first = try await list("?limit=2")
            #expect(first.users.map(\.id) == made.prefix(2).map(\.user.id))
            let second = try await list("?limit=2&cursor=\(try #require(first.nextCursor))")
            #expect(second.users.map(\.id) == made[2..<4].map(\.user.id))
            let last = try await list("?limit=2&cursor=\(try #require(second.nextCursor))")
            #expect(last.users.map(\.id) == [made[4].user.id])
            #expect(last.nextCursor == nil)

            #expect(try await list("?email=USER3@example.com").users.map(\.id) == [made[3].user.id])
            #expect(try await list("?email=nobody@example.com").users.isEmpty)
            let subject = try #require(made[1].user.identities.first?.subject)
            #expect(try await list("?provider=apple&subject=\(subject)").users.map(\.id) == [made[1].user.id])
            #expect(try await list("?provider=google&subject=\(subject)").users.isEmpty)
            #expect(try await list("?createdAfter=2100-01-01T00:00:00Z").users.isEmpty)
            #expect(try await list("?createdAfter=2000-01-01T00:00:00.000Z").users.count == 5)

            for bad in [
                "?limit=0", "?limit=201", "?limit=ten", "?subject=x", "?createdAfter=yesterday", "?sort=email", "?limit=1&limit=2", "?email=",
                "?email=a%00b", "?cursor=%00",
            ] {
                let answer = try await harness.send("GET", "/admin/v1/users" + bad, bearer: secret)
                #expect((answer.status, answer.error) == (400, "invalid_request"), "\(bad): \(answer.text)")
            }

            let shown = try await harness.send("GET", "/admin/v1/users/\(made[0].user.id)", bearer: secret).decode(AdminUserResponse.self)
            #expect(shown.identities.map(\.provider) == ["apple"])
            #expect(shown.sessions?.count == 1)
            #expect(shown.claims == [:])
            #expect(try await harness.send("GET", "/admin/v1/users/nobody", bearer: secret).status == 404)
            #expect(try await harness.send("GET", "/admin/v1/users/a%00b", bearer: secret).status == 404)
        }
    }

    @Test("claims: stored, carried by the next access token beside auth_time and idp, shown by /v1/me; hostile objects are 400 invalid_claims")
    func claims() async throws {
        try await ServerHarness.with { harness in
            let (_, secret) = try await AdminKeys(store: harness.store).create(name: "backend", readOnly: false)
            let (_, jane) = try await harness.signedIn()
            let before = try Self.claims(jane.accessToken)
            #expect(before["idp"] as? String == "apple")
            let started = try #require(before["auth_time"] as? Int)
            #expect(abs(Double(started) - harness.clock.now.timeIntervalSince1970) < 2)
            #expect(before["plan"] == nil)

            let set = try await harness.send(
                "PUT", "/admin/v1/users/\(jane.user.id)/claims", body: #"{"plan":"pro","app_roles":["editor"],"limits":{"seats":5,"trial":false}}"#,
                bearer: secret)
            #expect(set.status == 200, "\(set.text)")
            harness.clock.advance(60)
            let refreshed = try await harness.refresh(jane.refreshToken).decode(TokenPairResponse.self)
            let after = try Self.claims(refreshed.accessToken)
            #expect(after["plan"] as? String == "pro")
            #expect(after["app_roles"] as? [String] == ["editor"])
            #expect((after["limits"] as? [String: Any])?["seats"] as? Int == 5)
            #expect(after["auth_time"] as? Int == started)  // when the session began, not the refresh
            #expect(after["idp"] as? String == "apple")
            #expect(after["sub"] as? String == jane.user.id)
            let me = try await harness.send("GET", "/v1/me", bearer: refreshed.accessToken)
            #expect(me.status == 200)
            #expect(try me.decode(UserResponse.self).claims?["plan"] == .string("pro"))
            // A new sign-in's first token carries them too; an empty object clears them.
            let again = try await harness.signIn(sub: jane.user.identities[0].subject).decode(SignInResponse.self)
            #expect(try Self.claims(again.accessToken)["plan"] as? String == "pro")
            #expect(try await harness.send("PUT", "/admin/v1/users/\(jane.user.id)/claims", body: "{}", bearer: secret).status == 200)
            #expect(try Self.claims(try await harness.refresh(refreshed.refreshToken).decode(TokenPairResponse.self).accessToken)["plan"] == nil)

            let deep = String(repeating: #"{"a":"#, count: 6) + "1" + String(repeating: "}", count: 6)
            let large = #"{"blob":""# + String(repeating: "x", count: 4100) + #""}"#
            for (body, why) in [
                ("[]", "an array"), (#""pro""#, "a string"), ("1", "a number"), ("null", "null"), ("", "nothing"), ("{", "broken JSON"),
                (#"{"sub":"someone-else"}"#, "sub"), (#"{"email":"x@example.com"}"#, "email"), (#"{"idp":"google"}"#, "idp"),
                (#"{"roles":"admin"}"#, "roles not an array"), (#"{"groups":[1]}"#, "groups of numbers"),
                (#"{"entitlements":[{"display":"x"}]}"#, "an entitlement without value"),
                (#"{"K":1,"\u212a":2}"#, "K and KELVIN SIGN, one name in two spellings"), (#"{"n":18446744073709551617}"#, "an integer beyond 64 bits"),
                (#"{"a":1,"a":2}"#, "a name twice"), (deep, "6 levels"), (large, "over 4 KiB"), (#"{"":1}"#, "an empty name"),
            ] {
                let answer = try await harness.send("PUT", "/admin/v1/users/\(jane.user.id)/claims", body: body, bearer: secret)
                #expect((answer.status, answer.error) == (400, "invalid_claims"), "\(why): \(answer.status) \(answer.text)")
            }
            #expect(try await harness.send("PUT", "/admin/v1/users/nobody/claims", body: #"{"plan":"pro"}"#, bearer: secret).status == 404)
            let audited = try await harness.store.auditEvents(AuditSearch(userID: jane.user.id, kind: "admin_claims_set"))
            #expect(audited.count == 2)
            #expect(audited.allSatisfy { $0.detail.hasPrefix("key=backend") })
        }
    }

    @Test("RFC 9068's roles, groups and entitlements are the backend's to set, and ride at the top level of access tokens")
    func authorizationAttributes() async throws {
        try await ServerHarness.with { harness in
            let (_, secret) = try await AdminKeys(store: harness.store).create(name: "backend", readOnly: false)
            let (_, jane) = try await harness.signedIn()
            let body = #"{"roles":["admin","editor"],"groups":[{"value":"g-1","display":"Team"}],"entitlements":["export"]}"#
            let set = try await harness.send("PUT", "/admin/v1/users/\(jane.user.id)/claims", body: body, bearer: secret)
            #expect(set.status == 200, "\(set.text)")
            harness.clock.advance(60)
            let token = try Self.claims(try await harness.refresh(jane.refreshToken).decode(TokenPairResponse.self).accessToken)
            #expect(token["roles"] as? [String] == ["admin", "editor"])
            #expect((token["groups"] as? [[String: Any]])?.first?["value"] as? String == "g-1")
            #expect(token["entitlements"] as? [String] == ["export"])
        }
    }

    @Test("a claim name with control characters is stored as sent, and the audit log holds it escaped")
    func controlCharactersInAudit() async throws {
        try await ServerHarness.with { harness in
            let (_, secret) = try await AdminKeys(store: harness.store).create(name: "backend", readOnly: false)
            let (_, jane) = try await harness.signedIn()
            let set = try await harness.send(
                "PUT", "/admin/v1/users/\(jane.user.id)/claims", body: #"{"a\nkind=admin_user_deleted \u001b[2J":1}"#, bearer: secret)
            #expect(set.status == 200, "\(set.text)")
            let audited = try #require(try await harness.store.auditEvents(AuditSearch(userID: jane.user.id, kind: "admin_claims_set")).first)
            #expect(!audited.detail.unicodeScalars.contains { $0.properties.generalCategory == .control }, "\(audited.detail.debugDescription)")
            #expect(audited.detail.contains(#"a\u{a}kind=admin_user_deleted \u{1b}[2J"#), "\(audited.detail)")
        }
    }

    @Test("sessions, deletion and audit: each write ends what it says, names its key in the audit, and the backend hears user.deleted with reason admin")
    func writes() async throws {
        let secret = WebhookEndpoint.generateSecret()
        try await ServerHarness.with(configure: { $0.webhooks = [WebhookEndpoint(url: "https://backend.example/hooks", secret: Secret(secret))] }) {
            harness in
            let (_, key) = try await AdminKeys(store: harness.store).create(name: "support-tool", readOnly: false)
            let (sub, jane) = try await harness.signedIn()
            let second = try await harness.signIn(sub: sub, withCode: false).decode(SignInResponse.self)
            let sessions = try await harness.store.sessions(userID: jane.user.id)
            let one = try #require(sessions.first)
            let revokeOne = try await harness.send("DELETE", "/admin/v1/sessions/\(one.id)", bearer: key)
            #expect(revokeOne.status == 200)
            #expect(revokeOne.json["revokedSessions"] as? Int == 1)
            #expect(try await harness.send("DELETE", "/admin/v1/sessions/nosuch", bearer: key).status == 404)
            let revokeAll = try await harness.send("DELETE", "/admin/v1/users/\(jane.user.id)/sessions", bearer: key)
            #expect(revokeAll.json["revokedSessions"] as? Int == 1)
            #expect(try await harness.refresh(second.refreshToken).error == "invalid_grant")

            let deleted = try await harness.send("DELETE", "/admin/v1/users/\(jane.user.id)", bearer: key)
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(try await harness.store.user(id: jane.user.id) == nil)
            #expect(try await harness.send("DELETE", "/admin/v1/users/\(jane.user.id)", bearer: key).status == 404)
            let notices = try await harness.store.webhookDeliveries(status: .pending, limit: 100).filter { $0.kind == "user.deleted" }
            #expect(notices.count == 1)
            #expect(notices.first?.payload.contains(#""reason":"admin""#) == true)

            let audit = try await harness.send("GET", "/admin/v1/audit?userId=\(jane.user.id)&limit=200", bearer: key).decode(AuditEventList.self)
            let kinds = audit.events.map(\.type)
            for kind in ["admin_session_revoked", "admin_sessions_revoked", "admin_user_deleted", "account_deleted", "signed_in", "user_created"] {
                #expect(kinds.contains(kind), "\(kind) is missing from \(kinds)")
            }
            #expect(audit.events.filter { $0.type.hasPrefix("admin_") }.allSatisfy { $0.detail.hasPrefix("key=support-tool") })
            #expect(audit.events.map(\.id) == audit.events.map(\.id).sorted(by: >))  // newest first
            let page = try await harness.send("GET", "/admin/v1/audit?userId=\(jane.user.id)&limit=2", bearer: key).decode(AuditEventList.self)
            let next = try await harness.send("GET", "/admin/v1/audit?userId=\(jane.user.id)&limit=2&cursor=\(try #require(page.nextCursor))", bearer: key)
                .decode(AuditEventList.self)
            #expect(next.events.map(\.id) == Array(audit.events.map(\.id)[2..<min(4, audit.events.count)]))
            let typed = try await harness.send("GET", "/admin/v1/audit?type=admin_user_deleted", bearer: key).decode(AuditEventList.self)
            #expect(typed.events.map(\.userId) == [jane.user.id])
            for bad in ["?since=now", "?limit=500", "?user=x"] {
                #expect(try await harness.send("GET", "/admin/v1/audit" + bad, bearer: key).status == 400, "\(bad)")
            }
        }
    }

    @Test("invites and webhook deliveries: made, listed, revoked and retried through the API; bad bodies and statuses are 400")
    func invitesAndDeliveries() async throws {
        try await ServerHarness.with(configure: { $0.signUp = .invite }) { harness in
            let (_, key) = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: false)
            let made = try await harness.send("POST", "/admin/v1/invites", body: #"{"maxUses":2,"expiresIn":3600,"note":"beta"}"#, bearer: key)
            #expect(made.status == 201, "\(made.text)")
            let invite = try made.decode(InviteResponse.self)
            let code = try #require(invite.code)
            #expect((invite.maxUses, invite.uses, invite.note) == (2, 0, "beta"))
            // The code works for a sign-up.
            let sub = try await harness.emulator.createUser(email: "new@example.com")
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex("n1"))
            let signedUp = try await harness.post("/v1/auth/apple", json: ["identityToken": apple.identityToken, "rawNonce": "n1", "inviteCode": code])
            #expect(signedUp.status == 200, "\(signedUp.text)")
            let listed = try await harness.send("GET", "/admin/v1/invites", bearer: key)
            let invites = try #require(listed.json["invites"] as? [[String: Any]])
            #expect(invites.first { $0["id"] as? String == invite.id }?["uses"] as? Int == 1)
            #expect(invites.allSatisfy { $0["code"] == nil })
            #expect(try await harness.send("DELETE", "/admin/v1/invites/\(invite.id)", bearer: key).status == 204)
            #expect(try await harness.send("DELETE", "/admin/v1/invites/nosuch", bearer: key).status == 404)
            for body in [
                #"{"maxUses":0}"#, #"{"expiresIn":5}"#, #"{"note":"\#(String(repeating: "n", count: 201))"}"#, "[1]", #"{"maxUses":"two"}"#,
                #"{"note":"a\u0000b"}"#,
            ] {
                let answer = try await harness.send("POST", "/admin/v1/invites", body: body, bearer: key)
                #expect((answer.status, answer.error) == (400, "invalid_request"), "\(body.prefix(30)): \(answer.text)")
            }

            #expect(try await harness.send("GET", "/admin/v1/webhooks/deliveries?status=pending", bearer: key).json["deliveries"] as? [Any] != nil)
            #expect(try await harness.send("GET", "/admin/v1/webhooks/deliveries?status=lost", bearer: key).status == 400)
            #expect(try await harness.send("POST", "/admin/v1/webhooks/deliveries/nosuch/retry", bearer: key).status == 404)
            let delivery = WebhookEndpoints([WebhookEndpoint(url: "https://b.example/", secret: "whsec_x")]).deliveries(
                .userCreated("u", provider: "apple", at: harness.clock.now))
            var failed = delivery[0]
            (failed.status, failed.finishedAt, failed.attempts) = (.failed, harness.clock.now, 10)
            try await harness.store.enqueueWebhookDeliveries([failed])
            let shown = try await harness.send("GET", "/admin/v1/webhooks/deliveries?status=failed", bearer: key)
            let listedDeliveries = try #require(shown.json["deliveries"] as? [[String: Any]])
            #expect(listedDeliveries.map { $0["id"] as? String } == [failed.id])
            #expect(listedDeliveries.first?["webhookId"] as? String == failed.messageID)
            #expect(try await harness.send("POST", "/admin/v1/webhooks/deliveries/\(failed.id)/retry", bearer: key).status == 202)
            #expect(try await harness.store.webhookDeliveries(status: .pending, limit: 10).map(\.id) == [failed.id])
        }
    }

    @Test("signing keys: listed without key material; a rotation publishes the new key at once, retires the old and is audited")
    func signingKeys() async throws {
        try await ServerHarness.with { harness in
            let keys = AdminKeys(store: harness.store)
            let key = try await keys.create(name: "ops", readOnly: false).secret
            let listed = try await harness.send("GET", "/admin/v1/keys", bearer: key)
            #expect(listed.status == 200)
            let before = try listed.decode(SigningKeyList.self)
            #expect(before.keys.map(\.state) == ["active"] && before.keys.allSatisfy { $0.algorithm == "ES256" })
            // Never the sealed private key, nor the public key's PEM.
            #expect(!listed.text.contains("v1.") && !listed.text.contains("BEGIN") && !listed.text.contains("sealed"))

            let rotation = try await harness.send("POST", "/admin/v1/keys/rotate", bearer: key).decode(SigningKeyRotation.self)
            #expect(rotation.retiring == before.keys.map(\.kid) && rotation.kid != before.keys[0].kid)
            let propagation = harness.server.configuration.keyPropagationDelay
            #expect(abs(rotation.signsFrom.timeIntervalSince(harness.clock.now) - propagation) < 2)
            let after = try await harness.send("GET", "/admin/v1/keys", bearer: key).decode(SigningKeyList.self)
            #expect(Set(after.keys.map { "\($0.kid) \($0.state)" }) == ["\(before.keys[0].kid) retiring", "\(rotation.kid) active"])
            #expect(after.keys.first { $0.state == "retiring" }?.retireAfter != nil)
            // This instance publishes the new key at once.
            let jwks = try await harness.send("GET", "/.well-known/jwks.json").json["keys"] as? [[String: Any]]
            #expect(Set(jwks?.compactMap { $0["kid"] as? String } ?? []) == Set(after.keys.map(\.kid)))
            let audit = try await harness.send("GET", "/admin/v1/audit?type=admin_signing_key_rotated", bearer: key).decode(AuditEventList.self)
            #expect(audit.events.map(\.detail) == ["key=ops kid=\(rotation.kid) retiring=\(before.keys[0].kid)"])
        }
    }

    @Test("findings: what doctor would say that the server can tell, errors and warnings counted; a delivery shows its payload")
    func findingsAndDelivery() async throws {
        let endpoint = WebhookEndpoint(url: "https://backend.example/hooks", secret: Secret(WebhookEndpoint.generateSecret()))
        try await ServerHarness.with(configure: { $0.webhooks = [endpoint] }) { harness in
            let key = try await AdminKeys(store: harness.store).create(name: "ops", readOnly: true).secret
            var failed = WebhookEndpoints([endpoint]).deliveries(.userCreated("u", provider: "apple", at: harness.clock.now))[0]
            (failed.status, failed.finishedAt, failed.attempts, failed.lastError) = (.failed, harness.clock.now, 10, "HTTP 503")
            try await harness.store.enqueueWebhookDeliveries([failed])

            let list = try await harness.send("GET", "/admin/v1/findings", bearer: key).decode(SetupFindingList.self)
            let checks = Set(list.findings.map(\.check))
            for check in ["mode", "providers", "encryptionKey", "publicUrl", "signingKeys", "adminKeys", "webhooks[0]", "webhooks", "passkeys"] {
                #expect(checks.contains(check), "\(check) in \(checks.sorted())")
            }
            #expect(list.findings.contains { $0.check == "webhooks" && $0.status == "warning" && $0.message.contains("1 deliveries to \(endpoint.url)") })
            #expect(list.errors == list.findings.filter { $0.status == "error" }.count)
            #expect(list.warnings == list.findings.filter { $0.status == "warning" }.count && list.warnings > 0)
            // A key old enough is worth rotating.
            harness.clock.advance(200 * 86_400)
            let later = try await harness.send("GET", "/admin/v1/findings", bearer: key).decode(SetupFindingList.self)
            #expect(later.findings.contains { $0.check == "signingKeys" && $0.status == "warning" && $0.fix?.contains("/admin/v1/keys/rotate") == true })

            let shown = try await harness.send("GET", "/admin/v1/webhooks/deliveries/\(failed.id)", bearer: key)
            #expect(shown.status == 200)
            let delivery = try shown.decode(WebhookDeliveryResponse.self)
            #expect(delivery.payload == (try JSONDecoder().decode(JSONValue.self, from: Data(failed.payload.utf8))))
            #expect(!shown.text.contains(endpoint.secret.revealed) && !shown.text.contains("whsec_"))
            #expect(try await harness.send("GET", "/admin/v1/webhooks/deliveries/nosuch", bearer: key).status == 404)
            // The list leaves the payload out.
            let listed = try await harness.send("GET", "/admin/v1/webhooks/deliveries", bearer: key).json["deliveries"] as? [[String: Any]]
            #expect(listed?.first?["payload"] == nil && listed?.count == 1)
        }
    }
}
