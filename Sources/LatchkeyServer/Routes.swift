import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders

extension LatchkeyServer {
    /// Every route the router serves, read from Hummingbird's router, paths as OpenAPI writes them (`{id}`);
    /// `/openapi.json` documents exactly these (a test holds them together).
    public var routes: [(method: String, path: String)] {
        makeRouter().routes.map { ($0.method.rawValue, $0.path.description) }
    }

    func addRoutes(to router: Router<LatchkeyRequestContext>) {
        // Apple's own path predates the others: the same handler, named in logs and metrics as before.
        router.post("/v1/auth/apple") { request, _ in try await signIn(request, providerName: "apple") }
        router.post("/v1/auth/anonymous") { request, context in try await signInAnonymously(request, from: origin(request, context)) }
        router.post("/v1/me/merge/:provider") { request, context in try await merge(request, providerName: try context.parameters.require("provider")) }
        router.post("/v1/auth/:provider") { request, context in try await signIn(request, providerName: try context.parameters.require("provider")) }
        router.post("/v1/token") { request, context in try await refresh(request, from: origin(request, context)) }
        router.post("/v1/logout") { request, _ in try await logout(request) }
        router.get("/v1/me") { request, _ in try await me(request) }
        router.delete("/v1/me") { request, _ in try await deleteMe(request) }
        router.get("/v1/me/sessions") { request, _ in try await listSessions(request) }
        router.delete("/v1/me/sessions/:id") { request, context in try await deleteSession(request, id: try context.parameters.require("id")) }
        router.post("/v1/me/identities/:provider") { request, context in
            try await linkIdentity(request, providerName: try context.parameters.require("provider"))
        }
        router.delete("/v1/me/identities/:provider/:subject") { request, context in
            try await unlinkIdentity(request, providerName: try context.parameters.require("provider"), subject: try context.parameters.require("subject"))
        }
        router.post("/v1/apple/notifications") { request, _ in try await appleNotification(request) }
        addPasskeyRoutes(to: router)
        addEmailRoutes(to: router)
        addAppAttestRoutes(to: router)
        addExportRoutes(to: router)
        // Cached for one maintenance interval: a rotated key signs only after two, so backends that verify with a cached
        // copy have the new key before its first token, even without refetching on an unknown kid.
        let jwksCaching = "public, max-age=\(Int(configuration.maintenanceInterval))"
        router.get("/.well-known/jwks.json") { _, _ in JSONBody.response(accessKeys.jwks, headers: [.cacheControl: jwksCaching]) }
        router.get("/.well-known/openid-configuration") { _, _ in
            JSONBody.response(authorizationServerMetadata, headers: [.cacheControl: "public, max-age=3600"])
        }
        addOAuthRoutes(to: router)
        addAdminRoutes(to: router)
        router.get("/healthz") { _, _ in JSONBody.response(StatusResponse(status: "ok")) }
        router.get("/readyz") { _, _ in
            do {
                try await store.ping()
                return JSONBody.response(StatusResponse(status: "ready"))
            } catch {
                return JSONBody.error(APIError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "the database cannot be reached"))
            }
        }
        router.get("/metrics") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: .init(string: metrics.exposition())))
        }
        // Encoded once; a document that could not be loaded (its tests load it first) answers 500 here, and stops nothing else.
        let openAPI = Result { () throws(OpenAPIDocument.LoadError) in ByteBuffer(bytes: try OpenAPIDocument.json(serverURL: configuration.issuer)) }
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: "public, max-age=3600"], body: .init(byteBuffer: try openAPI.get()))
        }
    }

    // MARK: - Sign-in

    /// What a sign-in or link body says, whichever provider it is for.
    private struct CredentialBody {
        var credential: ProviderCredential
        var givenName: String?
        var familyName: String?
        var inviteCode: String?
    }

    func provider(_ name: String) throws -> any IdentityProvider {
        if let provider = providers[name] { return provider }
        if let module = ProviderModules.all.first(where: { $0.name == name }) {
            let required = module.settings.filter { $0.defaultValue == "—" }.map {
                $0.key.components(separatedBy: " / ").map { "\(name).\($0)" }.joined(separator: " or ")
            }
            throw APIError(
                status: .serviceUnavailable, code: "temporarily_unavailable",
                description: "Sign in with \(module.displayName) is not configured on this server (set \(required.joined(separator: ", ")))")
        }
        let configured = providers.names
        throw APIError(
            status: .notFound, code: "not_found",
            description:
                "no provider \"\(name.prefix(40))\" is configured on this server; configured: \(configured.isEmpty ? "none" : configured.joined(separator: ", "))"
        )
    }

    private func credentialBody(_ request: Request, provider: any IdentityProvider) async throws -> CredentialBody {
        try credentialBody(try await request.bytes(limit: configuration.maximumBodySize), provider: provider)
    }

    private func credentialBody(_ bytes: [UInt8], provider: any IdentityProvider) throws -> CredentialBody {
        let body: any SignInBody
        do { body = try provider.signInBody.decoded(from: bytes) } catch { throw Self.notTheJSONThisEndpointTakes }
        return CredentialBody(
            credential: try body.credential(), givenName: try Self.profileName(body.name?.givenName, "fullName.givenName"),
            familyName: try Self.profileName(body.name?.familyName, "fullName.familyName"), inviteCode: body.inviteCode)
    }

    /// The longest name kept (longer ones are cut), as in the browser flow's answers from Apple.
    static let maximumNameLength = 200

    /// A name an app sends: cut to ``maximumNameLength``; one with a control character (which no name holds, and
    /// PostgreSQL refuses in text) is refused.
    static func profileName(_ name: String?, _ field: String) throws -> String? {
        guard let name else { return nil }
        guard !containsControlCharacter(name) else { throw APIError.invalidRequest("\(field) holds a control character") }
        return String(name.prefix(maximumNameLength))
    }

    func signIn(_ request: Request, providerName: String) async throws -> Response {
        do {
            let provider = try provider(providerName)
            let bytes = try await request.bytes(limit: configuration.maximumBodySize)
            let body = try credentialBody(bytes, provider: provider)
            let outcome = try await attesting(bytes) {
                try await signInFlow.signIn(
                    provider, body.credential, name: PersonName(givenName: body.givenName, familyName: body.familyName),
                    userAgent: request.headers[.userAgent], inviteCode: body.inviteCode)
            }
            metrics.signIn(provider: provider.name, outcome: outcome.isNewUser ? "new_user" : "ok")
            return Self.signInResponse(outcome)
        } catch {
            // Only configured providers get a metrics label: a path segment is the caller's to choose.
            if providers[providerName] != nil {
                metrics.signIn(provider: providerName, outcome: (error as? LatchkeyError)?.errorCode ?? (error as? APIError)?.code ?? "error")
            }
            throw error
        }
    }

    // MARK: - Guests

    /// `POST /v1/auth/anonymous` with `{}` (or `{"inviteCode"}`, which is accepted and not spent): a guest and their
    /// session.
    func signInAnonymously(_ request: Request, from origin: RequestOrigin) async throws -> Response {
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        if !bytes.isEmpty {
            guard let body = try? LeanJSONDecoder().decode([String: JSONValue].self, from: bytes),
                body.keys.allSatisfy({ $0 == "inviteCode" || $0 == "appAttest" }),
                body["inviteCode"].map({ if case .string = $0 { true } else { false } }) ?? true
            else { throw APIError.invalidRequest("the body is {} or {\"inviteCode\": \"…\"}, with appAttest where App Attest is on") }
        }
        let outcome = try await attesting(bytes) { try await sessions.guests.signIn(ip: origin.ip, userAgent: origin.userAgent) }
        metrics.signIn(provider: "anonymous", outcome: "new_user")
        return Self.signInResponse(outcome)
    }

    /// `POST /v1/me/merge/{provider}`: a guest proves another account afresh (the body of `POST /v1/auth/{provider}`)
    /// and is merged into it; the answer is a session of that account.
    func merge(_ request: Request, providerName: String) async throws -> Response {
        let (token, _) = try await authenticate(request)
        guard try await store.user(id: token.userID)?.isAnonymous == true else {
            throw LatchkeyError(.mergeNotAllowed, "only a guest (an anonymous user) is merged into another account; link the identity instead")
        }
        let outcome: SignInService.SignInOutcome
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        switch providerName {
        case EmailCodes.provider:
            // `POST /v1/auth/email/verify`'s body: a code sent to that account's address.
            outcome = try await sessions.signIns.signIn(
                identity: try await verifiedEmail(bytes).1, provider: EmailCodes.provider, userAgent: request.headers[.userAgent], accounts: .existingOnly)
        case "passkey":
            // `POST /v1/auth/passkey`'s body: an assertion of that account's passkey.
            let body = try decodeJSON(PasskeySignInRequest.self, bytes)
            outcome = try await passkeyService().signIn(challengeID: body.challengeId, credential: body.credential, userAgent: request.headers[.userAgent])
        default:
            let provider = try provider(providerName)
            let body = try credentialBody(bytes, provider: provider)
            outcome = try await signInFlow.signIn(
                provider, body.credential, name: nil, userAgent: request.headers[.userAgent], inviteCode: nil, accounts: .existingOnly)
        }
        do {
            try await sessions.guests.merge(guestID: token.userID, into: outcome.user.id)
        } catch {
            // The guest stays as they were, and so does their session; the survivor's new one goes.
            _ = try? await sessions.revokeSession(id: outcome.tokens.sessionID, userID: outcome.user.id)
            throw error
        }
        return Self.signInResponse(outcome)
    }

    // MARK: - Linked identities

    func linkIdentity(_ request: Request, providerName: String) async throws -> Response {
        let (token, _) = try await authenticate(request)
        let provider = try provider(providerName)
        let body = try await credentialBody(request, provider: provider)
        let identities: [LinkedIdentity]
        do {
            identities = try await signInFlow.link(provider, body.credential, userID: token.userID, inviteCode: body.inviteCode)
        } catch let error as LatchkeyError where error.code == .identityInUse {
            // A guest may merge into the account that holds it.
            guard try await store.user(id: token.userID)?.isAnonymous == true else { throw error }
            var refused = ErrorMiddleware.apiError(error)
            refused.mergeable = true
            throw refused
        }
        guard let user = try await store.user(id: token.userID) else { throw LatchkeyError(.invalidToken, "the user of this access token is gone") }
        return JSONBody.response(Self.userResponse(user, identities))
    }

    /// `provider` and `subject` as the path holds them, percent-encoded.
    func unlinkIdentity(_ request: Request, providerName: String, subject: String) async throws -> Response {
        let (token, _) = try await authenticate(request)
        let identities = try await sessions.signIns.unlink(
            userID: token.userID, provider: try Self.decodedPathSegment(providerName, name: "provider"),
            subject: try Self.decodedPathSegment(subject, name: "subject"))
        guard let user = try await store.user(id: token.userID) else { throw LatchkeyError(.invalidToken, "the user of this access token is gone") }
        return JSONBody.response(Self.userResponse(user, identities))
    }

    // MARK: - Tokens

    func refresh(_ request: Request, from origin: RequestOrigin) async throws -> Response {
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        let fields = try tokenRequestFields(request, bytes)
        guard let grantType = fields["grant_type"] else { throw APIError.invalidRequest("grant_type is missing; use grant_type=refresh_token") }
        guard grantType == "refresh_token" else {
            throw APIError(
                status: .badRequest, code: "unsupported_grant_type", description: "grant_type \(grantType.prefix(40)) is not supported; use refresh_token")
        }
        guard let refreshToken = fields["refresh_token"], !refreshToken.isEmpty else { throw APIError.invalidRequest("refresh_token is missing") }
        if let wait = subjectLimiter.check("rt:" + RefreshTokens.hash(refreshToken)) {
            throw APIError(
                status: .tooManyRequests, code: "rate_limited", description: "too many refreshes with this token; retry in \(wait) s",
                headers: [.retryAfter: String(wait)])
        }
        do {
            let tokens = try await sessions.refresh(
                refreshToken, refusing: confidentialClients, origin: origin, proofThumbprint: SessionBinding.current.dpopThumbprint)
            metrics.refresh(outcome: "ok")
            return JSONBody.response(
                TokenPairResponse(accessToken: tokens.accessToken, tokenType: tokens.tokenType, expiresIn: tokens.expiresIn, refreshToken: tokens.refreshToken))
        } catch let error as LatchkeyError {
            metrics.refresh(outcome: error.errorCode)
            throw error
        }
    }

    /// A path segment as the client meant it. The router leaves segments percent-encoded, and HTTP clients encode what
    /// a provider's subject may hold (`auth0|42`, a `/`); a malformed escape or a control character is refused.
    static func decodedPathSegment(_ raw: String, name: String) throws -> String {
        guard let decoded = raw.removingPercentEncoding, !containsControlCharacter(decoded) else {
            throw APIError.invalidRequest("the path's \(name) is not valid percent-encoded text")
        }
        return decoded
    }

    /// `POST /v1/token` takes a form (RFC 6749) or JSON.
    private func tokenRequestFields(_ request: Request, _ bytes: [UInt8]) throws -> [String: String] {
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        if contentType.hasPrefix("application/json") {
            struct Body: Decodable {
                var grant_type: String?
                var refresh_token: String?
                var grantType: String?
                var refreshToken: String?
            }
            let body = try decodeJSON(Body.self, bytes)
            var fields: [String: String] = [:]
            fields["grant_type"] = body.grant_type ?? body.grantType
            fields["refresh_token"] = body.refresh_token ?? body.refreshToken
            return fields
        }
        guard contentType.hasPrefix("application/x-www-form-urlencoded") else {
            throw APIError.invalidRequest("send application/x-www-form-urlencoded or application/json")
        }
        return try Self.formFields(bytes)
    }

    // MARK: - Authenticated

    static let missingBearer = APIError(
        status: .unauthorized, code: "invalid_token", description: "send Authorization: Bearer <access token> (or DPoP <access token> with a DPoP proof)",
        headers: [.wwwAuthenticate: "Bearer, DPoP algs=\"ES256\""])

    /// The request's access token, verified, and presented as it must be (``checkPresentation(_:scheme:token:verified:)``).
    func presentedAccessToken(_ request: Request) async throws -> VerifiedAccessToken {
        guard let (scheme, token) = request.authorization else { throw Self.missingBearer }
        let verified = try await verifyAccessToken(token)
        try await checkPresentation(request, scheme: scheme, token: token, verified: verified)
        return verified
    }

    /// Verifies the access token and that its session is still alive.
    func authenticate(_ request: Request) async throws -> (VerifiedAccessToken, SessionFamily) {
        let verified = try await presentedAccessToken(request)
        guard let session = try await store.session(id: verified.sessionID), session.userID == verified.userID, !session.isRevoked else {
            throw LatchkeyError(.invalidToken, "the session of this access token has ended")
        }
        return (verified, session)
    }

    /// Verifies an access token; a key this instance has not loaded yet (another instance rotated) triggers one reload.
    private func verifyAccessToken(_ token: String) async throws -> VerifiedAccessToken {
        do {
            return try await verifiedTokens.verify(token, using: sessions.accessTokens)
        } catch  where error.code == .unknownKeyID {
            if keyReloads.allow() {
                try await accessKeys.load(try await store.signingKeys(), box: box)
                do {
                    return try await verifiedTokens.verify(token, using: sessions.accessTokens)
                } catch  where error.code == .unknownKeyID {}
            }
            throw LatchkeyError(.invalidToken, error.reason)
        }
    }

    func logout(_ request: Request) async throws -> Response {
        let (token, _) = try await authenticate(request)
        struct Body: Decodable { var all: Bool? }
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        let all = bytes.isEmpty ? false : (try decodeJSON(Body.self, bytes).all ?? false)
        let count = try await sessions.logout(sessionID: token.sessionID, userID: token.userID, all: all)
        return JSONBody.response(RevokedSessionsResponse(revokedSessions: count))
    }

    func me(_ request: Request) async throws -> Response {
        let verified = try await presentedAccessToken(request)
        // One read checks the session is alive and loads the user with their identities.
        guard let (user, identities) = try await store.profile(userID: verified.userID, sessionID: verified.sessionID) else {
            throw LatchkeyError(.invalidToken, "the session of this access token has ended")
        }
        return JSONBody.response(Self.userResponse(user, identities))
    }

    func listSessions(_ request: Request) async throws -> Response {
        let (token, _) = try await authenticate(request)
        let sessions = try await store.sessions(userID: token.userID).filter { !$0.isRevoked }.map {
            SessionResponse(
                id: $0.id, clientId: $0.clientID, createdAt: $0.createdAt, lastUsedAt: $0.lastUsedAt, expiresAt: $0.absoluteExpiresAt, userAgent: $0.userAgent,
                current: $0.id == token.sessionID)
        }
        return JSONBody.response(SessionList(sessions: sessions))
    }

    func deleteSession(_ request: Request, id: String) async throws -> Response {
        let (token, _) = try await authenticate(request)
        guard try await sessions.revokeSession(id: id, userID: token.userID) else {
            throw APIError(status: .notFound, code: "not_found", description: "no session \(id.prefix(64)) for this user")
        }
        return Response(status: .noContent)
    }

    func deleteMe(_ request: Request) async throws -> Response {
        let (token, _) = try await authenticate(request)
        let report = try await sessions.deletion.deleteAccount(userID: token.userID)
        return JSONBody.response(AccountDeletionResponse(tokensRevoked: report.revoked, revocationsPending: report.queued))
    }

    // MARK: - Apple notifications

    func appleNotification(_ request: Request) async throws -> Response {
        guard let appleNotifications else {
            throw APIError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "Sign in with Apple is not configured")
        }
        let notification: AppleNotification
        do {
            notification = try await appleNotifications.verify(body: try await request.bytes(limit: AppleNotificationVerifier.maximumBodySize))
        } catch {
            metrics.notification(provider: "apple", type: "unknown", outcome: (error as? LatchkeyError)?.errorCode ?? "invalid_request")
            throw error
        }
        let kind: ProviderAccountEvent.Kind =
            switch notification.event.type {
            case .consentRevoked: .consentRevoked
            case .accountDeleted: .accountDeleted
            case .emailDisabled: .emailDisabled
            case .emailEnabled: .emailEnabled
            case .other: .other
            }
        let outcome = try await sessions.events.handle(
            ProviderAccountEvent(
                id: notification.id, provider: "apple", kind: kind, subject: notification.event.subject,
                occurredAt: notification.event.eventTime.timeIntervalSince1970 > 0 ? notification.event.eventTime : nil))
        metrics.notification(provider: "apple", type: notification.event.type.description, outcome: "\(outcome)")
        return JSONBody.response(AppleNotificationResponse(status: "\(outcome)"))
    }

    // MARK: - Helpers

    /// Every sign-in's answer: the token pair, the user and whether they are new.
    static func signInResponse(_ outcome: SignInService.SignInOutcome) -> Response {
        let tokens = TokenPairResponse(
            accessToken: outcome.tokens.accessToken, tokenType: outcome.tokens.tokenType, expiresIn: outcome.tokens.expiresIn,
            refreshToken: outcome.tokens.refreshToken)
        return JSONBody.response(SignInResponse(tokens: tokens, user: userResponse(outcome.user, outcome.identities), isNewUser: outcome.isNewUser))
    }

    static func userResponse(_ user: UserAccount, _ identities: [LinkedIdentity]) -> UserResponse {
        UserResponse(
            id: user.id, email: user.email, emailVerified: user.emailVerified, givenName: user.givenName, familyName: user.familyName,
            createdAt: user.createdAt,
            identities: identities.map {
                IdentityResponse(
                    provider: $0.provider, subject: $0.subject, email: $0.email, isPrivateEmail: $0.isPrivateEmail, realUserStatus: $0.realUserStatus,
                    emailForwardingEnabled: $0.emailForwardingEnabled, firstSeenAt: $0.firstSeenAt)
            },
            claims: user.claims, isAnonymous: user.isAnonymous ? true : nil
        )
    }

    /// A request body as `T`. Strict: a member named twice is refused, as in tokens.
    func decodeJSON<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T {
        do {
            return try LeanJSONDecoder().decode(T.self, from: bytes)
        } catch {
            throw Self.notTheJSONThisEndpointTakes
        }
    }

    static let notTheJSONThisEndpointTakes = APIError.invalidRequest("the body is not the JSON this endpoint takes (see /openapi.json)")
}

extension SignInBody {
    static func decoded(from bytes: [UInt8]) throws -> any SignInBody { try LeanJSONDecoder().decode(Self.self, from: bytes) }
}

extension LatchkeyServer {
    /// The client's address (behind trusted proxies, the one they forwarded) and user agent.
    func origin(_ request: Request, _ context: LatchkeyRequestContext) -> RequestOrigin {
        RequestOrigin(ip: configuration.trustedProxies.clientAddress(request, context), userAgent: request.headers[.userAgent])
    }
}
