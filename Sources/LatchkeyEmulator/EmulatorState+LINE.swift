import Crypto
import Foundation
import JWTKit

/// LINE's two kinds of ID token: the app SDK's, ES256 with a published key, and the web login's (from the token
/// endpoint), HS256 with the channel secret and no `kid`.
extension EmulatorState {
    /// LINE's ES256 signing key, one for the emulator's life.
    private static let lineKey = P256.Signing.PrivateKey()
    private static let lineKeyID = Identifiers.googleKeyID()

    /// LINE's JWKS document: its one ES256 key.
    func lineJWKS() -> [String: [[String: String]]] {
        let point = Array(Self.lineKey.publicKey.x963Representation)
        return [
            "keys": [
                [
                    "kty": "EC", "crv": "P-256", "kid": Self.lineKeyID, "use": "sig", "alg": "ES256", "x": base64URL(point[1..<33]),
                    "y": base64URL(point[33..<65]),
                ]
            ]
        ]
    }

    /// Signs `claims` as LINE does: HS256 with the channel's secret for a web login, ES256 otherwise.
    func lineIDToken(_ claims: ClaimSet, clientID: String, webLogin: Bool) async throws(ProviderOAuthError) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        let serializer = DefaultJWTSerializer(jsonEncoder: encoder)
        let collection = JWTKeyCollection()
        do {
            if webLogin {
                guard let secret = configuration.oauthClient(.line, clientID)?.clientSecret else {
                    throw ProviderOAuthError(status: 400, code: "invalid_client", description: "the channel has no secret")
                }
                await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, serializer: serializer)
                return try await collection.sign(claims)
            }
            let kid = JWKIdentifier(string: Self.lineKeyID)
            await collection.add(ecdsa: try ES256PrivateKey(backing: Self.lineKey), kid: kid, serializer: serializer)
            return try await collection.sign(claims, kid: kid)
        } catch let error as ProviderOAuthError {
            throw error
        } catch {
            throw ProviderOAuthError(status: 500, code: "server_error", description: "signing failed")
        }
    }
}
