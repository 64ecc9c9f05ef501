import Crypto
import Foundation

/// The rules of the Google, Microsoft, Facebook, Dropbox and generic OpenID Connect stand-ins, free of HTTP.
/// One code, PKCE, refresh and revocation machinery serves them all; only token shapes and wording differ.
extension EmulatorState {
    /// How one provider's tokens and error messages look.
    struct TokenStyle {
        let accessPrefix: String
        let refreshPrefix: String
        let codePrefix: String
        let accessLifetime: Int
        let tokenType: String
        let badCode: String
        let badRefresh: String
        /// Codes of Google live ten minutes; everyone else's `authorizationCodeLifetime`.
        let codeLifetime: TimeInterval?

        /// The OpenID Connect stand-ins' (and Apple's) shapes and wording.
        static func openID(accessTokenLifetime: TimeInterval) -> TokenStyle {
            TokenStyle(
                accessPrefix: "at.", refreshPrefix: "rt.", codePrefix: "ac.", accessLifetime: Int(accessTokenLifetime), tokenType: "Bearer",
                badCode: "the authorization code is unknown, expired or already used", badRefresh: "the refresh token is unknown or revoked",
                codeLifetime: nil)
        }
    }

    func style(_ provider: CodeRecord.Provider) -> TokenStyle { provider.profile.tokenStyle(configuration.accessTokenLifetime) }

    /// An authorization request: from a consent page or minted by the control API.
    struct ProviderAuthorization: Sendable {
        var provider: CodeRecord.Provider
        var userID: UUID
        var clientID: String
        var redirectURI: String?
        var nonce: String?
        var scopes: [String]
        var codeChallenge: String?
        var codeChallengeMethod: String?
        /// The generic OpenID Connect issuer as the caller addressed the emulator (`{base}/oidc`).
        var oidcIssuer = ""
    }

    /// What a provider's app SDK hands the app after a sign-in.
    struct ProviderSignIn: Sendable {
        var subject: String
        var idToken: String?
        var authorizationCode: String?
        var accessToken: String?
    }

    private static func invalidClient(_ provider: CodeRecord.Provider, _ clientID: String?) -> ProviderOAuthError {
        ProviderOAuthError(
            status: provider.profile.invalidClientStatus, code: "invalid_client", description: "The OAuth client \(clientID ?? "(none)") was not found.")
    }

    /// Issues an authorization code bound to the client, redirect URI, nonce and PKCE challenge.
    func issueCode(_ request: ProviderAuthorization) throws(ProviderOAuthError) -> String {
        guard configuration.oauthClient(request.provider, request.clientID) != nil else { throw Self.invalidClient(request.provider, request.clientID) }
        guard users[request.userID] != nil else { throw ProviderOAuthError(status: 400, code: "invalid_request", description: "no such user") }
        let code = request.provider.profile.makeCode(style(request.provider))
        addCode(
            CodeRecord(
                code: code, provider: request.provider, userID: request.userID, clientID: request.clientID, redirectURI: request.redirectURI,
                nonce: request.nonce, scopes: Set(request.scopes), createdAt: now, native: false, codeChallenge: request.codeChallenge,
                codeChallengeMethod: request.codeChallenge == nil ? nil : (request.codeChallengeMethod ?? "plain")
            ))
        return code
    }

    /// A sign-in as the provider's app SDK completes it: Google, Microsoft and OpenID Connect give an ID token and
    /// a code, Facebook a Limited Login token and a user access token, Dropbox a code and an access token.
    func providerSignIn(_ request: ProviderAuthorization) async throws(ProviderOAuthError) -> ProviderSignIn {
        guard configuration.oauthClient(request.provider, request.clientID) != nil else { throw Self.invalidClient(request.provider, request.clientID) }
        guard let user = users[request.userID] else { throw ProviderOAuthError(status: 400, code: "invalid_request", description: "no such user") }
        var signIn = ProviderSignIn(subject: subject(of: user, provider: request.provider))
        switch request.provider.profile.appSignIn {
        case .apple:
            throw ProviderOAuthError(status: 400, code: "invalid_request", description: "Apple sign-ins are minted by signIn")
        case .idTokenAndCode:
            signIn.authorizationCode = try issueCode(request)
            signIn.idToken = try await idToken(
                request.provider, user: user, clientID: request.clientID, nonce: request.nonce, accessToken: nil, issuer: request.oidcIssuer)
        case .accessTokenAndIDToken:
            signIn.accessToken = issueProviderAccessToken(request.provider, user: user, clientID: request.clientID, refreshToken: nil, scopes: request.scopes)
            signIn.idToken = try await idToken(request.provider, user: user, clientID: request.clientID, nonce: request.nonce, accessToken: nil, issuer: "")
        case .code:
            signIn.authorizationCode = try issueCode(request)
        case .codeAndAccessToken:
            signIn.authorizationCode = try issueCode(request)
            signIn.accessToken = issueProviderAccessToken(request.provider, user: user, clientID: request.clientID, refreshToken: nil, scopes: request.scopes)
        }
        return signIn
    }

    /// The user's subject at `provider` (for Apple, under the default team): the one given at creation, else derived.
    func subject(of user: UserRecord, provider: CodeRecord.Provider) -> String {
        guard provider != .apple else { return defaultTeamID.map { subject(of: user, teamID: $0) } ?? "" }
        return user.givenSubjects[provider.name] ?? provider.profile.subject(Identifiers.ProviderSubjects(userID: user.id))
    }

    func issueProviderAccessToken(_ provider: CodeRecord.Provider, user: UserRecord, clientID: String, refreshToken: String?, scopes: [String])
        -> String
    {
        let style = style(provider)
        return issueAccessToken(
            clientID: clientID, teamID: provider.name, userID: user.id, refreshToken: refreshToken,
            token: Identifiers.providerToken(style.accessPrefix, provider.profile.accessTokenLength), lifetime: TimeInterval(style.accessLifetime),
            scopes: scopes)
    }

    // MARK: - ID tokens

    /// An RS256 ID token of `provider`. `issuer` is the generic OpenID Connect issuer as addressed.
    func idToken(
        _ provider: CodeRecord.Provider, user: UserRecord, clientID: String, nonce: String?, accessToken: String?, issuer: String, webLogin: Bool = false
    ) async throws(ProviderOAuthError) -> String {
        let issuedAt = Int(now.timeIntervalSince1970)
        let profile = provider.profile
        let lifetime = profile.idTokenLifetime ?? Int(configuration.identityTokenLifetime)
        var claims = ClaimSet([
            ("iss", .string(profile.idTokenIssuer(configuration, user, issuer))), ("aud", .string(clientID)),
            ("sub", .string(subject(of: user, provider: provider))), ("iat", .int(issuedAt)), ("exp", .int(issuedAt + lifetime)),
        ])
        if let nonce { claims["nonce"] = .string(nonce) }
        claims["email"] = .string(user.email)
        if profile.idTokenHasEmailVerified { claims["email_verified"] = .bool(true) }
        let name = [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
        if !name.isEmpty { claims["name"] = .string(name) }
        if let given = user.givenName { claims["given_name"] = .string(given) }
        if let family = user.familyName { claims["family_name"] = .string(family) }
        if let accessToken { claims["at_hash"] = .string(Self.halfHash(accessToken)) }
        profile.idTokenExtras(&claims, user, clientID, issuedAt)
        if let sign = profile.signIDToken { return try await sign(self, claims, clientID, webLogin) }
        do { return try await keys(provider).sign(claims) } catch {
            throw ProviderOAuthError(status: 500, code: "server_error", description: "signing failed")
        }
    }

    // MARK: - Token endpoints

    /// Answers the token endpoint of `provider`: `authorization_code` (single use, bound to the client, the
    /// redirect URI and the PKCE challenge) and `refresh_token`. `tenant` is the Microsoft tenant of the path;
    /// `issuer` the OpenID Connect issuer as addressed.
    func providerToken(_ provider: CodeRecord.Provider, _ form: [String: String], tenant: String? = nil, issuer: String = "") async throws(ProviderOAuthError)
        -> [String: Claim]
    {
        guard let clientID = form["client_id"], let client = configuration.oauthClient(provider, clientID) else {
            throw Self.invalidClient(provider, form["client_id"])
        }
        if let secret = form["client_secret"] {
            guard client.clientSecret == secret else { throw ProviderOAuthError(status: 401, code: "invalid_client", description: "Unauthorized") }
        }
        let style = style(provider)
        switch form["grant_type"] {
        case "authorization_code":
            let (record, user) = try redeemCode(provider, form, client: client)
            try checkTenant(tenant, user)
            let refreshToken = Identifiers.providerToken(style.refreshPrefix, 64)
            let scopes = record.scopes.sorted()
            addGrant(
                GrantRecord(
                    refreshToken: refreshToken, provider: provider, userID: user.id, clientID: clientID, teamID: provider.name, createdAt: now,
                    scopes: scopes))
            return try await tokenAnswer(
                provider, user: user, clientID: clientID, scopes: scopes, nonce: record.nonce, grant: refreshToken, newRefreshToken: true, issuer: issuer)
        case "refresh_token":
            guard let token = form["refresh_token"], let grant = grants[token], grant.provider == provider, !grant.revoked, grant.clientID == clientID,
                let user = users[grant.userID]
            else { throw ProviderOAuthError(status: 400, code: "invalid_grant", description: style.badRefresh) }
            try checkTenant(tenant, user)
            // Microsoft hands out a new refresh token on every refresh (the old one stays usable); a rotating provider
            // too, and the old one stops working; the others keep theirs.
            let refresh = provider.profile.refresh(configuration)
            var grantToken = token
            if refresh != .keeps {
                grantToken = Identifiers.providerToken(style.refreshPrefix, 64)
                addGrant(
                    GrantRecord(
                        refreshToken: grantToken, provider: provider, userID: user.id, clientID: clientID, teamID: provider.name, createdAt: now,
                        scopes: grant.scopes))
                if refresh == .rotates { grants[token]?.revoked = true }
            }
            return try await tokenAnswer(
                provider, user: user, clientID: clientID, scopes: grant.scopes, nonce: nil, grant: grantToken, newRefreshToken: grantToken != token,
                issuer: issuer)
        default:
            throw ProviderOAuthError(status: 400, code: "unsupported_grant_type", description: "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
    }

    /// Checks and consumes an authorization code; a replay, an expired code, another client's code, a different
    /// redirect URI or a PKCE mismatch (wrong, missing or unexpected verifier) is refused.
    func redeemCode(_ provider: CodeRecord.Provider, _ form: [String: String], client: EmulatorConfiguration.OAuthClient) throws(ProviderOAuthError)
        -> (CodeRecord, UserRecord)
    {
        let style = style(provider)
        let lifetime = codeLifetime(provider)
        guard let code = form["code"], let record = codes.record(code, now: now), record.provider == provider, !record.used, record.clientID == client.clientID,
            now < record.createdAt.addingTimeInterval(lifetime)
        else { throw ProviderOAuthError(status: 400, code: "invalid_grant", description: style.badCode) }
        guard record.redirectURI == form["redirect_uri"] else {
            throw ProviderOAuthError(
                status: 400, code: provider.profile.redirectMismatchError,
                description: "redirect_uri does not match the authorization request")
        }
        if let challenge = record.codeChallenge {
            guard let verifier = form["code_verifier"] else {
                throw ProviderOAuthError(status: 400, code: "invalid_grant", description: "Missing code verifier.")
            }
            let computed = record.codeChallengeMethod == "S256" ? base64URL(Array(SHA256.hash(data: Array(verifier.utf8)))) : verifier
            guard computed == challenge else { throw ProviderOAuthError(status: 400, code: "invalid_grant", description: "Invalid code verifier.") }
        } else {
            if form["code_verifier"] != nil {
                throw ProviderOAuthError(status: 400, code: "invalid_grant", description: "code_verifier sent for a code issued without a challenge.")
            }
            if client.clientSecret != nil && form["client_secret"] == nil {
                throw ProviderOAuthError(status: 400, code: "invalid_request", description: "client_secret is missing.")
            }
        }
        codes.update(code, now: now) { $0.used = true }
        guard let user = users[record.userID] else { throw ProviderOAuthError(status: 400, code: "invalid_grant", description: "Account deleted.") }
        return (record, user)
    }

    /// A Microsoft token request addressed to a tenant must fit the user's: `common`, the user's tenant, `consumers`
    /// for personal accounts or `organizations` for work accounts.
    private func checkTenant(_ tenant: String?, _ user: UserRecord) throws(ProviderOAuthError) {
        guard let tenant = tenant?.lowercased() else { return }
        let personal = user.microsoftTenant == Identifiers.microsoftConsumersTenant
        guard tenant == "common" || tenant == user.microsoftTenant || (tenant == "consumers" && personal) || (tenant == "organizations" && !personal)
        else {
            throw ProviderOAuthError(
                status: 400, code: "invalid_grant", description: "AADSTS50020: User account does not exist in tenant '\(tenant)'.")
        }
    }

    private func tokenAnswer(
        _ provider: CodeRecord.Provider, user: UserRecord, clientID: String, scopes: [String], nonce: String?, grant: String, newRefreshToken: Bool,
        issuer: String
    ) async throws(ProviderOAuthError) -> [String: Claim] {
        let style = style(provider)
        let accessToken = issueProviderAccessToken(provider, user: user, clientID: clientID, refreshToken: grant, scopes: scopes)
        var answer: [String: Claim] = [
            "access_token": .string(accessToken), "token_type": .string(style.tokenType), "expires_in": .int(style.accessLifetime),
            "scope": .string(scopes.joined(separator: " ")),
        ]
        if newRefreshToken { answer["refresh_token"] = .string(grant) }
        provider.profile.tokenAnswerExtras(&answer, user, style)
        if provider.profile.tokenAnswerHasIDToken {
            answer["id_token"] = .string(
                try await idToken(provider, user: user, clientID: clientID, nonce: nonce, accessToken: accessToken, issuer: issuer, webLogin: true))
        }
        return answer
    }

    // MARK: - Access tokens and revocation

    /// A live access token of `provider` and its user; nil when unknown, revoked, expired or the user is gone.
    func liveAccessToken(_ token: String, _ provider: CodeRecord.Provider) -> (AccessTokenRecord, UserRecord)? {
        let now = self.now
        guard let record = accessTokens.record(token, now: now), record.teamID == provider.name, !record.revoked, now < record.expiresAt,
            let userID = record.userID, let user = users[userID]
        else { return nil }
        return (record, user)
    }

    /// Revokes a refresh or access token of `provider` with the grant behind it (its refresh token and every access
    /// token issued from it). False when the token is unknown, or belongs to another client than `clientID`.
    func revokeProviderToken(_ token: String, _ provider: CodeRecord.Provider, clientID: String? = nil) -> Bool {
        let now = self.now
        let access = accessTokens.record(token, now: now).flatMap { $0.teamID == provider.name ? $0 : nil }
        let grant = grants[token].flatMap { $0.provider == provider ? $0 : nil } ?? access?.refreshToken.flatMap { grants[$0] }
        guard let owner = grant?.clientID ?? access?.clientID, clientID == nil || clientID == owner else { return false }
        // A token revoked already is one the provider no longer knows (Google: 400 invalid_token).
        if grant?.revoked ?? access?.revoked ?? false { return false }
        if access != nil { accessTokens.update(token, now: now) { $0.revoked = true } }
        guard let grant else { return true }
        grants[grant.refreshToken]?.revoked = true
        for issued in accessTokensByAuthorization[Self.consentKey(grant.userID, provider.name)] ?? []
        where accessTokens.record(issued, now: now)?.refreshToken == grant.refreshToken {
            accessTokens.update(issued, now: now) { $0.revoked = true }
        }
        return true
    }

    /// Revokes every access token the user gave `token`'s app (Facebook's `DELETE /me/permissions`).
    func revokeAppAuthorization(_ token: String, _ provider: CodeRecord.Provider) -> Bool {
        guard let (record, user) = liveAccessToken(token, provider) else { return false }
        let now = self.now
        for issued in accessTokensByAuthorization[Self.consentKey(user.id, provider.name)] ?? []
        where accessTokens.record(issued, now: now)?.clientID == record.clientID {
            accessTokens.update(issued, now: now) { $0.revoked = true }
        }
        return true
    }

    // MARK: - Facebook

    /// Facebook's `debug_token` as seen by the app `appToken` (`{app-id}|{app-secret}`).
    func facebookDebugToken(_ inputToken: String?, appToken: String?) throws(ProviderOAuthError) -> [String: Claim] {
        let parts = (appToken ?? "").split(separator: "|", maxSplits: 1).map(String.init)
        guard parts.count == 2, let app = configuration.facebookApp(parts[0]), app.appSecret == parts[1] else {
            throw Self.facebookError(400, code: 190, "Invalid OAuth access token signature.")
        }
        guard let inputToken, !inputToken.isEmpty else { throw Self.facebookError(400, code: 100, "(#100) The parameter input_token is required") }
        guard let record = accessTokens.record(inputToken, now: now), record.teamID == "facebook", let userID = record.userID else {
            return [
                "data": .object([
                    "error": .object(["code": .int(190), "message": .string("Invalid OAuth access token - Cannot parse access token")]),
                    "is_valid": .bool(false), "scopes": .array([]),
                ])
            ]
        }
        let tokenApp = configuration.facebookApp(record.clientID)
        let expiresAt = Int(record.expiresAt.timeIntervalSince1970)
        var data: [String: Claim] = [
            "app_id": .string(record.clientID), "type": .string("USER"), "application": .string(tokenApp?.name ?? app.name),
            "expires_at": .int(expiresAt), "data_access_expires_at": .int(expiresAt + 30 * 86_400), "is_valid": .bool(true),
            "scopes": .array(record.scopes.map(Claim.string)), "user_id": .string(Identifiers.ProviderSubjects(userID: userID).facebook),
        ]
        let problem: (Int?, String)? =
            if record.clientID != app.appID {
                (nil, "Error validating access token: the token does not belong to application \(app.appID).")
            } else if record.revoked || users[userID] == nil {
                (458, "Error validating access token: The user has not authorized application \(app.appID).")
            } else if now >= record.expiresAt {
                (463, "Error validating access token: Session has expired.")
            } else {
                nil
            }
        if let (subcode, message) = problem {
            data["is_valid"] = .bool(false)
            var error: [String: Claim] = ["code": .int(190), "message": .string(message)]
            if let subcode { error["subcode"] = .int(subcode) }
            data["error"] = .object(error)
        }
        return ["data": .object(data)]
    }

    /// The Graph API's `/me` with the requested `fields` (`id,name` by default).
    func facebookMe(_ token: String?, fields: String?) throws(ProviderOAuthError) -> [String: Claim] {
        guard let token, let (_, user) = liveAccessToken(token, .facebook) else { throw Self.facebookError(400, code: 190, "Invalid OAuth access token data.") }
        let name = [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
        let available: [String: Claim] = [
            "id": .string(Identifiers.ProviderSubjects(userID: user.id).facebook), "name": .string(name.isEmpty ? user.email : name),
            "email": .string(user.email), "first_name": .string(user.givenName ?? ""), "last_name": .string(user.familyName ?? ""),
        ]
        var answer: [String: Claim] = [:]
        for field in (fields ?? "id,name").split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            guard let value = available[field] else { throw Self.facebookError(400, code: 100, "(#100) Tried accessing nonexisting field (\(field))") }
            answer[field] = value
        }
        return answer
    }

    static func facebookError(_ status: Int, code: Int, _ message: String) -> ProviderOAuthError {
        ProviderOAuthError(
            status: status, code: "OAuthException", description: message,
            body: ["error": .object(["message": .string(message), "type": .string("OAuthException"), "code": .int(code)])])
    }

    // MARK: - Dropbox

    /// Dropbox's `users/get_current_account`: the FullAccount of the Bearer token's user.
    func dropboxAccount(_ token: String?) throws(ProviderOAuthError) -> [String: Claim] {
        guard let token, let (_, user) = liveAccessToken(token, .dropbox) else { throw Self.dropboxInvalidToken }
        let subjects = Identifiers.ProviderSubjects(userID: user.id)
        let given = user.givenName ?? user.email.split(separator: "@").first.map(String.init) ?? ""
        let surname = user.familyName ?? ""
        let display = [given, surname].filter { !$0.isEmpty }.joined(separator: " ")
        let initials = [given, surname].compactMap { $0.first.map(String.init) }.joined()
        return [
            "account_id": .string(subjects.dropbox),
            "name": .object([
                "given_name": .string(given), "surname": .string(surname), "familiar_name": .string(given), "display_name": .string(display),
                "abbreviated_name": .string(initials),
            ]),
            "email": .string(user.email), "email_verified": .bool(true), "disabled": .bool(false), "locale": .string("en"),
            "referral_link": .string("https://www.dropbox.com/referrals/\(subjects.dropboxUID)"), "is_paired": .bool(false),
            "account_type": .object([".tag": .string("basic")]),
            "root_info": .object([
                ".tag": .string("user"), "root_namespace_id": .string(subjects.dropboxUID), "home_namespace_id": .string(subjects.dropboxUID),
            ]),
            "country": .string("US"),
        ]
    }

    /// Dropbox's `auth/token/revoke`: the Bearer token and its refresh token die.
    func dropboxRevoke(_ token: String?) throws(ProviderOAuthError) {
        guard let token, liveAccessToken(token, .dropbox) != nil, revokeProviderToken(token, .dropbox) else { throw Self.dropboxInvalidToken }
    }

    /// Dropbox's 401 for a bad Bearer token.
    private static var dropboxInvalidToken: ProviderOAuthError {
        let tag = "invalid_access_token"
        return ProviderOAuthError(
            status: 401, code: tag, description: "the access token is unknown, revoked or expired",
            body: ["error_summary": .string("\(tag)/.."), "error": .object([".tag": .string(tag)])])
    }
}

extension EmulatorState {
    /// The client a refresh or access token was issued to, for the request log.
    func clientID(ofToken token: String) -> String? { accessTokens.record(token, now: now)?.clientID ?? grants[token]?.clientID }
}
