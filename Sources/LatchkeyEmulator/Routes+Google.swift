import Crypto
import Foundation
import Hummingbird

extension Emulator {
    func addGoogleRoutes(to router: Router<BasicRequestContext>) {
        router.get("/google/.well-known/openid-configuration") { request, _ in
            let base = request.baseURL + "/google"
            return HTTPAnswer.json(
                GoogleDiscovery(
                    issuer: configuration.googleIssuer,
                    authorization_endpoint: base + "/o/oauth2/v2/auth",
                    token_endpoint: base + "/token",
                    jwks_uri: base + "/oauth2/v3/certs",
                    revocation_endpoint: base + "/revoke",
                    response_types_supported: ["code", "token", "id_token", "code token", "code id_token", "token id_token", "code token id_token", "none"],
                    subject_types_supported: ["public"],
                    id_token_signing_alg_values_supported: ["RS256"],
                    scopes_supported: ["openid", "email", "profile"],
                    token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic"],
                    claims_supported: ["aud", "email", "email_verified", "exp", "family_name", "given_name", "iat", "iss", "name", "picture", "sub"],
                    code_challenge_methods_supported: ["plain", "S256"],
                    grant_types_supported: ["authorization_code", "refresh_token"]
                ))
        }

        router.get("/google/oauth2/v3/certs") { _, _ in
            var response = HTTPAnswer.json(await state.googleKeys.jwks)
            response.headers[.cacheControl] = "public, max-age=21600, must-revalidate, no-transform"
            return response
        }

        router.get("/google/o/oauth2/v2/auth") { request, _ in
            var parameters: [String: String] = [:]
            for (name, value) in request.uri.queryParameters { parameters[String(name)] = String(value) }
            return await authorizePage(parameters, provider: .google, action: "/google/o/oauth2/v2/auth")
        }

        router.post("/google/o/oauth2/v2/auth") { request, _ in
            let (form, _, malformed) = try await readForm(request)
            if malformed { return HTTPAnswer.json(["error": "invalid_request"], status: .badRequest) }
            if let (error, _) = await validateAuthorizeRequest(form, provider: .google) { return HTTPAnswer.json(["error": error], status: .badRequest) }
            var answer: [(String, String)] = []
            if form["action"] != "continue" {
                answer.append(("error", "access_denied"))
            } else {
                let user = await findOrCreateUser(form)
                do throws(GoogleOAuthError) {
                    let code = try await state.googleSignIn(
                        userID: user.id, clientID: form["client_id"]!, redirectURI: form["redirect_uri"], nonce: form["nonce"],
                        scopes: Set((form["scope"] ?? "").split(separator: " ").map(String.init)),
                        codeChallenge: form["code_challenge"], codeChallengeMethod: form["code_challenge_method"]
                    )
                    answer.append(("code", code))
                    answer.append(("scope", form["scope"] ?? ""))
                } catch {
                    return HTTPAnswer.json(["error": error.code], status: .init(code: error.status))
                }
            }
            if let stateValue = form["state"] { answer.append(("state", stateValue)) }
            return deliver(answer, to: form["redirect_uri"]!, mode: "query")
        }

        router.post("/google/token") { request, _ in
            let (form, _, malformed) = try await readForm(request)
            var entry = RequestRecord(
                time: await state.now, method: "POST", endpoint: "/google/token", clientId: form["client_id"], grantType: form["grant_type"], status: 200)
            let response: Response
            do throws(GoogleOAuthError) {
                if malformed { throw GoogleOAuthError(status: 400, code: "invalid_request", description: "The request body is not form encoded.") }
                response = HTTPAnswer.json(try await state.googleToken(form), noStore: true)
            } catch {
                entry.error = error.code
                entry.detail = error.description
                response = HTTPAnswer.json(["error": error.code, "error_description": error.description], status: .init(code: error.status), noStore: true)
            }
            entry.status = Int(response.status.code)
            await state.record(entry)
            return response
        }

        router.get("/google/tokeninfo") { request, _ in
            guard let token = request.query("id_token"), let claims = await state.googleTokenInfo(token) else {
                return HTTPAnswer.json(["error": "invalid_token", "error_description": "Invalid Value"], status: .badRequest)
            }
            return HTTPAnswer.json(claims)
        }
    }
}

struct GoogleDiscovery: Encodable {
    let issuer, authorization_endpoint, token_endpoint, jwks_uri, revocation_endpoint: String
    let response_types_supported, subject_types_supported, id_token_signing_alg_values_supported, scopes_supported: [String]
    let token_endpoint_auth_methods_supported, claims_supported, code_challenge_methods_supported, grant_types_supported: [String]
}
