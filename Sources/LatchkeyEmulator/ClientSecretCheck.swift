import Crypto
import Foundation

/// Checks an Apple client secret the way Apple's token endpoint does. Every failure is `invalid_client`.
struct ClientSecretCheck {
    static let audience = "https://appleid.apple.com"
    static let maximumLifetime: TimeInterval = 15_777_000

    struct Header: Decodable {
        let alg: String?
        let kid: String?
    }

    struct Claims: Decodable {
        let iss: String?
        let sub: String?
        let aud: String?
        let iat: Double?
        let exp: Double?
    }

    /// Returns nil when the secret is good for `clientID`, else why it is not.
    static func problem(secret: String, clientID: String, configuration: EmulatorConfiguration, now: Date) -> String? {
        guard let app = configuration.app(clientID) else { return "client_id \(clientID) is not registered" }
        guard let team = configuration.team(app.teamID) else { return "team \(app.teamID) is not registered" }
        let parts = secret.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = base64URLDecode(parts[0]), let claimBytes = base64URLDecode(parts[1]),
            let signature = base64URLDecode(parts[2])
        else { return "client_secret is not a compact JWS" }
        guard let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)) else { return "header is not JSON" }
        guard header.alg == "ES256" else { return "alg is \(header.alg ?? "missing"), not ES256" }
        guard let kid = header.kid, let pem = team.keys[kid] else { return "kid \(header.kid ?? "missing") is not a key of team \(team.teamID)" }
        guard signature.count == 64 else { return "signature is \(signature.count) bytes; DER signatures are refused, JOSE needs raw r||s" }
        guard let publicKey = try? P256.Signing.PublicKey(pemRepresentation: pem),
            let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            publicKey.isValidSignature(ecdsa, for: Array("\(parts[0]).\(parts[1])".utf8))
        else { return "signature does not verify with key \(kid)" }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: Data(claimBytes)) else { return "claims are not JSON" }
        guard claims.iss == team.teamID else { return "iss is \(claims.iss ?? "missing"), not team \(team.teamID)" }
        guard claims.aud == audience else { return "aud is \(claims.aud ?? "missing"), not \(audience)" }
        guard claims.sub == clientID else { return "sub is \(claims.sub ?? "missing"), not the client_id \(clientID)" }
        guard claims.iat != nil else { return "iat is missing" }
        guard let exp = claims.exp else { return "exp is missing" }
        let now = now.timeIntervalSince1970
        guard exp > now else { return "the client secret expired" }
        guard exp - now <= maximumLifetime else { return "exp is more than 15777000 s ahead" }
        return nil
    }
}
