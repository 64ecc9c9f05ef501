import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import NIOCore

/// A user's data out (GDPR Articles 15 and 20): `GET /v1/me/export` and `GET /admin/v1/users/{id}/export`.
extension LatchkeyServer {
    func addExportRoutes(to router: Router<LatchkeyRequestContext>) {
        router.get("/v1/me/export") { request, _ in
            let (token, _) = try await authenticate(request)
            return try await exportResponse(userID: token.userID)
        }
        router.get("/admin/v1/users/:id/export") { request, context in
            _ = try await requireAdminKey(request, writing: false)
            let id = try context.parameters.require("id")
            _ = try await requireUser(id)
            return try await exportResponse(userID: id)
        }
    }

    /// The most audit events and webhook deliveries one export holds.
    static let exportLimit = 100_000

    private func exportResponse(userID: String) async throws -> Response {
        guard let export = try await userExport(userID: userID) else { throw LatchkeyError(.invalidToken, "the user of this access token is gone") }
        let name = "latchkey-export-\(userID.prefix(64)).json"
        return JSONBody.response(export, headers: [.contentDisposition: "attachment; filename=\"\(name)\""])
    }

    /// Everything the store holds about the user, without a token, secret or key.
    func userExport(userID: String) async throws -> UserDataExport? {
        guard let user = try await store.user(id: userID) else { return nil }
        let identities = try await adminIdentities(userID)
        let sessions = try await store.sessions(userID: userID).map(Self.adminSession)
        var events: [AuditEventResponse] = []
        try await AuditExport.pages(of: AuditSearch(userID: userID), in: store) { page in
            events += page.prefix(Self.exportLimit - events.count).map(AuditExport.response)
        }
        let deliveries = try await store.webhookDeliveries(userID: userID, limit: Self.exportLimit).map { delivery in
            ExportedWebhookDelivery(
                id: delivery.id, type: delivery.kind, endpoint: delivery.endpoint, status: delivery.status.rawValue, createdAt: delivery.createdAt,
                finishedAt: delivery.finishedAt,
                payload: (try? LeanJSONDecoder().decode(JSONValue.self, from: Array(delivery.payload.utf8))) ?? .string(delivery.payload))
        }
        return UserDataExport(
            exportedAt: timeSource.now, user: Self.adminUser(user, identities, sessions: sessions, claims: user.claims ?? [:]),
            passkeys: identities.map(\.0).filter { $0.provider == PasskeyService.provider }.map(PasskeyService.response),
            appAttestKeys: try await store.appAttestKeys(userID: userID).map {
                AppAttestKeyResponse(keyId: $0.keyID, appId: $0.appID, environment: $0.environment, createdAt: $0.createdAt, lastUsedAt: $0.lastUsedAt)
            },
            auditEvents: events, webhookDeliveries: deliveries)
    }

    /// `GET /admin/v1/audit?format=ndjson`: every matching event, oldest first, streamed a page at a time.
    func auditNDJSON(_ search: AuditSearch) -> Response {
        let store = store
        return Response(
            status: .ok, headers: [.contentType: "application/x-ndjson", .cacheControl: "no-store"],
            body: ResponseBody { writer in
                try await AuditExport.pages(of: search, in: store) { page in try await writer.write(ByteBuffer(bytes: AuditExport.lines(page))) }
                try await writer.finish(nil)
            })
    }
}
