import LatchkeyCore
import LatchkeyProviders

enum AppleSigningCredentialsCheck {
    static func check(_ apple: ServerConfiguration.Apple) throws(LatchkeyError) -> AppleSigningCredentials {
        func named(_ field: String, _ check: () throws(LatchkeyError) -> Void) throws(LatchkeyError) {
            do { try check() } catch { throw LatchkeyError(.invalidConfiguration, "setting \(field): \(error.reason)") }
        }
        try named("apple.teamId") { () throws(LatchkeyError) in try AppleSigningCredentials.checkTeamID(apple.teamID) }
        try named("apple.keyId") { () throws(LatchkeyError) in try AppleSigningCredentials.checkKeyID(apple.keyID) }
        do {
            return try AppleSigningCredentials(teamID: apple.teamID, keyID: apple.keyID, privateKeyPEM: apple.privateKeyPEM)
        } catch {
            throw LatchkeyError(.invalidConfiguration, "setting apple.privateKeyFile: \(error.reason)")
        }
    }
}

/// Adapts the Apple REST client to the session service's view of a provider.
struct AppleAuthorizationLink: ProviderAuthorizationLink {
    let client: AppleClient
    let metrics: ServerMetrics

    func validate(refreshToken: String, clientID: String) async -> ProviderValidation {
        do {
            _ = try await client.validateRefreshToken(refreshToken, clientID: clientID)
            metrics.appleCall("refresh_validation", outcome: "ok")
            return .valid
        } catch {
            metrics.appleCall("refresh_validation", outcome: error.errorCode)
            // Only Apple's verdict on the token revokes users; our own misconfiguration never does.
            return error.code == .invalidGrant ? .revoked : .unreachable(error.errorCode)
        }
    }

    func revoke(refreshToken: String, clientID: String) async throws(LatchkeyError) {
        do {
            try await client.revoke(refreshToken, clientID: clientID)
            metrics.appleCall("revoke", outcome: "ok")
        } catch {
            metrics.appleCall("revoke", outcome: error.errorCode)
            throw error
        }
    }
}
