import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels

/// The admin API under `/admin/v1`, for the app's backend and its support tools. Requests carry an admin key
/// (`Authorization: Bearer lka_…`, made with `latchkey admin-keys create`); while no key exists the API is off and
/// every path answers 404. A read-only key may only read. Every write is an audit event naming its key.
extension LatchkeyServer {
    var adminKeys: AdminKeys { AdminKeys(store: store, timeSource: timeSource) }

    func addAdminRoutes(to router: Router<LatchkeyRequestContext>) {
        router.get("/admin/v1/users") { request, _ in try await adminListUsers(request) }
        router.get("/admin/v1/users/:id") { request, context in try await adminShowUser(request, id: try adminID(context)) }
        router.delete("/admin/v1/users/:id") { request, context in try await adminDeleteUser(request, id: try adminID(context)) }
        router.post("/admin/v1/users/:id/disable") { request, context in try await adminSetDisabled(request, id: try adminID(context), true) }
        router.post("/admin/v1/users/:id/enable") { request, context in try await adminSetDisabled(request, id: try adminID(context), false) }
        router.put("/admin/v1/users/:id/claims") { request, context in try await adminSetClaims(request, id: try adminID(context)) }
        router.delete("/admin/v1/users/:id/sessions") { request, context in
            try await adminRevokeSessions(request, userID: try adminID(context))
        }
        router.delete("/admin/v1/sessions/:id") { request, context in try await adminRevokeSession(request, id: try adminID(context)) }
        router.get("/admin/v1/audit") { request, _ in try await adminAudit(request) }
        router.post("/admin/v1/invites") { request, _ in try await adminCreateInvite(request) }
        router.get("/admin/v1/invites") { request, _ in try await adminListInvites(request) }
        router.delete("/admin/v1/invites/:id") { request, context in try await adminRevokeInvite(request, id: try adminID(context)) }
        router.get("/admin/v1/webhooks/deliveries") { request, _ in try await adminDeliveries(request) }
        router.get("/admin/v1/webhooks/deliveries/:id") { request, context in try await adminShowDelivery(request, id: try adminID(context)) }
        router.post("/admin/v1/webhooks/deliveries/:id/retry") { request, context in
            try await adminRetryDelivery(request, id: try adminID(context))
        }
        router.get("/admin/v1/keys") { request, _ in try await adminListSigningKeys(request) }
        router.post("/admin/v1/keys/rotate") { request, _ in try await adminRotateSigningKey(request) }
        router.get("/admin/v1/findings") { request, _ in
            _ = try await requireAdminKey(request, writing: false)
            return JSONBody.response(SetupFindingList(findings: try await setupFindings()))
        }
        addConsoleRoutes(to: router)
    }

    /// The path's `{id}`; one holding a NUL character names nothing (and PostgreSQL refuses it in text).
    private func adminID(_ context: LatchkeyRequestContext) throws -> String {
        let id = try context.parameters.require("id")
        guard !id.contains("\u{0}") else { throw APIError(status: .notFound, code: "not_found", description: "no such record") }
        return id
    }

    // MARK: - Keys

    /// The request's admin key: `Authorization: Bearer lka_…`, or without that header the admin console's cookie
    /// (``consoleAuthentication(_:)``), whose writes must come from this server's origin. 404 while the admin API is
    /// off, 401 for a wrong or revoked key (or an ended console session), 403 for a read-only key that would write
    /// or a console write from elsewhere.
    func requireAdminKey(_ request: Request, writing: Bool) async throws -> AdminKey {
        let console = request.headers[.authorization] == nil && Self.cookie(Self.consoleCookie, in: request) != nil
        let authentication = console ? try await consoleAuthentication(request).0 : try await adminKeys.authenticate(request.bearerToken)
        switch authentication {
        case .disabled:
            throw Self.adminOff
        case .refused:
            if console { throw Self.consoleSessionEnded }
            throw APIError(
                status: .unauthorized, code: "invalid_token", description: "send Authorization: Bearer lka_… with an admin key that is not revoked",
                headers: [.wwwAuthenticate: #"Bearer realm="latchkey-admin", error="invalid_token""#])
        case .key(let key):
            if writing && console { try checkConsoleOrigin(request, required: true) }
            if writing && key.readOnly {
                throw APIError(
                    status: .forbidden, code: "insufficient_scope", description: "the admin key \(key.name) is read-only",
                    headers: [.wwwAuthenticate: #"Bearer realm="latchkey-admin", error="insufficient_scope""#])
            }
            return key
        }
    }

    var administration: Administration { sessions.administration }

    // MARK: - Users

    func adminListUsers(_ request: Request) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        let fields = try queryFields(request)
        try Self.allowOnly(["email", "provider", "subject", "createdAfter", "cursor", "limit", "anonymous"], in: fields)
        var anonymous: Bool?
        if let flag = fields["anonymous"] {
            guard flag == "true" || flag == "false" else { throw APIError.invalidRequest("anonymous is true or false") }
            anonymous = flag == "true"
        }
        if fields["subject"] != nil && fields["provider"] == nil { throw APIError.invalidRequest("subject needs provider") }
        if let empty = fields.first(where: { $0.value.isEmpty })?.key { throw APIError.invalidRequest("\(empty) is empty") }
        let search = UserSearch(
            email: fields["email"], provider: fields["provider"], subject: fields["subject"], createdAfter: try Self.instant(fields, "createdAfter"),
            cursor: fields["cursor"], limit: try Self.limit(fields), anonymous: anonymous)
        let users = try await store.searchUsers(search)
        var listed: [AdminUserResponse] = []
        for user in users { listed.append(Self.adminUser(user, try await adminIdentities(user.id))) }
        return JSONBody.response(AdminUserList(users: listed, nextCursor: users.count == search.limit ? users.last?.id : nil))
    }

    func adminShowUser(_ request: Request, id: String) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        let user = try await requireUser(id)
        let sessions = try await store.sessions(userID: id).map(Self.adminSession)
        return JSONBody.response(Self.adminUser(user, try await adminIdentities(id), sessions: sessions, claims: user.claims ?? [:]))
    }

    /// The user's identities as the admin API shows them: an Apple identity without an Apple refresh token says so.
    func adminIdentities(_ userID: String) async throws -> [(LinkedIdentity, appleGrantMissing: Bool)] {
        var shown: [(LinkedIdentity, appleGrantMissing: Bool)] = []
        for identity in try await store.identities(userID: userID) {
            shown.append((identity, identity.provider == "apple" ? try await store.providerGrant(identityID: identity.id) == nil : false))
        }
        return shown
    }

    func adminSetDisabled(_ request: Request, id: String, _ disabled: Bool) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        guard let report = try await administration.setDisabled(userID: id, disabled, by: .key(key.name)) else { throw Self.noSuch("user", id) }
        return JSONBody.response(AdminUserDisable(userId: id, disabled: disabled, changed: report.changed, sessionsRevoked: report.sessionsRevoked))
    }

    func adminDeleteUser(_ request: Request, id: String) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        guard let report = try await administration.deleteUser(id: id, by: .key(key.name)) else { throw Self.noSuch("user", id) }
        return JSONBody.response(AdminUserDeletion(tokensRevoked: report.revoked, revocationsPending: report.queued))
    }

    /// Replaces the user's claims with the JSON object in the body (`{}` clears them); the next access token minted
    /// for the user carries them.
    func adminSetClaims(_ request: Request, id: String) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        let claims: [String: JSONValue]
        do {
            claims = try LeanJSONDecoder().decode([String: JSONValue].self, from: bytes)
        } catch LeanJSONError.duplicateKey(let name) {
            throw APIError(
                status: .badRequest, code: "invalid_claims",
                description: "the claims name \(AuditEvent.escaped(name).debugDescription.prefix(60)) twice (or two Unicode spellings of one name)")
        } catch DecodingError.dataCorrupted(let context) where context.debugDescription == LeanJSONDecoder.inexactIntegerDescription {
            throw APIError(status: .badRequest, code: "invalid_claims", description: context.debugDescription)
        } catch {
            throw APIError(
                status: .badRequest, code: "invalid_claims",
                description: "the body must be a JSON object of claims (names once each, nested at most \(UserClaims.maximumDepth) deep)")
        }
        if let problem = UserClaims.problem(claims, encodedSize: try LeanJSONEncoder().encode(claims).count) {
            throw APIError(status: .badRequest, code: "invalid_claims", description: problem)
        }
        guard try await administration.setClaims(userID: id, claims: claims, by: .key(key.name)) else { throw Self.noSuch("user", id) }
        return JSONBody.response(ClaimsResponse(claims: claims))
    }

    func adminRevokeSessions(_ request: Request, userID: String) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        guard let count = try await administration.revokeSessions(userID: userID, by: .key(key.name)) else { throw Self.noSuch("user", userID) }
        return JSONBody.response(RevokedSessionsResponse(revokedSessions: count))
    }

    func adminRevokeSession(_ request: Request, id: String) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        guard let revoked = try await administration.revokeSession(id: id, by: .key(key.name)) else { throw Self.noSuch("session", id) }
        return JSONBody.response(RevokedSessionsResponse(revokedSessions: revoked ? 1 : 0))
    }

    func requireUser(_ id: String) async throws -> UserAccount {
        guard let user = try await store.user(id: id) else { throw Self.noSuch("user", id) }
        return user
    }

    /// 404 for an id that names nothing (cut, as the caller chose it).
    static func noSuch(_ what: String, _ id: String) -> APIError {
        APIError(status: .notFound, code: "not_found", description: "no \(what) \(id.prefix(64))")
    }

    // MARK: - Audit

    func adminAudit(_ request: Request) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        let fields = try queryFields(request)
        try Self.allowOnly(["userId", "type", "since", "until", "cursor", "limit", "format"], in: fields)
        let search = AuditSearch(
            userID: fields["userId"], kind: fields["type"], since: try Self.instant(fields, "since"), until: try Self.instant(fields, "until"),
            cursor: fields["cursor"], limit: try Self.limit(fields))
        switch fields["format"] {
        case nil, "json": break
        case "ndjson":
            guard fields["cursor"] == nil, fields["limit"] == nil else {
                throw APIError.invalidRequest("format=ndjson streams every matching event, oldest first: it takes no cursor or limit")
            }
            return auditNDJSON(search)
        case let other?: throw APIError.invalidRequest("format is json or ndjson, not \(other.prefix(20))")
        }
        let events = try await store.auditEvents(search)
        return JSONBody.response(
            AuditEventList(
                events: events.map { AuditEventResponse(id: $0.id, at: $0.at, userId: $0.userID, type: $0.kind, detail: $0.detail) },
                nextCursor: events.count == search.limit ? events.last?.id : nil))
    }

    // MARK: - Invites

    func adminCreateInvite(_ request: Request) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        let body = bytes.isEmpty ? InviteRequest() : try decodeJSON(InviteRequest.self, bytes)
        let maxUses = body.maxUses ?? 1
        guard (1...1_000_000).contains(maxUses) else { throw APIError.invalidRequest("maxUses is 1 to 1000000") }
        if let expiresIn = body.expiresIn, !(60...(365 * 86_400)).contains(expiresIn) {
            throw APIError.invalidRequest("expiresIn is 60 to 31536000 seconds")
        }
        if let note = body.note, note.count > 200 || note.contains("\u{0}") {
            throw APIError.invalidRequest("note is at most 200 characters, none of them NUL")
        }
        let (invite, code) = try await administration.createInvite(
            maxUses: maxUses, expiresAt: body.expiresIn.map { timeSource.now.addingTimeInterval(TimeInterval($0)) }, note: body.note, by: .key(key.name))
        return JSONBody.response(Self.inviteResponse(invite, code: code), status: .created)
    }

    func adminListInvites(_ request: Request) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        return JSONBody.response(InviteList(invites: try await store.invites().map { Self.inviteResponse($0, code: nil) }))
    }

    func adminRevokeInvite(_ request: Request, id: String) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        guard try await administration.revokeInvite(id: id, by: .key(key.name)) else { throw Self.noSuch("invite", id) }
        return Response(status: .noContent)
    }

    // MARK: - Webhook deliveries

    func adminDeliveries(_ request: Request) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        let fields = try queryFields(request)
        try Self.allowOnly(["status", "limit"], in: fields)
        var status: WebhookDelivery.Status?
        if let name = fields["status"] {
            guard let parsed = WebhookDelivery.Status(rawValue: name) else { throw APIError.invalidRequest("status is pending, failed or delivered") }
            status = parsed
        }
        let deliveries = try await store.webhookDeliveries(status: status, limit: try Self.limit(fields))
        return JSONBody.response(WebhookDeliveryList(deliveries: deliveries.map(Self.deliveryResponse)))
    }

    /// One delivery with the event it carries.
    func adminShowDelivery(_ request: Request, id: String) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        guard let delivery = try await store.webhookDelivery(id: id) else { throw Self.noSuch("delivery", id) }
        var shown = Self.deliveryResponse(delivery)
        shown.payload = (try? LeanJSONDecoder().decode(JSONValue.self, from: Array(delivery.payload.utf8))) ?? .string(delivery.payload)
        return JSONBody.response(shown)
    }

    func adminRetryDelivery(_ request: Request, id: String) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        guard try await administration.retryDelivery(id: id, by: .key(key.name)) else {
            throw APIError(
                status: .notFound, code: "not_found",
                description: "no failed delivery \(id.prefix(80)) (a pending one is sent on its schedule, a delivered one not again)")
        }
        return JSONBody.response(DeliveryRetry(retrying: id), status: .accepted)
    }

    // MARK: - Signing keys

    func adminListSigningKeys(_ request: Request) async throws -> Response {
        _ = try await requireAdminKey(request, writing: false)
        let keys = try await store.signingKeys().sorted { ($0.createdAt, $0.keyID) < ($1.createdAt, $1.keyID) }
        return JSONBody.response(
            SigningKeyList(
                keys: keys.map {
                    SigningKeyResponse(kid: $0.keyID, algorithm: $0.algorithm, state: $0.state.rawValue, createdAt: $0.createdAt, retireAfter: $0.retireAfter)
                }))
    }

    /// What `latchkey keys rotate` does: a new active key, published at once and signing after every instance has
    /// loaded it; the previous one retiring. This instance loads it now.
    func adminRotateSigningKey(_ request: Request) async throws -> Response {
        let key = try await requireAdminKey(request, writing: true)
        let retiring = try await store.signingKeys().filter { $0.state == .active }.map(\.keyID)
        let now = timeSource.now
        let fresh = try await KeyMaintenance.rotate(store: store, box: box, now: now, overlap: configuration.signingKeyOverlap)
        try await administration.record("admin_signing_key_rotated", "kid=\(fresh.keyID) retiring=\(retiring.joined(separator: ","))", by: .key(key.name))
        try await accessKeys.load(try await store.signingKeys(), box: box)
        return JSONBody.response(
            SigningKeyRotation(kid: fresh.keyID, signsFrom: fresh.createdAt.addingTimeInterval(configuration.keyPropagationDelay), retiring: retiring))
    }

    // MARK: - Shapes

    static func adminUser(
        _ user: UserAccount, _ identities: [(LinkedIdentity, appleGrantMissing: Bool)], sessions: [AdminSessionResponse]? = nil,
        claims: [String: JSONValue]? = nil
    ) -> AdminUserResponse {
        var shown = userResponse(user, identities.map(\.0)).identities
        for index in shown.indices where identities[index].appleGrantMissing { shown[index].appleGrant = "missing" }
        return AdminUserResponse(
            id: user.id, email: user.email, emailVerified: user.emailVerified, givenName: user.givenName, familyName: user.familyName,
            createdAt: user.createdAt, identities: shown, sessions: sessions, claims: claims, disabledAt: user.disabledAt,
            importedFrom: user.importedFrom.map { ImportedFromResponse(source: $0.source, id: $0.id, at: $0.at) })
    }

    static func adminSession(_ session: SessionFamily) -> AdminSessionResponse {
        AdminSessionResponse(
            id: session.id, clientId: session.clientID, createdAt: session.createdAt, lastUsedAt: session.lastUsedAt, expiresAt: session.absoluteExpiresAt,
            userAgent: session.userAgent, revokedAt: session.revokedAt, revocationReason: session.revocationReason)
    }

    static func inviteResponse(_ invite: Invite, code: String?) -> InviteResponse {
        InviteResponse(
            id: invite.id, code: code, maxUses: invite.maxUses, uses: invite.uses, createdAt: invite.createdAt, expiresAt: invite.expiresAt,
            revokedAt: invite.revokedAt, note: invite.note)
    }

    static func deliveryResponse(_ delivery: WebhookDelivery) -> WebhookDeliveryResponse {
        WebhookDeliveryResponse(
            id: delivery.id, webhookId: delivery.messageID, endpoint: delivery.endpoint, type: delivery.kind, userId: delivery.userID,
            status: delivery.status.rawValue, attempts: delivery.attempts, nextAttemptAt: delivery.status == .pending ? delivery.nextAttemptAt : nil,
            lastError: delivery.lastError, createdAt: delivery.createdAt, finishedAt: delivery.finishedAt)
    }

    // MARK: - Query parameters

    static func allowOnly(_ names: Set<String>, in fields: [String: String]) throws {
        if let unknown = fields.keys.first(where: { !names.contains($0) }) {
            throw APIError.invalidRequest("unknown parameter \(unknown.prefix(40)); this endpoint takes \(names.sorted().joined(separator: ", "))")
        }
    }

    /// `limit`: 1 to 200, 50 when absent.
    static func limit(_ fields: [String: String]) throws -> Int {
        guard let text = fields["limit"] else { return 50 }
        guard let limit = Int(text), (1...200).contains(limit) else { throw APIError.invalidRequest("limit is a whole number from 1 to 200") }
        return limit
    }

    /// An RFC 3339 time (`2026-11-26T10:00:00Z`).
    static func instant(_ fields: [String: String], _ name: String) throws -> Date? {
        guard let text = fields[name] else { return nil }
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        guard let date = (try? Date(text, strategy: Date.ISO8601FormatStyle())) ?? (try? Date(text, strategy: withFraction)) else {
            throw APIError.invalidRequest("\(name) is an RFC 3339 time such as 2026-11-26T10:00:00Z")
        }
        return date
    }
}
