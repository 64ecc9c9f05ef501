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
            return try AppleSigningCredentials(teamID: apple.teamID, keyID: apple.keyID, privateKeyPEM: apple.privateKeyPEM.revealed)
        } catch {
            throw LatchkeyError(.invalidConfiguration, "setting apple.privateKeyFile: \(error.reason)")
        }
    }
}
