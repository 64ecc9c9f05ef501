import Foundation

/// GitHub's rules, free of HTTP: a code exchange without `grant_type` whose refusals answer 200 with an `error`,
/// tokens that do not expire, `/user` and `/user/emails`, and the application endpoints that check a token and
/// revoke a grant with the app's Basic credentials.
extension EmulatorState {
    /// `POST /login/oauth/access_token`: the access token, or GitHub's error (still a 200).
    func githubToken(_ form: [String: String]) -> [String: Claim] {
        guard let clientID = form["client_id"], let client = configuration.oauthClient(.github, clientID), client.clientSecret == form["client_secret"]
        else {
            return Self.githubError("incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.")
        }
        do throws(ProviderOAuthError) {
            let (record, user) = try redeemCode(.github, form, client: client)
            let scopes = record.scopes.sorted()
            let token = issueProviderAccessToken(.github, user: user, clientID: clientID, refreshToken: nil, scopes: scopes)
            return ["access_token": .string(token), "token_type": .string("bearer"), "scope": .string(scopes.joined(separator: ","))]
        } catch {
            if error.description.contains("redirect_uri") {
                return Self.githubError("redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.")
            }
            return Self.githubError("bad_verification_code", "The code passed is incorrect or expired.")
        }
    }

    private static func githubError(_ code: String, _ description: String) -> [String: Claim] {
        ["error": .string(code), "error_description": .string(description), "error_uri": .string("https://docs.github.com/apps/troubleshooting-oauth-errors")]
    }

    /// `GET /user`: the token's user.
    func githubUser(_ token: String?) throws(ProviderOAuthError) -> [String: Claim] {
        let (_, user) = try githubToken(token)
        let subjects = Identifiers.ProviderSubjects(userID: user.id)
        let name = [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
        return [
            "id": .int(Int(subjects.github) ?? 0), "login": .string(subjects.githubLogin), "node_id": .string("U_kg" + subjects.githubLogin),
            "type": .string("User"), "name": name.isEmpty ? .null : .string(name), "email": .null,
            "avatar_url": .string("https://avatars.githubusercontent.com/u/\(subjects.github)?v=4"), "site_admin": .bool(false),
        ]
    }

    /// `GET /user/emails`: the user's address, primary and verified; 404 without the `user:email` scope.
    func githubEmails(_ token: String?) throws(ProviderOAuthError) -> [Claim] {
        let (record, user) = try githubToken(token)
        guard record.scopes.contains("user:email") || record.scopes.contains("user") else { throw Self.githubNotFound }
        return [.object(["email": .string(user.email), "primary": .bool(true), "verified": .bool(true), "visibility": .string("private")])]
    }

    /// `POST /applications/{client_id}/token` (200 and the token's description) and `DELETE …/grant` (every token of
    /// the user for this app dies): the app's Basic credentials and `{"access_token"}`; 404 for an unknown token.
    func githubApplication(clientID: String, credentials: (String, String)?, accessToken: String?, revokeGrant: Bool) throws(ProviderOAuthError)
        -> [String: Claim]
    {
        guard let credentials, credentials.0 == clientID, configuration.oauthClient(.github, clientID)?.clientSecret == credentials.1 else {
            throw Self.githubNotFound
        }
        guard let accessToken, let (record, user) = liveAccessToken(accessToken, .github), record.clientID == clientID else { throw Self.githubNotFound }
        guard revokeGrant else {
            return ["token": .string(accessToken), "scopes": .array(record.scopes.map(Claim.string)), "user": .object(try githubUser(accessToken))]
        }
        for token in accessTokensByAuthorization[Self.consentKey(user.id, CodeRecord.Provider.github.name)] ?? []
        where accessTokens.record(token, now: now)?.clientID == clientID {
            accessTokens.update(token, now: now) { $0.revoked = true }
        }
        return [:]
    }

    private func githubToken(_ token: String?) throws(ProviderOAuthError) -> (AccessTokenRecord, UserRecord) {
        guard let token, let found = liveAccessToken(token, .github) else {
            throw ProviderOAuthError(
                status: 401, code: "bad_credentials", description: "Bad credentials",
                body: ["message": .string("Bad credentials"), "documentation_url": .string("https://docs.github.com/rest"), "status": .string("401")])
        }
        return found
    }

    private static var githubNotFound: ProviderOAuthError {
        ProviderOAuthError(
            status: 404, code: "not_found", description: "Not Found",
            body: ["message": .string("Not Found"), "documentation_url": .string("https://docs.github.com/rest"), "status": .string("404")])
    }
}
