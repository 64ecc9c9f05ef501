import Foundation
import Hummingbird
import NIOCore

extension CodeRecord.Provider {
    static let facebook = Self("facebook")
}

extension ProviderProfile {
    /// Facebook at `/facebook`: Limited Login ID tokens (no `email_verified`) and classic user access tokens, checked
    /// by `debug_token` and `/me`.
    static let facebook: ProviderProfile = {
        var profile = ProviderProfile(provider: .facebook, displayName: "Facebook") { $0.addFacebookRoutes(to: $1) }
        profile.subject = { $0.facebook }
        profile.register = { configuration, _, clientID, _ in
            configuration.facebookApps.removeAll { $0.appID == clientID }
            configuration.facebookApps.append(.init(appID: clientID, appSecret: "\(clientID)-secret"))
        }
        profile.client = { configuration, _, clientID in
            configuration.facebookApp(clientID).map { .init(clientID: $0.appID, clientSecret: $0.appSecret) }
        }
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "EAA", refreshPrefix: "", codePrefix: "", accessLifetime: 5_184_000, tokenType: "bearer",
                badCode: "Invalid verification code format.", badRefresh: "Invalid token.", codeLifetime: nil)
        }
        profile.accessTokenLength = 150
        profile.appSignIn = .accessTokenAndIDToken
        profile.defaultScopes = ["public_profile", "email"]
        profile.idTokenIssuer = { configuration, _, _ in configuration.facebookIssuer }
        profile.idTokenHasEmailVerified = false
        profile.idTokenExtras = { claims, user, _, _ in
            claims["jti"] = .string(UUID().uuidString.lowercased())
            claims["picture"] = .string(
                "https://platform-lookaside.fbsbx.com/platform/profilepic/?asid=\(Identifiers.ProviderSubjects(userID: user.id).facebook)")
        }
        profile.keyID = Identifiers.googleKeyID
        return profile
    }()
}

extension Emulator {
    func addFacebookRoutes(to router: Router<BasicRequestContext>) {
        router.get("/facebook/.well-known/openid-configuration/") { request, _ in
            await providerDocument(request) {
                let base = request.baseURL + "/facebook"
                var document = openIDConfiguration(
                    issuer: configuration.facebookIssuer, authorization: base + "/dialog/oauth/", token: nil, jwks: base + "/.well-known/oauth/openid/jwks/",
                    revocation: nil, codeChallengeMethods: ["S256"])
                document["response_types_supported"] = .array(["id_token", "token id_token"].map(Claim.string))
                document["subject_types_supported"] = .array([.string("pairwise")])
                document["claims_supported"] = .array(
                    ["iss", "aud", "sub", "iat", "exp", "jti", "nonce", "at_hash", "name", "given_name", "family_name", "email", "picture"].map(Claim.string))
                return HTTPAnswer.json(document)
            }
        }

        router.get("/facebook/.well-known/oauth/openid/jwks/") { request, _ in
            await providerDocument(request) { () throws(ProviderOAuthError) in HTTPAnswer.json(try await state.jwks(.facebook)) }
        }

        router.get("/facebook/debug_token") { request, _ in
            let appToken = request.query("access_token")
            let appID = appToken?.split(separator: "|").first.map(String.init)
            return await providerEndpoint(request, clientID: appID) { () throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.facebookDebugToken(request.query("input_token"), appToken: appToken))
            }
        }

        router.get("/facebook/me") { request, _ in
            let token = request.query("access_token") ?? request.bearerToken
            return await providerEndpoint(request, clientID: await token.asyncFlatMap { await state.clientID(ofToken: $0) }) {
                () throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.facebookMe(token, fields: request.query("fields")))
            }
        }

        // The user removes the app: every token they gave it dies.
        router.delete("/facebook/me/permissions") { request, _ in
            let token = request.query("access_token") ?? request.bearerToken
            return await providerEndpoint(request, clientID: await token.asyncFlatMap { await state.clientID(ofToken: $0) }) {
                () throws(ProviderOAuthError) in
                guard let token, await state.revokeAppAuthorization(token, .facebook) else {
                    throw EmulatorState.facebookError(400, code: 190, "Invalid OAuth access token data.")
                }
                return HTTPAnswer.json(["success": true])
            }
        }
    }
}
