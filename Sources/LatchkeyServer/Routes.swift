import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyModels
import LatchkeyProviders

extension LatchkeyServer {
    /// Every route the server serves; `/openapi.json` documents exactly these (a test holds them together).
    public static let routes: [(method: String, path: String)] = [
        ("POST", "/v1/auth/apple"), ("POST", "/v1/token"), ("POST", "/v1/logout"),
        ("GET", "/v1/me"), ("DELETE", "/v1/me"), ("GET", "/v1/me/sessions"), ("DELETE", "/v1/me/sessions/{id}"),
        ("POST", "/v1/apple/notifications"),
        ("GET", "/.well-known/jwks.json"), ("GET", "/.well-known/openid-configuration"),
        ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
    ]

    func addRoutes(to router: Router<LatchkeyRequestContext>) {
        router.post("/v1/auth/apple") { request, _ in try await signInWithApple(request) }
        router.post("/v1/token") { request, _ in try await refresh(request) }
        router.post("/v1/logout") { request, _ in try await logout(request) }
        router.get("/v1/me") { request, _ in try await me(request) }
        router.delete("/v1/me") { request, _ in try await deleteMe(request) }
        router.get("/v1/me/sessions") { request, _ in try await listSessions(request) }
        router.delete("/v1/me/sessions/:id") { request, context in try await deleteSession(request, id: try context.parameters.require("id")) }
        router.post("/v1/apple/notifications") { request, _ in try await appleNotification(request) }
        router.get("/.well-known/jwks.json") { _, _ in JSONBody.response(accessKeys.jwks, headers: [.cacheControl: "public, max-age=300"]) }
        router.get("/.well-known/openid-configuration") { _, _ in JSONBody.response(discovery, headers: [.cacheControl: "public, max-age=3600"]) }
        router.get("/healthz") { _, _ in JSONBody.response(["status": "ok"]) }
        router.get("/readyz") { _, _ in
            do {
                try await store.ping()
                return JSONBody.response(["status": "ready"])
            } catch {
                return JSONBody.error(APIError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "the database cannot be reached"))
            }
        }
        router.get("/metrics") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: .init(string: metrics.exposition())))
        }
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: "public, max-age=3600"],
                body: .init(byteBuffer: .init(bytes: OpenAPIDocument.json(serverURL: configuration.issuer))))
        }
    }

    /// Issuer metadata (RFC 8414 field names). No `token_endpoint`: `/v1/token` answers in the app-facing
    /// camelCase shape, not RFC 6749 §5.1, so advertising it would mislead OAuth clients.
    struct Discovery: Encodable {
        let issuer, jwks_uri: String
        let access_token_signing_alg_values_supported: [String]
    }

    /// What a backend needs to verify Latchkey's access tokens statelessly.
    var discovery: Discovery {
        let issuer = configuration.issuer
        return Discovery(issuer: issuer, jwks_uri: issuer + "/.well-known/jwks.json", access_token_signing_alg_values_supported: ["ES256"])
    }

    // MARK: - Sign-in

    func signInWithApple(_ request: Request) async throws -> Response {
        guard let apple else {
            throw APIError(
                status: .serviceUnavailable, code: "temporarily_unavailable",
                description: "Sign in with Apple is not configured on this server (set apple.teamId, apple.keyId, apple.privateKeyFile and apple.clientIds)")
        }
        let body = try decodeJSON(AppleSignInRequest.self, try await request.bytes(limit: configuration.maximumBodySize))
        guard !body.identityToken.isEmpty else { throw APIError.invalidRequest("identityToken is empty") }
        let identity: VerifiedIdentity
        do {
            identity = try await apple.verifier.verify(
                body.identityToken, expecting: .signIn(rawNonce: body.rawNonce, authorizationCode: body.authorizationCode))
            if let wait = subjectLimiter.check("sub:" + identity.subject) {
                throw APIError(
                    status: .tooManyRequests, code: "rate_limited", description: "too many sign-ins for this account; retry in \(wait) s",
                    headers: [.retryAfter: String(wait)])
            }
            try await sessions.claimSignIn(body.identityToken, provider: "apple", identity: identity)
        } catch {
            metrics.signIn(provider: "apple", outcome: (error as? LatchkeyError)?.errorCode ?? (error as? APIError)?.code ?? "error")
            throw error
        }
        do {
            return try await completeAppleSignIn(request, body, identity, apple)
        } catch {
            // Nothing was started: the app may retry with the same token.
            await sessions.releaseSignIn(body.identityToken, provider: "apple", identity: identity)
            throw error
        }
    }

    private func completeAppleSignIn(_ request: Request, _ body: AppleSignInRequest, _ identity: VerifiedIdentity, _ apple: AppleComponents) async throws
        -> Response
    {
        var appleRefreshToken: String?
        if let code = body.authorizationCode, !code.isEmpty {
            if let redirectURI = body.redirectUri, !(configuration.apple?.redirectURIs.contains(redirectURI) ?? false) {
                throw APIError.invalidRequest("redirectUri \(redirectURI.prefix(200)) is not one of the configured apple.redirectUris")
            }
            let tokens: AppleTokenResponse
            do {
                tokens = try await apple.client.exchangeCode(code, clientID: identity.audience, redirectURI: body.redirectUri)
                metrics.appleCall("code_exchange", outcome: "ok")
            } catch {
                metrics.appleCall("code_exchange", outcome: error.errorCode)
                metrics.signIn(provider: "apple", outcome: error.errorCode)
                throw error
            }
            // The code must belong to the same Apple ID as the identity token; an unverifiable answer proves nothing.
            if let idToken = tokens.idToken {
                let exchanged = try await apple.verifier.verify(idToken)
                guard exchanged.subject == identity.subject else {
                    metrics.signIn(provider: "apple", outcome: "subject_mismatch")
                    throw LatchkeyError(.invalidGrant, "the authorization code belongs to another Apple ID than the identity token")
                }
            }
            appleRefreshToken = tokens.refreshToken
        }
        let outcome = try await sessions.signIn(
            identity: identity, provider: "apple", givenName: body.fullName?.givenName, familyName: body.fullName?.familyName,
            providerRefreshToken: appleRefreshToken, userAgent: request.headers[.userAgent]
        )
        metrics.signIn(provider: "apple", outcome: outcome.isNewUser ? "new_user" : "ok")
        let tokens = TokenPairResponse(accessToken: outcome.tokens.accessToken, expiresIn: outcome.tokens.expiresIn, refreshToken: outcome.tokens.refreshToken)
        return JSONBody.response(SignInResponse(tokens: tokens, user: Self.userResponse(outcome.user, outcome.identities), isNewUser: outcome.isNewUser))
    }

    // MARK: - Tokens

    func refresh(_ request: Request) async throws -> Response {
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
            let tokens = try await sessions.refresh(refreshToken)
            metrics.refresh(outcome: "ok")
            return JSONBody.response(TokenPairResponse(accessToken: tokens.accessToken, expiresIn: tokens.expiresIn, refreshToken: tokens.refreshToken))
        } catch let error as LatchkeyError {
            metrics.refresh(outcome: error.errorCode)
            throw error
        }
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
        var fields: [String: String] = [:]
        for pair in String(decoding: bytes, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = parts[0].replacingOccurrences(of: "+", with: " ").removingPercentEncoding,
                let value = (parts.count > 1 ? parts[1] : "").replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            else { throw APIError.invalidRequest("the form body is not valid percent-encoding") }
            guard fields[name] == nil else { throw APIError.invalidRequest("parameter \(name.prefix(40)) appears twice") }
            fields[name] = value
        }
        return fields
    }

    // MARK: - Authenticated

    static let missingBearer = APIError(
        status: .unauthorized, code: "invalid_token", description: "send Authorization: Bearer <access token>", headers: [.wwwAuthenticate: "Bearer"])

    /// Verifies the bearer token and that its session is still alive.
    func authenticate(_ request: Request) async throws -> (VerifiedAccessToken, SessionFamily) {
        guard let token = request.bearerToken else { throw Self.missingBearer }
        let verified = try await verifyAccessToken(token)
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
        return JSONBody.response(["revokedSessions": count])
    }

    func me(_ request: Request) async throws -> Response {
        guard let token = request.bearerToken else { throw Self.missingBearer }
        let verified = try await verifyAccessToken(token)
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
        return JSONBody.response(["sessions": sessions])
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
        let report = try await sessions.deleteAccount(userID: token.userID)
        return JSONBody.response(["deleted": 1, "appleTokensRevoked": report.revoked, "appleRevocationsPending": report.queued])
    }

    // MARK: - Apple notifications

    func appleNotification(_ request: Request) async throws -> Response {
        guard let apple else {
            throw APIError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "Sign in with Apple is not configured")
        }
        let notification: AppleNotification
        do {
            notification = try await apple.notifications.verify(body: try await request.bytes(limit: AppleNotificationVerifier.maximumBodySize))
        } catch {
            metrics.notification(type: "unknown", outcome: (error as? LatchkeyError)?.errorCode ?? "invalid_request")
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
        let outcome = try await sessions.handle(ProviderAccountEvent(id: notification.id, provider: "apple", kind: kind, subject: notification.event.subject))
        metrics.notification(type: notification.event.type.description, outcome: "\(outcome)")
        return JSONBody.response(["status": "\(outcome)"])
    }

    // MARK: - Helpers

    static func userResponse(_ user: UserAccount, _ identities: [LinkedIdentity]) -> UserResponse {
        UserResponse(
            id: user.id, email: user.email, emailVerified: user.emailVerified, givenName: user.givenName, familyName: user.familyName,
            createdAt: user.createdAt,
            identities: identities.map {
                IdentityResponse(
                    provider: $0.provider, subject: $0.subject, email: $0.email, isPrivateEmail: $0.isPrivateEmail, realUserStatus: $0.realUserStatus,
                    emailForwardingEnabled: $0.emailForwardingEnabled, firstSeenAt: $0.firstSeenAt)
            }
        )
    }

    func decodeJSON<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(bytes))
        } catch {
            throw APIError.invalidRequest("the body is not the JSON this endpoint takes (see /openapi.json)")
        }
    }
}
