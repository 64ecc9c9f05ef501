import Foundation
import Hummingbird
import NIOCore

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
