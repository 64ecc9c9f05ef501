import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Holds `/openapi.json` to the wire types in LatchkeyModels and to the running server, so neither can drift:
/// every example round-trips through its wire type and validates against its schema, every wire type's members
/// are exactly its schema's properties, and every answer the server gives (successes, malformed input, limits,
/// outages) has a documented status, media type, headers and body.
@Suite("Server: OpenAPI contract", .timeLimit(.minutes(3)))
struct OpenAPIContractTests {
    // MARK: The document against the wire types

    @Test("every schema, request body and response carries an example, and every example validates against its schema")
    func examplesValidate() async throws {
        let document = try await OpenAPI.fetch()
        var count = 0
        for (name, schema) in document.schemas {
            let examples = schema["examples"]?.arrayValue ?? []
            #expect(examples.count > 0, "schema \(name) has no example")
        }
        for example in document.examples {
            count += 1
            let errors = document.checker.errors(example.value, example.schema, at: example.location)
            #expect(errors.isEmpty, "\(example.location): \(errors.joined(separator: "; "))")
        }
        for operation in document.operations {
            if let body = operation.definition["requestBody"]?["content"]?.objectValue {
                for (mediaType, content) in body {
                    #expect(content["example"] != nil || content["examples"] != nil, "\(operation.label) request \(mediaType) has no example")
                }
            }
            for (status, response) in operation.responses {
                for (mediaType, content) in response["content"]?.objectValue ?? [:] {
                    #expect(content["example"] != nil || content["examples"] != nil, "\(operation.label) \(status) \(mediaType) has no example")
                }
            }
        }
        #expect(count > 40, "only \(count) examples were found")
    }

    @Test("every example decodes into its LatchkeyModels wire type and re-encodes unchanged, at every depth")
    func examplesRoundTrip() async throws {
        let document = try await OpenAPI.fetch()
        var roundTripped: Set<String> = []
        for example in document.examples {
            let errors = document.roundTrip(example.value, example.schema, at: example.location, done: &roundTripped)
            #expect(errors.isEmpty, "\(errors.joined(separator: "\n"))")
        }
        #expect(
            roundTripped == Set(OpenAPI.wireTypes.keys), "wire types without a documented example: \(Set(OpenAPI.wireTypes.keys).subtracting(roundTripped))")
    }

    @Test("webhooks: every event type is documented, and every body the server sends, with and without its optional members, conforms")
    func webhooksDocumented() async throws {
        let document = try await OpenAPI.fetch()
        let hooks = document.root["webhooks"]?.objectValue ?? [:]
        #expect(Set(hooks.keys) == Set(LifecycleEvent.Kind.allCases.map(\.rawValue)))
        // The admin API lists deliveries of every type.
        let deliveryTypes = document.root["components"]?["schemas"]?["WebhookDeliveryResponse"]?["properties"]?["type"]?["enum"]?.arrayValue ?? []
        #expect(Set(deliveryTypes.compactMap(\.stringValue)) == Set(LifecycleEvent.Kind.allCases.map(\.rawValue)))
        let now = Date(timeIntervalSince1970: 1_768_469_400.125)
        let identity = LinkedIdentity(id: "i", userID: "u", provider: "apple", subject: "001234.abc.1234", firstSeenAt: now, lastSignInAt: now)
        let session = SessionFamily(
            id: "s", userID: "u", identityID: "i", clientID: "com.example.app", createdAt: now, lastUsedAt: now, absoluteExpiresAt: now)
        var events: [LifecycleEvent] = [
            .userCreated("u", provider: "apple", at: now), .identity(.identityLinked, identity, at: now),
            .identity(.identityUnlinked, identity, at: now, reason: "user_request"),
            .identity(.identityRevoked, userID: "u", identityID: "i", provider: "apple", subject: nil, at: now, reason: "consent-revoked"),
            .emailChanged("u", provider: "google", email: nil, verified: nil, at: now),
            .emailChanged("u", provider: "apple", email: "jane@privaterelay.appleid.com", verified: true, forwarding: false, at: now),
            .reuseDetected(session, ip: nil, userAgent: nil, at: now), .reuseDetected(session, ip: "203.0.113.7", userAgent: "ExampleApp/1.4", at: now),
            .test(at: now), .userDisabled("u", disabled: true, at: now), .userDisabled("u", disabled: false, at: now),
            .identityTransferred(identity, oldSubject: "000999.def.0999", at: now), .userUpgraded("u", provider: "apple", at: now),
            .userMerged(from: "g", into: "u", at: now),
        ]
        for reason in [LifecycleEvent.DeletionReason.userRequest, .admin, .providerAccountDeleted, .providerConsentRevoked, .anonymousExpired] {
            events.append(.userDeleted("u", reason: reason, at: now))
        }
        #expect(Set(events.map(\.kind)) == Set(LifecycleEvent.Kind.allCases))
        for event in events {
            let media = hooks[event.kind.rawValue]?["post"]?["requestBody"]?["content"]?["application/json"]
            let schema = try #require(media?["schema"], "\(event.kind.rawValue) documents no body")
            let errors = document.checker.errors(try Value.parse(Array(event.body().utf8)), schema, at: "\(event.kind.rawValue) as sent")
            #expect(errors.isEmpty, "\(errors.joined(separator: "; "))")
            let example = try #require(media?["example"], "\(event.kind.rawValue) has no example")
            #expect(document.checker.errors(example, schema, at: "\(event.kind.rawValue) example").isEmpty)
            #expect(example["type"]?.stringValue == event.kind.rawValue)
        }
    }

    @Test("every wire type's members are exactly its schema's properties, at every depth; its non-optional members are required")
    func wireTypesMatchSchemas() async throws {
        let document = try await OpenAPI.fetch()
        let date = Date(timeIntervalSince1970: 1_768_469_400)
        let identity = IdentityResponse(
            provider: "apple", subject: "001234.abc.1234", email: "jane@example.com", isPrivateEmail: false, realUserStatus: 2, emailForwardingEnabled: true,
            firstSeenAt: date, appleGrant: "missing"
        )
        let claims: [String: JSONValue] = ["plan": .string("pro"), "app_roles": .array([.string("editor")]), "org": .object(["id": .integer(42)])]
        let user = UserResponse(
            id: "u", email: "jane@example.com", emailVerified: true, givenName: "Jane", familyName: "Appleseed", createdAt: date, identities: [identity],
            claims: claims, isAnonymous: true)
        let tokens = TokenPairResponse(accessToken: "a.b.c", expiresIn: 600, refreshToken: "lkr_x")
        let adminSession = AdminSessionResponse(
            id: "s", clientId: "com.example.app", createdAt: date, lastUsedAt: date, expiresAt: date, userAgent: "ExampleApp/1.0", revokedAt: date,
            revocationReason: "signed_out")
        let adminUser = AdminUserResponse(
            id: "u", email: "jane@example.com", emailVerified: true, givenName: "Jane", familyName: "Appleseed", createdAt: date, identities: [identity],
            sessions: [adminSession], claims: claims, disabledAt: date, importedFrom: ImportedFromResponse(source: "firebase", id: "u", at: date))
        let event = AuditEventResponse(id: "e", at: date, userId: "u", type: "admin_claims_set", detail: "key=support names=plan")
        let session = SessionResponse(
            id: "s", clientId: "com.example.app", createdAt: date, lastUsedAt: date, expiresAt: date, userAgent: "ExampleApp/1.0", current: true)
        let invite = InviteResponse(id: "i", code: "inv_x", maxUses: 5, uses: 1, createdAt: date, expiresAt: date, revokedAt: date, note: "beta testers")
        let delivery = WebhookDeliveryResponse(
            id: "msg_x.0", webhookId: "msg_x", endpoint: "https://api.example.com/hooks", type: "user.created", userId: "u", status: "pending",
            attempts: 1, nextAttemptAt: date, lastError: "HTTP 503", createdAt: date, finishedAt: date, payload: .object(["type": .string("user.created")]))
        let signingKey = SigningKeyResponse(kid: "k", algorithm: "ES256", state: "retiring", createdAt: date, retireAfter: date)
        let finding = SetupFinding(status: "warning", check: "signingKeys", message: "the active key k is 200 days old", fix: "rotate it")
        let passkey = PasskeyResponse(id: "p", name: "Jane's iPhone", createdAt: date, lastUsedAt: date, backedUp: true, cloneSuspected: true)
        let minimalPasskey = PasskeyResponse(id: "p", name: "n", createdAt: date, backedUp: false)
        let evidence = AppAttestEvidence(keyId: "k", attestation: "a", assertion: "b", challenge: "c")
        var apple = AppleSignInRequest(
            identityToken: "t", authorizationCode: "c", rawNonce: "n", fullName: .init(givenName: "Jane", familyName: "Appleseed"),
            redirectUri: "https://app.example.com/callback", inviteCode: "inv_x")
        apple.appAttest = evidence
        var provider = ProviderSignInRequest(
            idToken: "t", rawNonce: "n", authorizationCode: "c", codeVerifier: "v", redirectUri: "com.example.app:/oauth2redirect", accessToken: "a",
            clientId: "web", inviteCode: "inv_x")
        provider.appAttest = evidence
        var verify = EmailVerifyRequest(email: "jane@example.com", code: "123456", inviteCode: "inv_x")
        verify.appAttest = evidence
        // Every optional member set, and every array non-empty, so every member is encoded (checked by reflection below).
        let full: [(String, any Encodable)] =
            [
                ("AppleSignInRequest", apple),
                ("ProviderSignInRequest", provider),
                ("AppAttestEvidence", evidence),
                (
                    "AppAttestKeyResponse",
                    AppAttestKeyResponse(keyId: "k", appId: "ABCDE12345.com.example.app", environment: "production", createdAt: date, lastUsedAt: date)
                ),
                (
                    "ExportedWebhookDelivery",
                    ExportedWebhookDelivery(
                        id: "msg_x.0", type: "user.created", endpoint: "https://api.example.com/hooks", status: "delivered", createdAt: date, finishedAt: date,
                        payload: .object(["type": .string("user.created")]))
                ),
                (
                    "UserDataExport",
                    UserDataExport(
                        exportedAt: date, user: adminUser, passkeys: [passkey],
                        appAttestKeys: [
                            AppAttestKeyResponse(keyId: "k", appId: "ABCDE12345.com.example.app", environment: "production", createdAt: date, lastUsedAt: date)
                        ],
                        auditEvents: [event],
                        webhookDeliveries: [
                            ExportedWebhookDelivery(
                                id: "msg_x.0", type: "user.created", endpoint: "https://api.example.com/hooks", status: "delivered", createdAt: date,
                                finishedAt: date,
                                payload: .object([:]))
                        ])
                ),
                ("FullName", AppleSignInRequest.FullName(givenName: "Jane", familyName: "Appleseed")),
                ("TokenPairResponse", tokens),
                ("SignInResponse", SignInResponse(tokens: tokens, user: user, isNewUser: true)),
                ("UserResponse", user),
                ("IdentityResponse", identity),
                (
                    "SessionResponse",
                    SessionResponse(
                        id: "s", clientId: "com.example.app", createdAt: date, lastUsedAt: date, expiresAt: date, userAgent: "ExampleApp/1.0", current: true)
                ),
                ("Error", OAuthErrorResponse(error: "identity_in_use", errorDescription: "no", mergeable: true)),
                ("Claims", claims),
                ("AdminUserResponse", adminUser),
                ("AdminUserList", AdminUserList(users: [adminUser], nextCursor: "u")),
                ("AdminSessionResponse", adminSession),
                ("AuditEventResponse", event),
                ("AuditEventList", AuditEventList(events: [event], nextCursor: "e")),
                (
                    "InviteResponse",
                    InviteResponse(
                        id: "i", code: "inv_x", maxUses: 5, uses: 1, createdAt: date, expiresAt: date, revokedAt: date, note: "beta testers")
                ),
                ("InviteRequest", InviteRequest(maxUses: 5, expiresIn: 3600, note: "beta testers")),
                (
                    "WebhookDeliveryResponse",
                    WebhookDeliveryResponse(
                        id: "msg_x.0", webhookId: "msg_x", endpoint: "https://api.example.com/hooks", type: "user.created", userId: "u", status: "pending",
                        attempts: 1, nextAttemptAt: date, lastError: "HTTP 503", createdAt: date, finishedAt: date, payload: .object([:]))
                ),
                ("EmailStartRequest", EmailStartRequest(email: "jane@example.com", inviteCode: "inv_x")),
                ("EmailVerifyRequest", verify),
                ("SigningKeyResponse", signingKey),
                ("SigningKeyList", SigningKeyList(keys: [signingKey])),
                ("SigningKeyRotation", SigningKeyRotation(kid: "k2", signsFrom: date, retiring: ["k"])),
                ("SetupFinding", finding),
                ("SetupFindingList", SetupFindingList(findings: [finding])),
                ("ConsoleSignInRequest", ConsoleSignInRequest(key: "lka_x")),
                ("ConsoleSessionResponse", ConsoleSessionResponse(name: "support", readOnly: true, expiresAt: date)),
            ] + OpenAPI.answers(date: date, session: session, claims: claims, delivery: delivery, invite: invite, passkey: passkey)
        // Every optional member nil and every array empty: what is left must be required. An answer omits exactly its nil
        // members, so it requires exactly the rest, except members the server always sends though the type allows leaving them out;
        // a request may require more than its type (the server refuses it later, with a documented code).
        let alwaysSent: [String: Set<String>] = ["Error": ["error_description"]]
        let minimal: [(String, any Encodable)] =
            [
                ("AppleSignInRequest", AppleSignInRequest(identityToken: "t")),
                ("ProviderSignInRequest", ProviderSignInRequest()),
                ("AppAttestEvidence", AppAttestEvidence(keyId: "k", challenge: "c")),
                (
                    "AppAttestKeyResponse",
                    AppAttestKeyResponse(keyId: "k", appId: "ABCDE12345.com.example.app", environment: "development", createdAt: date, lastUsedAt: date)
                ),
                (
                    "ExportedWebhookDelivery",
                    ExportedWebhookDelivery(
                        id: "msg_x.0", type: "user.created", endpoint: "https://api.example.com/hooks", status: "pending", createdAt: date, finishedAt: nil,
                        payload: .null)
                ),
                (
                    "UserDataExport",
                    UserDataExport(
                        exportedAt: date,
                        user: AdminUserResponse(id: "u", email: nil, emailVerified: nil, givenName: nil, familyName: nil, createdAt: date, identities: []),
                        passkeys: [], appAttestKeys: [], auditEvents: [], webhookDeliveries: [])
                ),
                ("FullName", AppleSignInRequest.FullName()),
                ("TokenPairResponse", tokens),
                (
                    "SignInResponse",
                    SignInResponse(
                        tokens: tokens,
                        user: UserResponse(id: "u", email: nil, emailVerified: nil, givenName: nil, familyName: nil, createdAt: date, identities: []),
                        isNewUser: false)
                ),
                ("UserResponse", UserResponse(id: "u", email: nil, emailVerified: nil, givenName: nil, familyName: nil, createdAt: date, identities: [])),
                (
                    "IdentityResponse",
                    IdentityResponse(
                        provider: "apple", subject: "s", email: nil, isPrivateEmail: nil, realUserStatus: nil, emailForwardingEnabled: nil, firstSeenAt: date)
                ),
                (
                    "SessionResponse",
                    SessionResponse(id: "s", clientId: "c", createdAt: date, lastUsedAt: date, expiresAt: date, userAgent: nil, current: false)
                ),
                ("Error", OAuthErrorResponse(error: "invalid_grant")),
                ("Claims", [String: JSONValue]()),
                (
                    "AdminUserResponse",
                    AdminUserResponse(id: "u", email: nil, emailVerified: nil, givenName: nil, familyName: nil, createdAt: date, identities: [])
                ),
                ("AdminUserList", AdminUserList(users: [], nextCursor: nil)),
                (
                    "AdminSessionResponse",
                    AdminSessionResponse(
                        id: "s", clientId: "c", createdAt: date, lastUsedAt: date, expiresAt: date, userAgent: nil, revokedAt: nil, revocationReason: nil)
                ),
                ("AuditEventResponse", AuditEventResponse(id: "e", at: date, userId: nil, type: "user_created", detail: "")),
                ("AuditEventList", AuditEventList(events: [], nextCursor: nil)),
                ("InviteResponse", InviteResponse(id: "i", code: nil, maxUses: 1, uses: 0, createdAt: date, expiresAt: nil, revokedAt: nil, note: nil)),
                ("InviteRequest", InviteRequest()),
                (
                    "WebhookDeliveryResponse",
                    WebhookDeliveryResponse(
                        id: "msg_x.0", webhookId: "msg_x", endpoint: "https://api.example.com/hooks", type: "user.created", userId: nil, status: "pending",
                        attempts: 0, nextAttemptAt: nil, lastError: nil, createdAt: date, finishedAt: nil)
                ),
                ("EmailStartRequest", EmailStartRequest(email: "jane@example.com")),
                ("EmailVerifyRequest", EmailVerifyRequest(email: "jane@example.com", code: "123456")),
                ("SigningKeyResponse", SigningKeyResponse(kid: "k", algorithm: "ES256", state: "active", createdAt: date, retireAfter: nil)),
                ("SigningKeyList", SigningKeyList(keys: [])),
                ("SigningKeyRotation", SigningKeyRotation(kid: "k", signsFrom: date, retiring: [])),
                ("SetupFinding", SetupFinding(status: "ok", check: "passkeys", message: "off")),
                ("SetupFindingList", SetupFindingList(findings: [])),
                ("ConsoleSignInRequest", ConsoleSignInRequest(key: "lka_x")),
                ("ConsoleSessionResponse", ConsoleSessionResponse(name: "support", readOnly: false, expiresAt: date)),
            ] + OpenAPI.answers(date: date, session: session, claims: claims, delivery: delivery, invite: invite, passkey: minimalPasskey)
        #expect(Set(full.map(\.0)) == Set(OpenAPI.wireTypes.keys))
        for (name, value) in full {
            #expect(OpenAPI.unsetMembers(value).isEmpty, "\(name): set \(OpenAPI.unsetMembers(value)) in this test")
            let errors = document.memberMismatches(try Value.encoding(value), OpenAPI.ref(name), at: name)
            #expect(errors.isEmpty, "\(errors.joined(separator: "\n"))")
        }
        for (name, value) in minimal {
            let keys = Set(try Value.encoding(value).objectValue?.keys.map { $0 } ?? [])
            let schema = try #require(document.schemas[name])
            let required = Set(schema["required"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            let closed = schema["additionalProperties"] == .bool(false)
            #expect(
                closed ? keys.union(alwaysSent[name] ?? []) == required : keys.isSubset(of: required),
                "\(name): always-present members \(keys.sorted()), required \(required.sorted())")
        }
    }

    @Test("operations have unique ids, every reference and link resolves, bearer operations document 401, and /v1/token is the app-facing endpoint")
    func documentShape() async throws {
        var served: [(method: String, path: String)] = []
        var fetched: OpenAPI?
        try await ServerHarness.with {
            fetched = try await OpenAPI.fetch($0)
            served = $0.server.routes
        }
        let document = try #require(fetched)
        let ids = document.operations.compactMap { $0.definition["operationId"]?.stringValue }
        #expect(ids.count == document.operations.count && Set(ids).count == ids.count, "operationIds: \(ids)")
        #expect(
            Set(document.operations.map { "\($0.method.uppercased()) \($0.path)" }) == Set(served.map { "\($0.method) \($0.path)" }),
            "the router serves what the document describes")
        #expect(document.operations.count == served.count)
        for reference in document.references {
            #expect(document.schemas[reference] != nil, "$ref to missing schema \(reference)")
        }
        for operation in document.operations {
            // A provider callback succeeds by sending the browser on (303).
            #expect(operation.responses.keys.contains { $0.hasPrefix("2") || $0 == "303" }, "\(operation.label) documents no success")
            for (status, response) in operation.responses {
                for (name, link) in response["links"]?.objectValue ?? [:] {
                    #expect(ids.contains(link["operationId"]?.stringValue ?? ""), "\(operation.label) \(status) link \(name) names no operation")
                }
            }
            if operation.definition["security"] != nil {
                #expect(operation.responses["401"]?["headers"]?["WWW-Authenticate"] != nil, "\(operation.label) does not document its bearer challenge")
            }
        }
        let token = try #require(document.operations.first { $0.label == "POST /v1/token" })
        let text = (token.definition["summary"]?.stringValue ?? "") + (token.definition["description"]?.stringValue ?? "")
        #expect(text.contains("app-facing") && text.contains("camelCase") && text.contains("not RFC 6749 §5.1"))
        #expect(
            Set(token.definition["requestBody"]?["content"]?.objectValue?.keys.map { $0 } ?? []) == ["application/x-www-form-urlencoded", "application/json"])
        #expect(document.schemas["Discovery"]?["properties"]?["token_endpoint"] != nil, "the token endpoint is /oauth2/token, which answers RFC 6749")
    }

    // MARK: The running server against the document

    @Test("every operation's successful answer conforms to the document")
    func successesConform() async throws {
        try await ServerHarness.with { harness in
            let contract = try await OpenAPI.fetch(harness)
            for path in ["/.well-known/jwks.json", "/.well-known/openid-configuration", "/healthz", "/readyz", "/metrics", "/openapi.json"] {
                contract.expectConforms(try await harness.send("GET", path), "GET", path)
            }
            let sub = try await harness.emulator.createUser(email: "contract@example.com")
            let first = try await harness.signIn(sub: sub, fullName: ["givenName": "Jane", "familyName": "Appleseed"])
            contract.expectConforms(first, "POST", "/v1/auth/apple", status: 200)
            let second = try await harness.signIn(sub: sub, withCode: false)
            contract.expectConforms(second, "POST", "/v1/auth/apple", status: 200)
            let session = try first.decode(SignInResponse.self)
            let other = try second.decode(SignInResponse.self)

            // A replayed identity token is refused with a documented code.
            let nonce = "nonce-\(UUID().uuidString)"
            let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
            let body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": nonce]
            contract.expectConforms(try await harness.post("/v1/auth/apple", json: body), "POST", "/v1/auth/apple", status: 200)
            contract.expectConforms(try await harness.post("/v1/auth/apple", json: body), "POST", "/v1/auth/apple", status: 401, error: "token_already_used")

            // Refresh in all three shapes; each answer's successor feeds the next.
            let form = try await harness.refresh(session.refreshToken)
            contract.expectConforms(form, "POST", "/v1/token", status: 200)
            let snake = try await harness.post(
                "/v1/token", json: ["grant_type": "refresh_token", "refresh_token": try form.decode(TokenPairResponse.self).refreshToken])
            contract.expectConforms(snake, "POST", "/v1/token", status: 200)
            let camel = try await harness.post(
                "/v1/token", json: ["grantType": "refresh_token", "refreshToken": try snake.decode(TokenPairResponse.self).refreshToken])
            contract.expectConforms(camel, "POST", "/v1/token", status: 200)
            contract.expectConforms(try await harness.refresh(session.refreshToken), "POST", "/v1/token", status: 400, error: "invalid_grant")
            let access = try camel.decode(TokenPairResponse.self).accessToken

            contract.expectConforms(try await harness.send("GET", "/v1/me", bearer: other.accessToken), "GET", "/v1/me", status: 200)
            let sessions = try await harness.send("GET", "/v1/me/sessions", bearer: other.accessToken)
            contract.expectConforms(sessions, "GET", "/v1/me/sessions", status: 200)
            // The replayed refresh token above ended the first session; the second and third are active.
            #expect((sessions.json["sessions"] as? [Any])?.count == 2)
            contract.expectConforms(
                try await harness.send("DELETE", "/v1/me/sessions/\(UUID().uuidString.lowercased())", bearer: other.accessToken), "DELETE",
                "/v1/me/sessions/{id}", status: 404, error: "not_found")
            let sessionID = try #require(OpenAPI.claim("sid", of: access))
            let ended = try await harness.send("DELETE", "/v1/me/sessions/\(sessionID)", bearer: other.accessToken)
            contract.expectConforms(ended, "DELETE", "/v1/me/sessions/{id}", status: 204)
            #expect(ended.body.isEmpty)
            contract.expectConforms(try await harness.send("GET", "/v1/me", bearer: access), "GET", "/v1/me", status: 401, error: "invalid_token")

            contract.expectConforms(try await harness.send("POST", "/v1/logout", bearer: other.accessToken), "POST", "/v1/logout", status: 200)
            let third = try await harness.signIn(sub: sub).decode(SignInResponse.self)
            contract.expectConforms(
                try await harness.send("POST", "/v1/logout", body: #"{"all": true}"#, bearer: third.accessToken), "POST", "/v1/logout", status: 200)
            let last = try await harness.signIn(sub: sub).decode(SignInResponse.self)
            contract.expectConforms(try await harness.send("DELETE", "/v1/me", bearer: last.accessToken), "DELETE", "/v1/me", status: 200)
            contract.expectConforms(try await harness.send("GET", "/v1/me", bearer: last.accessToken), "GET", "/v1/me", status: 401, error: "invalid_token")
        }
    }

    @Test("Apple's notifications: processed, duplicate and refused answers conform")
    func notificationsConform() async throws {
        let capture = try await NotificationCapture.start()
        defer { capture.stop() }
        let port = capture.port
        try await ServerHarness.with { harness in
            let contract = try await OpenAPI.fetch(harness)
            let (sub, _) = try await harness.signedIn()
            await harness.emulator.emulator.setNotificationURL("http://127.0.0.1:\(port)/capture", for: Fixtures.bundleID)
            _ = try await harness.emulator.send("POST", "/emulator/users/\(sub)/email-forwarding", json: ["enabled": false])
            try await poll(until: "a notification at the capture", within: .seconds(5), every: .milliseconds(20)) { await !capture.bodies().isEmpty }
            let body = try #require(await capture.bodies().first)
            contract.expectConforms(try await harness.send("POST", "/v1/apple/notifications", body: body), "POST", "/v1/apple/notifications", status: 200)
            contract.expectConforms(try await harness.send("POST", "/v1/apple/notifications", body: body), "POST", "/v1/apple/notifications", status: 200)
            let forged = try await harness.post(
                "/v1/apple/notifications", json: ["payload": Fixtures.attackerKey.sign(claims: ["iss": "https://appleid.apple.com"])])
            contract.expectConforms(forged, "POST", "/v1/apple/notifications", status: 401)
        }
    }

    @Test("the admin API with real keys: off until a key exists, then every operation's answers, refusals and errors conform")
    func adminConforms() async throws {
        let endpoint = WebhookEndpoint(url: "https://backend.example/hooks/latchkey", secret: Secret(WebhookEndpoint.generateSecret()))
        // The harness runs no webhook dispatcher: each user's deliveries stay pending, so one can be retried.
        try await ServerHarness.with(configure: { $0.webhooks = [endpoint] }) { harness in
            let contract = try await OpenAPI.fetch(harness)
            // The admin API, and the console's page, files and session.
            let admin = harness.server.routes.filter { $0.path == "/admin" || $0.path.hasPrefix("/admin/") }
            #expect(admin.count == 25)
            let routes = admin.filter { $0.path.hasPrefix("/admin/v1/") }
            #expect(routes.count == 19)
            let unknown = UUID().uuidString.lowercased()

            // Off: no key was ever made, so every operation answers 404, whatever it is sent (the console's page says so
            // in HTML).
            for (method, path) in admin {
                let answer = try await harness.send(method, path.replacingOccurrences(of: "{id}", with: unknown), bearer: "lka_x")
                contract.expectConforms(answer, method, path, status: 404, error: path == "/admin" ? nil : "not_found")
            }

            let keys = AdminKeys(store: harness.store)
            let key = try await keys.create(name: "contract", readOnly: false).secret
            let reader = try await keys.create(name: "contract-reader", readOnly: true).secret
            let revoked = try await keys.create(name: "contract-revoked", readOnly: false).secret
            #expect(try await harness.store.revokeAdminKey(name: "contract-revoked", at: Date()))
            let (sub, session) = try await harness.signedIn(email: "admin-contract@example.com")
            let userID = session.user.id

            /// Sends `method path` (its `{id}` filled in) with the read-write key and expects a documented answer.
            func call(
                _ method: String, _ path: String, id: String = unknown, query: String = "", body: String? = nil, bearer: String? = nil, status: Int,
                error: String? = nil, sourceLocation: SourceLocation = #_sourceLocation
            ) async throws -> ServerHarness.Answer {
                let target = path.replacingOccurrences(of: "{id}", with: id) + query
                let answer = try await harness.send(method, target, body: body, bearer: bearer ?? key)
                contract.expectConforms(answer, method, path, status: status, error: error, sourceLocation: sourceLocation)
                return answer
            }

            // No key, a made-up, truncated or revoked one, or an access token: 401 with the challenge. A read-only key
            // may read, never write.
            let refused = [nil, "lka_" + String(repeating: "A", count: 43), String(key.dropLast()), revoked, session.accessToken]
            for (method, path) in routes {
                for bearer in refused {
                    let answer = try await harness.send(method, path.replacingOccurrences(of: "{id}", with: userID), bearer: bearer)
                    contract.expectConforms(answer, method, path, status: 401, error: "invalid_token")
                    #expect(answer.headers["www-authenticate"]?.contains(#"realm="latchkey-admin""#) == true)
                }
                if method != "GET" { _ = try await call(method, path, id: userID, bearer: reader, status: 403, error: "insufficient_scope") }
            }
            _ = try await call("GET", "/admin/v1/users/{id}", id: userID, bearer: reader, status: 200)
            _ = try await call("GET", "/admin/v1/users/{id}/export", id: userID, bearer: reader, status: 200)
            _ = try await call("GET", "/admin/v1/users/{id}/export", status: 404, error: "not_found")

            // Users: search, pages, one user.
            let all = try await call("GET", "/admin/v1/users", status: 200).decode(AdminUserList.self)
            #expect(all.users.map(\.id) == [userID] && all.nextCursor == nil)
            let found = try await call("GET", "/admin/v1/users", query: "?provider=apple&subject=\(sub)&createdAfter=2000-01-01T00:00:00Z", status: 200)
            #expect(try found.decode(AdminUserList.self).users.map(\.id) == [userID])
            let page = try await call("GET", "/admin/v1/users", query: "?limit=1&email=nobody%40example.com", status: 200)
            #expect(try page.decode(AdminUserList.self).users.isEmpty)
            let first = try await call("GET", "/admin/v1/users", query: "?limit=1", status: 200).decode(AdminUserList.self)
            #expect(first.nextCursor == userID)
            let next = try await call("GET", "/admin/v1/users", query: "?cursor=\(userID)&createdAfter=2000-01-01T00:00:00.000Z", status: 200)
            #expect(try next.decode(AdminUserList.self).users.isEmpty)
            for query in ["?subject=x", "?limit=0", "?limit=201", "?limit=ten", "?createdAfter=yesterday", "?name=jane", "?limit=1&limit=2"] {
                _ = try await call("GET", "/admin/v1/users", query: query, status: 400, error: "invalid_request")
            }
            let shown = try await call("GET", "/admin/v1/users/{id}", id: userID, status: 200).decode(AdminUserResponse.self)
            #expect(shown.sessions?.count == 1 && shown.claims == [:])
            _ = try await call("GET", "/admin/v1/users/{id}", status: 404, error: "not_found")

            // Claims: set, refused, and carried by access tokens, GET /v1/me and sign-in answers.
            let claims = #"{"plan": "pro", "app_roles": ["editor"], "org": {"id": 42, "share": 0.5, "beta": true, "parent": null}}"#
            let set = try await call("PUT", "/admin/v1/users/{id}/claims", id: userID, body: claims, status: 200)
            #expect(set.json["claims"] as? [String: Any] != nil)
            let deep = #"{"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}"#
            let large = #"{"notes": "\#(String(repeating: "n", count: 5000))"}"#
            for body in ["[]", "not json", "", #"{"sub": "x"}"#, #"{"": 1}"#, #"{"a": 1, "a": 2}"#, deep, large] {
                _ = try await call("PUT", "/admin/v1/users/{id}/claims", id: userID, body: body, status: 400, error: "invalid_claims")
            }
            let huge = #"{"notes": "\#(String(repeating: "n", count: 40_000))"}"#
            _ = try await call("PUT", "/admin/v1/users/{id}/claims", id: userID, body: huge, status: 413, error: "invalid_request")
            _ = try await call("PUT", "/admin/v1/users/{id}/claims", body: claims, status: 404, error: "not_found")
            let refreshed = try await harness.refresh(session.refreshToken).decode(TokenPairResponse.self)
            #expect(OpenAPI.claim("plan", of: refreshed.accessToken) == "pro" && OpenAPI.claim("idp", of: refreshed.accessToken) == "apple")
            let me = try await harness.send("GET", "/v1/me", bearer: refreshed.accessToken)
            contract.expectConforms(me, "GET", "/v1/me", status: 200)
            #expect(try me.decode(UserResponse.self).claims?["plan"] == .string("pro"))
            let signIn = try await harness.signIn(sub: sub)
            contract.expectConforms(signIn, "POST", "/v1/auth/apple", status: 200)
            let second = try signIn.decode(SignInResponse.self)
            #expect(second.user.claims?["org"] == .object(["id": .integer(42), "share": .number(0.5), "beta": .bool(true), "parent": .null]))

            // Sessions: one, then every one of the user.
            let sessionID = try #require(OpenAPI.claim("sid", of: second.accessToken))
            #expect(try await call("DELETE", "/admin/v1/sessions/{id}", id: sessionID, status: 200).json["revokedSessions"] as? Int == 1)
            #expect(try await call("DELETE", "/admin/v1/sessions/{id}", id: sessionID, status: 200).json["revokedSessions"] as? Int == 0)
            contract.expectConforms(try await harness.send("GET", "/v1/me", bearer: second.accessToken), "GET", "/v1/me", status: 401, error: "invalid_token")
            _ = try await call("DELETE", "/admin/v1/sessions/{id}", status: 404, error: "not_found")
            #expect(try await call("DELETE", "/admin/v1/users/{id}/sessions", id: userID, status: 200).json["revokedSessions"] as? Int == 1)
            _ = try await call("DELETE", "/admin/v1/users/{id}/sessions", status: 404, error: "not_found")
            let ended = try await call("GET", "/admin/v1/users/{id}", id: userID, status: 200).decode(AdminUserResponse.self)
            #expect(ended.sessions?.count == 2 && ended.sessions?.allSatisfy { $0.revocationReason == "revoked_by_admin" } == true)

            // The audit log: what the key did, newest first, a page at a time.
            let audit = try await call("GET", "/admin/v1/audit", query: "?userId=\(userID)&type=admin_claims_set", status: 200).decode(AuditEventList.self)
            #expect(audit.events.count == 1 && audit.events.first?.detail.hasPrefix("key=contract ") == true)
            let newest = try await call("GET", "/admin/v1/audit", query: "?limit=1&since=2000-01-01T00:00:00Z", status: 200).decode(AuditEventList.self)
            let cursor = try #require(newest.nextCursor)
            #expect(try await call("GET", "/admin/v1/audit", query: "?cursor=\(cursor)", status: 200).decode(AuditEventList.self).events.count > 1)
            for query in ["?since=yesterday", "?limit=0", "?user=x", "?type=a&type=b"] {
                _ = try await call("GET", "/admin/v1/audit", query: query, status: 400, error: "invalid_request")
            }

            // Invites: made (the code shown once), listed, revoked.
            let single = try await call("POST", "/admin/v1/invites", status: 201).decode(InviteResponse.self)
            #expect(single.code?.hasPrefix("inv_") == true && single.maxUses == 1 && single.expiresAt == nil)
            let body = #"{"maxUses": 5, "expiresIn": 3600, "note": "beta testers"}"#
            #expect(try await call("POST", "/admin/v1/invites", body: body, status: 201).decode(InviteResponse.self).maxUses == 5)
            let long = #"{"note": "\#(String(repeating: "n", count: 201))"}"#
            for body in [
                #"{"maxUses": 0}"#, #"{"maxUses": 1000001}"#, #"{"expiresIn": 59}"#, #"{"expiresIn": 31536001}"#, long, "[]", "not json", #"{"maxUses": "5"}"#,
            ] {
                _ = try await call("POST", "/admin/v1/invites", body: body, status: 400, error: "invalid_request")
            }
            _ = try await call("POST", "/admin/v1/invites", body: huge, status: 413, error: "invalid_request")
            let invites = try await call("GET", "/admin/v1/invites", status: 200).json["invites"] as? [[String: Any]]
            #expect(invites?.count == 2 && invites?.allSatisfy { $0["code"] == nil } == true)
            #expect(try await call("DELETE", "/admin/v1/invites/{id}", id: single.id, status: 204).body.isEmpty)
            _ = try await call("DELETE", "/admin/v1/invites/{id}", id: single.id, status: 204)
            _ = try await call("DELETE", "/admin/v1/invites/{id}", status: 404, error: "not_found")

            // Webhook deliveries: listed, retried (a failed one; a pending one keeps its schedule).
            let pending = try await call("GET", "/admin/v1/webhooks/deliveries", query: "?status=pending&limit=10", status: 200)
            let waiting = try #require((pending.json["deliveries"] as? [[String: Any]])?.first?["id"] as? String)
            _ = try await call("POST", "/admin/v1/webhooks/deliveries/{id}/retry", id: waiting, status: 404, error: "not_found")
            var given = WebhookEndpoints([WebhookEndpoint(url: "https://backend.example/hooks", secret: "whsec_x")]).deliveries(
                .userCreated("u", provider: "apple", at: harness.clock.now))[0]
            (given.status, given.attempts, given.finishedAt, given.lastError) = (.failed, 10, harness.clock.now, "HTTP 503")
            try await harness.store.enqueueWebhookDeliveries([given])
            let deliveries = try await call("GET", "/admin/v1/webhooks/deliveries", query: "?status=failed&limit=10", status: 200)
            let delivery = try #require((deliveries.json["deliveries"] as? [[String: Any]])?.first?["id"] as? String)
            _ = try await call("GET", "/admin/v1/webhooks/deliveries", status: 200)
            for query in ["?status=lost", "?limit=201", "?since=2026-01-01T00:00:00Z"] {
                _ = try await call("GET", "/admin/v1/webhooks/deliveries", query: query, status: 400, error: "invalid_request")
            }
            let retry = try await call("POST", "/admin/v1/webhooks/deliveries/{id}/retry", id: delivery, status: 202)
            #expect(retry.json["retrying"] as? String == delivery)
            _ = try await call("POST", "/admin/v1/webhooks/deliveries/{id}/retry", status: 404, error: "not_found")
            let one = try await call("GET", "/admin/v1/webhooks/deliveries/{id}", id: delivery, status: 200).decode(WebhookDeliveryResponse.self)
            guard case .object(let payload)? = one.payload else { throw HarnessError("no payload: \(one)") }
            #expect(one.id == delivery && payload["type"] == .string("user.created") && payload["data"] != nil)
            _ = try await call("GET", "/admin/v1/webhooks/deliveries/{id}", status: 404, error: "not_found")

            // Signing keys, listed and rotated; the set-up findings.
            let before = try await call("GET", "/admin/v1/keys", status: 200).decode(SigningKeyList.self)
            let rotation = try await call("POST", "/admin/v1/keys/rotate", status: 200).decode(SigningKeyRotation.self)
            #expect(rotation.retiring == before.keys.filter { $0.state == "active" }.map(\.kid))
            _ = try await call("GET", "/admin/v1/keys", bearer: reader, status: 200)
            _ = try await call("GET", "/admin/v1/findings", bearer: reader, status: 200)

            // The console: its page and files, a session signed in by JSON and by form, refusals, signing out.
            let origin = harness.server.configuration.issuer
            for path in ["/admin", "/admin/console.js", "/admin/console.css"] { _ = try await call("GET", path, status: 200) }
            let signedIn = try await harness.send("POST", "/admin/session", body: #"{"key": "\#(reader)"}"#, headers: [("Origin", origin)])
            contract.expectConforms(signedIn, "POST", "/admin/session", status: 200)
            let cookie = try #require(signedIn.headers["set-cookie"]?.components(separatedBy: ";").first)
            let form = try await harness.send("POST", "/admin/session", body: "key=\(key)", contentType: "application/x-www-form-urlencoded")
            contract.expectConforms(form, "POST", "/admin/session", status: 303)
            for (body, status, error) in [(#"{"key": "\#(revoked)"}"#, 401, "invalid_token"), ("{}", 400, "invalid_request")] {
                contract.expectConforms(try await harness.send("POST", "/admin/session", body: body), "POST", "/admin/session", status: status, error: error)
            }
            let elsewhere = try await harness.send("POST", "/admin/session", body: #"{"key": "\#(key)"}"#, headers: [("Origin", "https://evil.example")])
            contract.expectConforms(elsewhere, "POST", "/admin/session", status: 403, error: "invalid_origin")
            contract.expectConforms(
                try await harness.send("POST", "/admin/session", body: String(repeating: "k", count: 40_000)), "POST", "/admin/session", status: 413)
            contract.expectConforms(try await harness.send("GET", "/admin/session", headers: [("Cookie", cookie)]), "GET", "/admin/session", status: 200)
            contract.expectConforms(try await harness.send("GET", "/admin/session"), "GET", "/admin/session", status: 401, error: "invalid_token")
            let write = try await harness.send("POST", "/admin/v1/keys/rotate", headers: [("Cookie", cookie)])
            contract.expectConforms(write, "POST", "/admin/v1/keys/rotate", status: 403, error: "invalid_origin")
            let readOnly = try await harness.send("POST", "/admin/v1/keys/rotate", headers: [("Cookie", cookie), ("Origin", origin)])
            contract.expectConforms(readOnly, "POST", "/admin/v1/keys/rotate", status: 403, error: "insufficient_scope")
            let out = try await harness.send("POST", "/admin/session/logout", headers: [("Cookie", cookie), ("Origin", origin)])
            contract.expectConforms(out, "POST", "/admin/session/logout", status: 204)
            let outElsewhere = try await harness.send("POST", "/admin/session/logout", headers: [("Origin", "https://evil.example")])
            contract.expectConforms(outElsewhere, "POST", "/admin/session/logout", status: 403, error: "invalid_origin")

            // Disabling and enabling: the user's state, whether it changed, the sessions that ended; unknown users are 404.
            let disabled = try await call("POST", "/admin/v1/users/{id}/disable", id: userID, status: 200).decode(AdminUserDisable.self)
            #expect(disabled.disabled && disabled.changed)
            #expect(try await call("GET", "/admin/v1/users/{id}", id: userID, status: 200).json["disabledAt"] != nil)
            #expect(try await call("POST", "/admin/v1/users/{id}/enable", id: userID, status: 200).decode(AdminUserDisable.self).changed)
            _ = try await call("POST", "/admin/v1/users/{id}/disable", status: 404, error: "not_found")
            _ = try await call("POST", "/admin/v1/users/{id}/enable", status: 404, error: "not_found")

            // Deleting the user: gone from every operation.
            let deleted = try await call("DELETE", "/admin/v1/users/{id}", id: userID, status: 200)
            #expect(deleted.json["deleted"] as? Int == 1)
            _ = try await call("DELETE", "/admin/v1/users/{id}", id: userID, status: 404, error: "not_found")
            _ = try await call("GET", "/admin/v1/users/{id}", id: userID, status: 404, error: "not_found")
            _ = try await call("PUT", "/admin/v1/users/{id}/claims", id: userID, body: "{}", status: 404, error: "not_found")

            // The database gone: 503 as documented.
            await harness.store.close()
            _ = try await call("GET", "/admin/v1/users", status: 503, error: "temporarily_unavailable")
        }
    }

    /// Malformed input of every kind: the exact status and `error` code, and a documented answer.
    static let malformed: [(String, String, String?, String, [(String, String)], Int, String)] = [
        ("POST", "/v1/auth/apple", "not json", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", nil, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", "{}", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", "[]", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", #"{"identityToken": 5}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", #"{"identityToken": null}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", #"{"identityToken": ""}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", #"{"identityToken": "x", "fullName": "Jane"}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", #"{"identityToken": "x", "rawNonce": ["n"]}"#, "application/json", [], 400, "invalid_request"),
        // A member named twice: which one counts would be the decoder's choice, so neither does.
        ("POST", "/v1/auth/apple", #"{"identityToken": "a.b.c", "identityToken": "d.e.f", "rawNonce": "n"}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/auth/apple", #"{"identityToken": "a.b.c", "rawNonce": "n"}"#, "application/json", [], 401, "malformed_token"),
        ("POST", "/v1/auth/apple", #"{"identityToken": "not a jwt", "rawNonce": "n"}"#, "application/json", [], 401, "malformed_token"),
        ("POST", "/v1/auth/apple", #"{"identityToken": "eyJhbGciOiJub25lIn0.e30.", "rawNonce": "n"}"#, "application/json", [], 401, "unsupported_algorithm"),
        ("POST", "/v1/token", "grant_type=password&refresh_token=x", "application/x-www-form-urlencoded", [], 400, "unsupported_grant_type"),
        ("POST", "/v1/token", "refresh_token=lkr_x", "application/x-www-form-urlencoded", [], 400, "invalid_request"),
        ("POST", "/v1/token", "grant_type=refresh_token", "application/x-www-form-urlencoded", [], 400, "invalid_request"),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=", "application/x-www-form-urlencoded", [], 400, "invalid_request"),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=%zz", "application/x-www-form-urlencoded", [], 400, "invalid_request"),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=a&refresh_token=b", "application/x-www-form-urlencoded", [], 400, "invalid_request"),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=lkr_x", "application/x-www-form-urlencoded", [], 400, "invalid_grant"),
        (
            "POST", "/v1/token", "grant_type=refresh_token&refresh_token=lkr_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "application/x-www-form-urlencoded",
            [], 400, "invalid_grant"
        ),
        ("POST", "/v1/token", "{", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/token", #"{"grant_type": 1, "refresh_token": "lkr_x"}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/token", #"{"grantType": "refresh_token"}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/token", #"{"grantType": "client_credentials", "refreshToken": "lkr_x"}"#, "application/json", [], 400, "unsupported_grant_type"),
        ("POST", "/v1/token", #"{"grantType": "refresh_token", "refreshToken": "lkr_x"}"#, "application/json", [], 400, "invalid_grant"),
        // A snake_case member wins over its camelCase twin unless it is null.
        (
            "POST", "/v1/token", #"{"grant_type": "refresh_token", "refresh_token": "", "refreshToken": "lkr_x"}"#, "application/json", [], 400,
            "invalid_request"
        ),
        (
            "POST", "/v1/token", #"{"grant_type": "password", "grantType": "refresh_token", "refreshToken": "lkr_x"}"#, "application/json", [], 400,
            "unsupported_grant_type"
        ),
        (
            "POST", "/v1/token", #"{"grant_type": null, "grantType": "refresh_token", "refresh_token": null, "refreshToken": "lkr_x"}"#, "application/json", [],
            400, "invalid_grant"
        ),
        ("POST", "/v1/token", #"{"grant_type": "refresh_token", "refresh_token": "lkr_x", "grantType": 7}"#, "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/token", "grant_type=refresh_token&refresh_token=x", "text/plain", [], 400, "invalid_request"),
        ("POST", "/v1/token", nil, "application/json", [], 400, "invalid_request"),
        ("GET", "/v1/me", nil, "application/json", [], 401, "invalid_token"),
        ("GET", "/v1/me", nil, "application/json", [("Authorization", "Basic dXNlcjpwYXNz")], 401, "invalid_token"),
        ("GET", "/v1/me", nil, "application/json", [("Authorization", "Bearer not-a-jwt")], 401, "invalid_token"),
        ("GET", "/v1/me", nil, "application/json", [("Authorization", "Bearer eyJhbGciOiJFUzI1NiIsImtpZCI6Ingifq.e30.c2ln")], 401, "invalid_token"),
        ("GET", "/v1/me/sessions", nil, "application/json", [("Authorization", "Bearer ")], 401, "invalid_token"),
        ("DELETE", "/v1/me", nil, "application/json", [], 401, "invalid_token"),
        ("DELETE", "/v1/me/sessions/x", nil, "application/json", [], 401, "invalid_token"),
        ("POST", "/v1/logout", nil, "application/json", [], 401, "invalid_token"),
        ("POST", "/v1/logout", #"{"all": true}"#, "application/json", [("Authorization", "Bearer a.b.c")], 401, "invalid_token"),
        ("POST", "/v1/apple/notifications", "[]", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/apple/notifications", "{}", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/apple/notifications", "not json", "application/json", [], 400, "invalid_request"),
        ("POST", "/v1/apple/notifications", #"{"payload":"x.y.z"}"#, "application/json", [], 401, "malformed_token"),
    ]

    @Test("malformed input gets the exact status and error code, as documented", arguments: malformed)
    func malformedInput(method: String, path: String, body: String?, contentType: String, headers: [(String, String)], status: Int, code: String) async throws {
        try await ServerHarness.with { harness in
            let contract = try await OpenAPI.fetch(harness)
            let answer = try await harness.send(method, path, body: body, contentType: contentType, headers: headers)
            contract.expectConforms(answer, method, path == "/v1/me/sessions/x" ? "/v1/me/sessions/{id}" : path, status: status, error: code)
        }
    }

    @Test("an authenticated request with a malformed body, and unknown routes and methods, get the exact status and code")
    func authenticatedMalformedAndUnknown() async throws {
        try await ServerHarness.with { harness in
            let contract = try await OpenAPI.fetch(harness)
            let (_, tokens) = try await harness.signedIn()
            for body in ["[", #"{"all": "yes"}"#, "5"] {
                contract.expectConforms(
                    try await harness.send("POST", "/v1/logout", body: body, bearer: tokens.accessToken), "POST", "/v1/logout", status: 400,
                    error: "invalid_request")
            }
            for (method, path) in [("GET", "/v1/nothing-here"), ("PUT", "/v1/me"), ("GET", "/v1/token"), ("POST", "/healthz"), ("DELETE", "/v1/me/sessions/")] {
                let answer = try await harness.send(method, path, bearer: tokens.accessToken)
                #expect(answer.status == 404 && answer.error == "not_found", "\(method) \(path): \(answer.status) \(answer.text)")
                #expect(contract.checker.errors(try Value.parse(answer.body), contract.schemas["Error"] ?? .null, at: "\(method) \(path)").isEmpty)
            }
        }
    }

    @Test("body limits answer 413 as documented")
    func bodyLimits() async throws {
        try await ServerHarness.with { harness in
            let contract = try await OpenAPI.fetch(harness)
            let (_, tokens) = try await harness.signedIn()
            let big = String(repeating: "a", count: 40_000)
            contract.expectConforms(
                try await harness.send("POST", "/v1/auth/apple", body: #"{"identityToken":"\#(big)"}"#), "POST", "/v1/auth/apple", status: 413,
                error: "invalid_request")
            contract.expectConforms(try await harness.refresh(big), "POST", "/v1/token", status: 413, error: "invalid_request")
            contract.expectConforms(
                try await harness.send("POST", "/v1/logout", body: #"{"all":true,"x":"\#(big)"}"#, bearer: tokens.accessToken), "POST", "/v1/logout",
                status: 413, error: "invalid_request")
            let huge = String(repeating: "a", count: 70_000)
            contract.expectConforms(
                try await harness.send("POST", "/v1/apple/notifications", body: #"{"payload":"\#(huge)"}"#), "POST", "/v1/apple/notifications", status: 413,
                error: "invalid_request")
        }
    }

    @Test("rate limits answer 429 with Retry-After as documented")
    func rateLimited() async throws {
        try await ServerHarness.with(configure: { $0.rateLimit.perClientIP = 1 }) { harness in
            let contract = try await OpenAPI.fetch(harness)
            contract.expectConforms(try await harness.refresh("lkr_x"), "POST", "/v1/token", status: 400, error: "invalid_grant")
            contract.expectConforms(try await harness.refresh("lkr_x"), "POST", "/v1/token", status: 429, error: "rate_limited")
            contract.expectConforms(
                try await harness.post("/v1/auth/apple", json: ["identityToken": "x"]), "POST", "/v1/auth/apple", status: 429, error: "rate_limited")
        }
    }

    @Test("outages answer 503, and Apple refusing this server's credentials 502, as documented")
    func outages() async throws {
        try await ServerHarness.with(configure: { $0.apple = nil }) { harness in
            let contract = try await OpenAPI.fetch(harness)
            contract.expectConforms(
                try await harness.post("/v1/auth/apple", json: ["identityToken": "x"]), "POST", "/v1/auth/apple", status: 503, error: "temporarily_unavailable")
            contract.expectConforms(
                try await harness.post("/v1/apple/notifications", json: ["payload": "x.y.z"]), "POST", "/v1/apple/notifications", status: 503,
                error: "temporarily_unavailable")
        }
        try await ServerHarness.with(configure: { $0.apple?.keyID = "WRONGKEY99" }) { harness in
            let contract = try await OpenAPI.fetch(harness)
            let sub = try await harness.emulator.createUser()
            contract.expectConforms(try await harness.signIn(sub: sub), "POST", "/v1/auth/apple", status: 502, error: "invalid_client")
        }
        try await ServerHarness.with { harness in
            let contract = try await OpenAPI.fetch(harness)
            await harness.store.close()
            contract.expectConforms(try await harness.send("GET", "/readyz"), "GET", "/readyz", status: 503, error: "temporarily_unavailable")
        }
    }
}

// MARK: - The document

/// `/openapi.json` as served, with what the tests ask of it.
struct OpenAPI: Sendable {
    let root: Value
    var schemas: [String: Value] { root["components"]?["schemas"]?.objectValue ?? [:] }
    var checker: SchemaChecker { SchemaChecker(schemas: schemas) }

    /// The components that are a LatchkeyModels wire type.
    static let wireTypes: [String: any (Codable & Sendable).Type] = [
        "AppleSignInRequest": AppleSignInRequest.self, "FullName": AppleSignInRequest.FullName.self, "TokenPairResponse": TokenPairResponse.self,
        "SignInResponse": SignInResponse.self, "UserResponse": UserResponse.self, "IdentityResponse": IdentityResponse.self,
        "SessionResponse": SessionResponse.self, "Error": OAuthErrorResponse.self, "ProviderSignInRequest": ProviderSignInRequest.self,
        "Claims": [String: JSONValue].self, "AdminUserResponse": AdminUserResponse.self, "AdminUserList": AdminUserList.self,
        "AdminSessionResponse": AdminSessionResponse.self, "AuditEventResponse": AuditEventResponse.self, "AuditEventList": AuditEventList.self,
        "InviteResponse": InviteResponse.self, "InviteRequest": InviteRequest.self, "WebhookDeliveryResponse": WebhookDeliveryResponse.self,
        "Health": StatusResponse.self, "Ready": StatusResponse.self, "SessionList": SessionList.self, "LogoutResponse": RevokedSessionsResponse.self,
        "RevokedSessions": RevokedSessionsResponse.self, "AccountDeletion": AccountDeletionResponse.self,
        "AppleNotificationResponse": AppleNotificationResponse.self, "Redirect": RedirectResponse.self, "AdminUserDeletion": AdminUserDeletion.self,
        "ClaimsResponse": ClaimsResponse.self, "InviteList": InviteList.self, "WebhookDeliveryList": WebhookDeliveryList.self,
        "DeliveryRetry": DeliveryRetry.self, "Passkey": PasskeyResponse.self, "PasskeyList": PasskeyList.self,
        "AdminUserDisable": AdminUserDisable.self, "ImportedFrom": ImportedFromResponse.self, "EmailStartRequest": EmailStartRequest.self,
        "EmailVerifyRequest": EmailVerifyRequest.self, "EmailSent": StatusResponse.self, "AppAttestEvidence": AppAttestEvidence.self,
        "AppAttestKeyResponse": AppAttestKeyResponse.self, "ExportedWebhookDelivery": ExportedWebhookDelivery.self, "UserDataExport": UserDataExport.self,
        "SigningKeyResponse": SigningKeyResponse.self, "SigningKeyList": SigningKeyList.self, "SigningKeyRotation": SigningKeyRotation.self,
        "SetupFinding": SetupFinding.self, "SetupFindingList": SetupFindingList.self, "ConsoleSignInRequest": ConsoleSignInRequest.self,
        "ConsoleSessionResponse": ConsoleSessionResponse.self,
    ]

    /// The answers that wrap other wire types or a count, built from `passkey` and the others given.
    static func answers(
        date: Date, session: SessionResponse, claims: [String: JSONValue], delivery: WebhookDeliveryResponse, invite: InviteResponse,
        passkey: PasskeyResponse
    ) -> [(String, any Encodable)] {
        [
            ("Health", StatusResponse(status: "ok")), ("Ready", StatusResponse(status: "ready")), ("SessionList", SessionList(sessions: [session])),
            ("LogoutResponse", RevokedSessionsResponse(revokedSessions: 2)), ("RevokedSessions", RevokedSessionsResponse(revokedSessions: 1)),
            ("AccountDeletion", AccountDeletionResponse(tokensRevoked: 1, revocationsPending: 1)),
            ("AppleNotificationResponse", AppleNotificationResponse(status: "processed")),
            ("Redirect", RedirectResponse(redirectTo: "com.example.app:/oauth2redirect?code=c")),
            ("AdminUserDeletion", AdminUserDeletion(tokensRevoked: 1, revocationsPending: 0)), ("ClaimsResponse", ClaimsResponse(claims: claims)),
            ("InviteList", InviteList(invites: [invite])), ("WebhookDeliveryList", WebhookDeliveryList(deliveries: [delivery])),
            ("DeliveryRetry", DeliveryRetry(retrying: delivery.id)), ("Passkey", passkey), ("PasskeyList", PasskeyList(passkeys: [passkey])),
            ("AdminUserDisable", AdminUserDisable(userId: "u", disabled: true, changed: true, sessionsRevoked: 2)),
            ("ImportedFrom", ImportedFromResponse(source: "firebase", id: "u", at: date)),
            ("EmailSent", StatusResponse(status: "sent")),
        ]
    }

    static func ref(_ name: String) -> Value { .object(["$ref": .string("#/components/schemas/\(name)")]) }

    static func fetch() async throws -> OpenAPI {
        var document: OpenAPI?
        try await ServerHarness.with { document = try await fetch($0) }
        return try #require(document)
    }

    static func fetch(_ harness: ServerHarness) async throws -> OpenAPI {
        let answer = try await harness.send("GET", "/openapi.json")
        guard answer.status == 200 else { throw HarnessError("/openapi.json answered \(answer.status)") }
        return OpenAPI(root: try Value.parse(answer.body))
    }

    struct Operation {
        let method: String
        let path: String
        let definition: Value
        var label: String { "\(method) \(path)" }
        var responses: [String: Value] { definition["responses"]?.objectValue ?? [:] }
    }

    var operations: [Operation] {
        (root["paths"]?.objectValue ?? [:]).flatMap { path, item in
            (item.objectValue ?? [:]).map { Operation(method: $0.key.uppercased(), path: path, definition: $0.value) }
        }
    }

    struct Example {
        let location: String
        let value: Value
        let schema: Value
    }

    /// Every example: of the component schemas, and of every request body and response.
    var examples: [Example] {
        var examples: [Example] = []
        for (name, schema) in schemas {
            for (index, example) in (schema["examples"]?.arrayValue ?? []).enumerated() {
                examples.append(Example(location: "schema \(name) example \(index)", value: example, schema: Self.ref(name)))
            }
        }
        func add(_ content: Value?, _ location: String) {
            for (mediaType, media) in content?.objectValue ?? [:] {
                let schema = media["schema"] ?? .object([:])
                if let example = media["example"] { examples.append(Example(location: "\(location) \(mediaType) example", value: example, schema: schema)) }
                for (name, example) in media["examples"]?.objectValue ?? [:] {
                    examples.append(Example(location: "\(location) \(mediaType) example \(name)", value: example["value"] ?? .null, schema: schema))
                }
            }
        }
        for operation in operations {
            add(operation.definition["requestBody"]?["content"], "\(operation.label) request")
            for (status, response) in operation.responses { add(response["content"], "\(operation.label) \(status)") }
            for parameter in operation.definition["parameters"]?.arrayValue ?? [] {
                if let example = parameter["example"] {
                    examples.append(Example(location: "\(operation.label) parameter", value: example, schema: parameter["schema"] ?? .null))
                }
            }
        }
        return examples
    }

    /// Every `$ref`'s component name.
    var references: [String] {
        func walk(_ value: Value) -> [String] {
            switch value {
            case .object(let members):
                let own = members["$ref"]?.stringValue.map { [String($0.dropFirst("#/components/schemas/".count))] } ?? []
                return own + members.values.flatMap(walk)
            case .array(let items): return items.flatMap(walk)
            default: return []
            }
        }
        return walk(root)
    }

    /// Round-trips `value` through the wire type of every component it is documented as, at every depth:
    /// decoded as the server decodes requests (or a client answers), re-encoded as the server encodes, compared.
    func roundTrip(_ value: Value, _ schema: Value, at location: String, done: inout Set<String>) -> [String] {
        var errors: [String] = []
        var schema = schema
        if let name = schema["$ref"]?.stringValue.map({ String($0.dropFirst("#/components/schemas/".count)) }) {
            if let type = Self.wireTypes[name] {
                done.insert(name)
                do {
                    let again = try Self.roundTrip(value, type)
                    if again != value { errors.append("\(location): \(name) round-trips \(value) to \(again)") }
                } catch {
                    errors.append("\(location): \(value) does not decode as \(name): \(error)")
                }
            }
            schema = schemas[name] ?? .null
        } else if Set(schema["properties"]?.objectValue?.keys.map { $0 } ?? []) == ["error", "error_description"] {
            done.insert("Error")
            do {
                let again = try Self.roundTrip(value, OAuthErrorResponse.self)
                if again != value { errors.append("\(location): the error body round-trips \(value) to \(again)") }
            } catch {
                errors.append("\(location): \(value) is not an error body: \(error)")
            }
        }
        switch value {
        case .object(let members):
            for (key, member) in members {
                if let property = schema["properties"]?[key] { errors += roundTrip(member, property, at: "\(location).\(key)", done: &done) }
            }
        case .array(let items):
            if let itemSchema = schema["items"] {
                for (index, item) in items.enumerated() { errors += roundTrip(item, itemSchema, at: "\(location)[\(index)]", done: &done) }
            }
        default:
            break
        }
        for alternative in schema["anyOf"]?.arrayValue ?? [] where checker.errors(value, alternative, at: location).isEmpty {
            errors += roundTrip(value, alternative, at: location, done: &done)
        }
        for part in schema["allOf"]?.arrayValue ?? [] { errors += roundTrip(value, part, at: location, done: &done) }
        return errors
    }

    static func roundTrip<T: Codable>(_ value: Value, _ type: T.Type) throws -> Value {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let decoded = try decoder.decode(T.self, from: try JSONEncoder().encode(value))
        return try Value.encoding(decoded)
    }

    /// Where an encoded value's members differ from its schema's properties, recursively.
    func memberMismatches(_ value: Value, _ schema: Value, at location: String) -> [String] {
        var schema = schema
        while let name = schema["$ref"]?.stringValue { schema = schemas[String(name.dropFirst("#/components/schemas/".count))] ?? .null }
        if let alternatives = schema["anyOf"]?.arrayValue, let match = alternatives.first(where: { checker.errors(value, $0, at: location).isEmpty }) {
            return memberMismatches(value, match, at: location)
        }
        switch value {
        case .object(let members):
            // A schema without properties that is not closed is a map of any names (the claims): its members are the value's own.
            if schema["properties"] == nil && schema["additionalProperties"] != .bool(false) { return [] }
            let properties = schema["properties"]?.objectValue ?? [:]
            var errors: [String] = []
            let extra = Set(members.keys).subtracting(properties.keys)
            let missing = Set(properties.keys).subtracting(members.keys)
            if !extra.isEmpty { errors.append("\(location): the wire type has members the schema lacks: \(extra.sorted())") }
            if !missing.isEmpty { errors.append("\(location): the schema has properties the wire type lacks: \(missing.sorted())") }
            for (key, member) in members {
                if let property = properties[key] { errors += memberMismatches(member, property, at: "\(location).\(key)") }
            }
            return errors
        case .array(let items):
            return items.enumerated().flatMap { memberMismatches($0.element, schema["items"] ?? .null, at: "\(location)[\($0.offset)]") }
        default:
            return []
        }
    }

    /// The optional members of `value` (at any depth) that are nil, and its arrays that are empty.
    static func unsetMembers(_ value: Any, at location: String = "") -> [String] {
        let mirror = Mirror(reflecting: value)
        switch mirror.displayStyle {
        case .optional:
            guard let wrapped = mirror.children.first?.value else { return [location] }
            return unsetMembers(wrapped, at: location)
        case .collection:
            return mirror.children.isEmpty
                ? [location] : mirror.children.enumerated().flatMap { unsetMembers($0.element.value, at: "\(location)[\($0.offset)]") }
        case .struct:
            return mirror.children.flatMap { unsetMembers($0.value, at: location + "." + ($0.label ?? "?")) }
        default:
            return []
        }
    }

    /// A claim of a JWT, unverified.
    static func claim(_ name: String, of jwt: String) -> String? {
        let parts = jwt.split(separator: ".")
        guard parts.count == 3, let claims = try? Value.parse(base64URLDecoded(parts[1])) else { return nil }
        return claims[name]?.stringValue
    }

    /// Expects `answer` to be documented for the operation: its status, media type, required headers and body;
    /// and, when given, the exact status and `error` code.
    func expectConforms(
        _ answer: ServerHarness.Answer, _ method: String, _ path: String, status: Int? = nil, error code: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let label = "\(method) \(path) → \(answer.status) \(answer.text.prefix(300))"
        if let status { #expect(answer.status == status, "\(label): expected \(status)", sourceLocation: sourceLocation) }
        if let code { #expect(answer.error == code, "\(label): expected error \(code)", sourceLocation: sourceLocation) }
        guard let operation = operations.first(where: { $0.label == "\(method) \(path)" }) else {
            Issue.record("\(method) \(path) is not documented", sourceLocation: sourceLocation)
            return
        }
        guard let response = operation.responses[String(answer.status)] else {
            Issue.record("\(label): status \(answer.status) is not documented", sourceLocation: sourceLocation)
            return
        }
        for (name, header) in response["headers"]?.objectValue ?? [:] {
            guard let value = answer.headers[name.lowercased()] else {
                if header["required"] == .bool(true) { Issue.record("\(label): required header \(name) is missing", sourceLocation: sourceLocation) }
                continue
            }
            let schema = header["schema"] ?? .null
            let typed: Value = schema["type"] == .string("integer") ? Int(value).map(Value.int) ?? .string(value) : .string(value)
            let errors = checker.errors(typed, schema, at: "header \(name)")
            #expect(errors.isEmpty, "\(label): \(errors)", sourceLocation: sourceLocation)
        }
        guard let content = response["content"]?.objectValue else {
            #expect(answer.body.isEmpty, "\(label): documented without a body", sourceLocation: sourceLocation)
            return
        }
        let mediaType = (answer.headers["content-type"] ?? "").split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        guard let media = content[mediaType] else {
            Issue.record("\(label): media type \(mediaType) is not documented (\(content.keys.sorted()))", sourceLocation: sourceLocation)
            return
        }
        guard mediaType == "application/json" else { return }
        do {
            let errors = checker.errors(try Value.parse(answer.body), media["schema"] ?? .null, at: "body")
            #expect(errors.isEmpty, "\(label): \(errors.joined(separator: "; "))", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(label): the body is not JSON", sourceLocation: sourceLocation)
        }
    }
}

// MARK: - JSON values and schemas

/// A JSON value decoded strictly: JSONDecoder tells booleans from numbers, which JSONSerialization on Linux does not.
enum Value: Codable, Equatable, Sendable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case array([Value])
    case object([String: Value])

    // The commonest kinds first: each failed try throws, and Swift Testing records a backtrace for every throw.
    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([String: Value].self) {
            self = .object(value)
        } else if let value = try? container.decode([Value].self) {
            self = .array(value)
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else {
            self = .double(try container.decode(Double.self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    static func parse(_ bytes: some Sequence<UInt8>) throws -> Value { try JSONDecoder().decode(Value.self, from: Data(bytes)) }

    /// `value` encoded as the server encodes answers.
    static func encoding(_ value: some Encodable) throws -> Value {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try parse(try encoder.encode(value))
    }

    subscript(key: String) -> Value? { objectValue?[key] }
    var objectValue: [String: Value]? { if case .object(let members) = self { members } else { nil } }
    var arrayValue: [Value]? { if case .array(let items) = self { items } else { nil } }
    var stringValue: String? { if case .string(let text) = self { text } else { nil } }

    var description: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "?"
    }
}

/// Validates values against the JSON Schema subset the document uses; a keyword it does not know is an error,
/// so the document cannot say more than these tests check.
struct SchemaChecker: Sendable {
    let schemas: [String: Value]

    static let annotations: Set<String> = ["description", "examples", "example", "title"]
    static let keywords: Set<String> = [
        "$ref", "type", "enum", "properties", "required", "additionalProperties", "items", "pattern", "minLength", "minimum", "maximum", "format", "anyOf",
        "allOf",
    ]

    func errors(_ value: Value, _ schema: Value, at location: String) -> [String] {
        guard let keywords = schema.objectValue else { return ["\(location): the schema is not an object"] }
        var errors: [String] = []
        for keyword in keywords.keys where !Self.keywords.contains(keyword) && !Self.annotations.contains(keyword) {
            errors.append("\(location): the schema uses \(keyword), which this checker does not know")
        }
        if let reference = keywords["$ref"]?.stringValue {
            guard let target = schemas[String(reference.dropFirst("#/components/schemas/".count))] else {
                return errors + ["\(location): \(reference) does not resolve"]
            }
            errors += self.errors(value, target, at: location)
        }
        if let type = keywords["type"] {
            let types = type.arrayValue?.compactMap(\.stringValue) ?? type.stringValue.map { [$0] } ?? []
            if !types.contains(where: { Self.matches(value, $0) }) { errors.append("\(location): \(value) is not of type \(types)") }
        }
        if let options = keywords["enum"]?.arrayValue, !options.contains(value) { errors.append("\(location): \(value) is not one of \(options)") }
        if let alternatives = keywords["anyOf"]?.arrayValue, !alternatives.contains(where: { self.errors(value, $0, at: location).isEmpty }) {
            errors.append("\(location): \(value) matches none of anyOf")
        }
        for part in keywords["allOf"]?.arrayValue ?? [] { errors += self.errors(value, part, at: location) }
        switch value {
        case .object(let members):
            let properties = keywords["properties"]?.objectValue ?? [:]
            for name in keywords["required"]?.arrayValue?.compactMap(\.stringValue) ?? [] where members[name] == nil {
                errors.append("\(location): the required member \(name) is missing")
            }
            for (name, member) in members {
                if let property = properties[name] {
                    errors += self.errors(member, property, at: "\(location).\(name)")
                } else if keywords["additionalProperties"] == .bool(false) {
                    errors.append("\(location): the member \(name) is not allowed")
                }
            }
        case .array(let items):
            if let itemSchema = keywords["items"] {
                for (index, item) in items.enumerated() { errors += self.errors(item, itemSchema, at: "\(location)[\(index)]") }
            }
        case .string(let text):
            if case .int(let minimum) = keywords["minLength"], text.count < minimum { errors.append("\(location): \"\(text)\" is shorter than \(minimum)") }
            if let pattern = keywords["pattern"]?.stringValue {
                if let regex = try? Regex(pattern) {
                    if text.firstMatch(of: regex) == nil { errors.append("\(location): \"\(text)\" does not match \(pattern)") }
                } else {
                    errors.append("\(location): the pattern \(pattern) does not compile")
                }
            }
            if keywords["format"] == .string("date-time") {
                let whole = ISO8601DateFormatter()
                let fractional = ISO8601DateFormatter()
                fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                if whole.date(from: text) == nil && fractional.date(from: text) == nil {
                    errors.append("\(location): \"\(text)\" is not an RFC 3339 date-time")
                }
            }
        case .int(let number):
            if case .int(let minimum) = keywords["minimum"], number < minimum { errors.append("\(location): \(number) is below \(minimum)") }
            if case .int(let maximum) = keywords["maximum"], number > maximum { errors.append("\(location): \(number) is above \(maximum)") }
        default:
            break
        }
        return errors
    }

    static func matches(_ value: Value, _ type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("integer", .int), ("number", .int), ("number", .double), ("string", .string), ("array", .array),
            ("object", .object):
            true
        default: false
        }
    }
}
