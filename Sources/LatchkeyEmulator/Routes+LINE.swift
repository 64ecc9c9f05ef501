import Crypto
import Foundation
import Hummingbird
import JWTKit

extension CodeRecord.Provider {
    static let line = Self("line")
}

extension ProviderProfile {
    /// LINE Login at `/line`, its own issuer: channels whose 32-character secret signs the web login's HS256 ID tokens;
    /// the app SDK's are ES256 (``EmulatorState/lineIDToken(_:clientID:webLogin:)``).
    static let line: ProviderProfile = {
        var profile = ProviderProfile(provider: .line, displayName: "LINE") { $0.addLINERoutes(to: $1) }
        // A LINE user id: `U` and 32 lower-case hex digits.
        profile.subject = { "U" + Identifiers.hexDigest("line", $0.userID.uuidString).prefix(32) }
        profile.register = { configuration, provider, clientID, uris in
            configuration.setClient(.init(clientID: clientID, clientSecret: clientID + "-channel-secret-0123456789abcdef", redirectURIs: uris), for: provider)
        }
        profile.ownIssuerPath = true
        profile.signIDToken = { state, claims, clientID, webLogin throws(ProviderOAuthError) in
            try await state.lineIDToken(claims, clientID: clientID, webLogin: webLogin)
        }
        return profile
    }()
}

/// LINE Login v2.1's stand-in at `/line` (its issuer here): discovery naming ES256, keys at `/oauth2/v2.1/certs`,
/// `/oauth2/v2.1/authorize` (PKCE S256), `/oauth2/v2.1/token` (codes, whose ID token is the web login's HS256 one signed
/// with the channel secret; refresh tokens) and `/oauth2/v2.1/revoke`, which takes an `access_token` and ends the grant
/// behind it. The control API's sign-ins answer as the app SDK does, with an ES256 ID token.
extension Emulator {
    func addLINERoutes(to router: Router<BasicRequestContext>) {
        router.get("/line/.well-known/openid-configuration") { request, _ in
            await providerDocument(request) {
                let issuer = request.baseURL + "/line"
                var document = openIDConfiguration(
                    issuer: issuer, authorization: issuer + "/oauth2/v2.1/authorize", token: issuer + "/oauth2/v2.1/token",
                    jwks: issuer + "/oauth2/v2.1/certs", revocation: issuer + "/oauth2/v2.1/revoke", codeChallengeMethods: ["S256"])
                document["id_token_signing_alg_values_supported"] = .array([.string("ES256")])
                document["subject_types_supported"] = .array([.string("pairwise")])
                return HTTPAnswer.json(document)
            }
        }
        router.get("/line/oauth2/v2.1/certs") { request, _ in
            await providerDocument(request) { HTTPAnswer.json(await state.lineJWKS()) }
        }
        addAuthorizeRoutes("/line/oauth2/v2.1/authorize", provider: .line, to: router)

        router.post("/line/oauth2/v2.1/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.line, form, issuer: request.baseURL + "/line"), noStore: true)
            }
        }

        router.post("/line/oauth2/v2.1/revoke") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                guard let clientID = form["client_id"], let channel = configuration.oauthClient(.line, clientID),
                    channel.clientSecret == form["client_secret"]
                else { throw ProviderOAuthError(status: 400, code: "invalid_client", description: "invalid client_id or client_secret") }
                guard let token = form["access_token"], !token.isEmpty else {
                    throw ProviderOAuthError(status: 400, code: "invalid_request", description: "access_token is required")
                }
                _ = await state.revokeProviderToken(token, .line, clientID: clientID)
                return HTTPAnswer.empty()
            }
        }
    }
}

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
