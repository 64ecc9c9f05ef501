import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// A user's data out (GDPR Articles 15 and 20), and the audit trail out as NDJSON.
@Suite("Server: data export and the audit trail out")
struct UserExportTests {
    static let endpoint = WebhookEndpoint(url: "https://backend.example/hooks", secret: Secret(WebhookEndpoint.generateSecret()))

    @Test("GET /v1/me/export and /admin/v1/users/{id}/export hold what the store holds, and no token, secret or key")
    func export() async throws {
        try await ServerHarness.with(configure: { $0.webhooks = [Self.endpoint] }) { harness in
            let (_, tokens) = try await harness.signedIn(email: "export@example.com")
            let again = try await harness.signIn(sub: try await harness.emulator.createUser(email: "other@example.com"))
            #expect(again.status == 200)
            let userID = tokens.user.id
            let answer = try await harness.send("GET", "/v1/me/export", bearer: tokens.accessToken)
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.headers["content-disposition"]?.hasPrefix("attachment") == true)
            let export = try answer.decode(UserDataExport.self)
            #expect(export.format == "latchkey.user-export.v1" && export.user.id == userID)
            // What the store holds, member by member.
            #expect(export.user.identities.map(\.subject) == (try await harness.store.identities(userID: userID)).map(\.subject))
            #expect(export.user.sessions?.map(\.id).sorted() == (try await harness.store.sessions(userID: userID)).map(\.id).sorted())
            let audited = try await harness.store.auditEvents(AuditSearch(userID: userID, limit: 200, oldestFirst: true))
            #expect(export.auditEvents.map(\.id) == audited.map(\.id) && !audited.isEmpty)
            let deliveries = try await harness.store.webhookDeliveries(userID: userID, limit: 200)
            #expect(export.webhookDeliveries.map(\.id) == deliveries.map(\.id) && !deliveries.isEmpty)
            #expect(export.webhookDeliveries.first.map { if case .object = $0.payload { true } else { false } } == true)
            // No token, secret or key: none of the session's tokens, no refresh-token hash, no webhook secret.
            let text = answer.text
            for secret in [tokens.accessToken, tokens.refreshToken, RefreshTokens.hash(tokens.refreshToken), Self.endpoint.secret.revealed] {
                #expect(!text.contains(secret))
            }
            for word in ["refreshToken", "refresh_token", "privateKey", "secret"] { #expect(!text.contains(word), "\(word)") }

            let (_, key) = try await AdminKeys(store: harness.store).create(name: "support", readOnly: true)
            let admin = try await harness.send("GET", "/admin/v1/users/\(userID)/export", bearer: key)
            #expect(admin.status == 200, "\(admin.text)")
            var same = try admin.decode(UserDataExport.self)
            same.exportedAt = export.exportedAt
            #expect(same == export)
            #expect(try await harness.send("GET", "/admin/v1/users/nobody/export", bearer: key).status == 404)
            #expect(try await harness.send("GET", "/v1/me/export").status == 401)
        }
    }

    @Test("GET /admin/v1/audit?format=ndjson streams every matching event oldest first; since and until bound it")
    func auditNDJSON() async throws {
        try await ServerHarness.with { harness in
            let start = harness.clock.now
            for index in 0..<7 {
                try await harness.store.audit(
                    AuditEvent(at: start.addingTimeInterval(Double(index)), userID: "u\(index % 2)", kind: "signed_in", detail: "n=\(index)"))
            }
            let (_, key) = try await AdminKeys(store: harness.store).create(name: "siem", readOnly: true)
            let all = try await harness.send("GET", "/admin/v1/audit?format=ndjson", bearer: key)
            #expect(all.status == 200 && all.headers["content-type"] == "application/x-ndjson")
            let lines = all.text.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let details = lines.compactMap { $0?["detail"] as? String }.filter { $0.hasPrefix("n=") }
            #expect(details == (0..<7).map { "n=\($0)" })
            func iso(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }
            let bounded = try await harness.send(
                "GET", "/admin/v1/audit?format=ndjson&userId=u0&since=\(iso(start.addingTimeInterval(1)))&until=\(iso(start.addingTimeInterval(6)))",
                bearer: key)
            #expect(bounded.text.split(separator: "\n").count == 2, "\(bounded.text)")
            #expect(try await harness.send("GET", "/admin/v1/audit?format=ndjson&limit=5", bearer: key).error == "invalid_request")
            #expect(try await harness.send("GET", "/admin/v1/audit?format=csv", bearer: key).error == "invalid_request")
        }
    }
}
