import Foundation

/// What the plain OAuth 2.0 stand-ins (Discord, X) share beyond the code and refresh machinery: the user behind a
/// Bearer token, and RFC 7009 revocation by a public or confidential client.
extension EmulatorState {
    /// The live access token of `provider` and its user; `refused` when there is none.
    func bearerUser(_ token: String?, _ provider: CodeRecord.Provider, refused: ProviderOAuthError) throws(ProviderOAuthError) -> (
        AccessTokenRecord, UserRecord
    ) {
        guard let token, let found = liveAccessToken(token, provider) else { throw refused }
        return found
    }

    /// Revokes `form["token"]` and its grant. The client authenticates with its secret, or with its id alone (a public
    /// client); an unknown token is answered as revoked (RFC 7009 §2.2).
    func revokeOAuth2(_ provider: CodeRecord.Provider, _ form: [String: String]) throws(ProviderOAuthError) {
        guard let clientID = form["client_id"], let client = configuration.oauthClient(provider, clientID),
            form["client_secret"] == nil || form["client_secret"] == client.clientSecret
        else { throw ProviderOAuthError(status: 401, code: "invalid_client", description: "client authentication failed") }
        guard let token = form["token"], !token.isEmpty else { throw ProviderOAuthError(status: 400, code: "invalid_request", description: "token is missing") }
        _ = revokeProviderToken(token, provider, clientID: clientID)
    }
}
