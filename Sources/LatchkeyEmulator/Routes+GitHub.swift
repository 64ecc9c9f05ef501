import Foundation
import Hummingbird
import NIOCore

extension CodeRecord.Provider {
    static let github = Self("github")
}

extension ProviderProfile {
    /// GitHub at `/github`: OAuth apps, codes of 20 hex digits, tokens that do not expire, no ID tokens.
    static let github: ProviderProfile = {
        var profile = ProviderProfile(provider: .github, displayName: "GitHub") { $0.addGitHubRoutes(to: $1) }
        profile.subject = { $0.github }
        // OAuth app tokens do not expire; codes live ten minutes.
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "gho_", refreshPrefix: "", codePrefix: "", accessLifetime: 10 * 365 * 86_400, tokenType: "bearer",
                badCode: "The code passed is incorrect or expired.", badRefresh: "", codeLifetime: 600)
        }
        profile.makeCode = { _ in Identifiers.randomAlphanumeric(20, alphabet: "0123456789abcdef") }
        profile.appSignIn = .code
        profile.defaultScopes = ["read:user", "user:email"]
        profile.authorizationAnswerHasScope = false
        profile.responseTypeOptional = true
        profile.tokenAnswerHasIDToken = false
        return profile
    }()
}

/// GitHub's stand-in at `/github`: the sign-in page and token endpoint of `github.com` under `/github/login/oauth`,
/// and the REST API of `api.github.com` under `/github/api`.
extension Emulator {
    func addGitHubRoutes(to router: Router<BasicRequestContext>) {
        addAuthorizeRoutes("/github/login/oauth/authorize", provider: .github, to: router)

        router.post("/github/login/oauth/access_token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(await state.githubToken(form), noStore: true)
            }
        }

        router.get("/github/api/user") { request, _ in
            await providerEndpoint(request) { () throws(ProviderOAuthError) in HTTPAnswer.json(try await state.githubUser(request.bearerToken)) }
        }

        router.get("/github/api/user/emails") { request, _ in
            await providerEndpoint(request) { () throws(ProviderOAuthError) in HTTPAnswer.json(try await state.githubEmails(request.bearerToken)) }
        }

        router.post("/github/api/applications/:client_id/token") { request, context in
            try await githubApplication(request, context, revokeGrant: false)
        }

        router.delete("/github/api/applications/:client_id/grant") { request, context in
            try await githubApplication(request, context, revokeGrant: true)
        }
    }

    private func githubApplication(_ request: Request, _ context: BasicRequestContext, revokeGrant: Bool) async throws -> Response {
        let clientID = try context.parameters.require("client_id")
        let body = try await request.body.collect(upTo: maximumBodySize)
        struct Body: Decodable { let access_token: String? }
        let token = (try? JSONDecoder().decode(Body.self, from: Data(String(buffer: body).utf8)))?.access_token
        let credentials = request.basicCredentials
        return await providerEndpoint(request, clientID: clientID) { () throws(ProviderOAuthError) in
            let answer = try await state.githubApplication(clientID: clientID, credentials: credentials, accessToken: token, revokeGrant: revokeGrant)
            return revokeGrant ? Response(status: .noContent) : HTTPAnswer.json(answer)
        }
    }
}
