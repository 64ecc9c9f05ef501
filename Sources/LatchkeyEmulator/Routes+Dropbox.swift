import Foundation
import Hummingbird
import NIOCore

extension CodeRecord.Provider {
    static let dropbox = Self("dropbox")
}

extension ProviderProfile {
    /// Dropbox at `/dropbox`: codes with PKCE, no ID tokens, the account ids in the token answer, an RPC API.
    static let dropbox: ProviderProfile = {
        var profile = ProviderProfile(provider: .dropbox, displayName: "Dropbox") { $0.addDropboxRoutes(to: $1) }
        profile.subject = { $0.dropbox }
        profile.register = { configuration, _, clientID, uris in
            configuration.dropboxApps.removeAll { $0.appKey == clientID }
            configuration.dropboxApps.append(.init(appKey: clientID, redirectURIs: uris))
        }
        profile.client = { configuration, _, clientID in
            configuration.dropboxApps.first { $0.appKey == clientID }.map {
                .init(clientID: $0.appKey, clientSecret: $0.appSecret, redirectURIs: $0.redirectURIs)
            }
        }
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "sl.", refreshPrefix: "", codePrefix: "", accessLifetime: 14_400, tokenType: "bearer",
                badCode: "code doesn't exist or has expired", badRefresh: "refresh token is invalid or revoked", codeLifetime: nil)
        }
        profile.invalidClientStatus = 400
        profile.appSignIn = .codeAndAccessToken
        profile.defaultScopes = ["account_info.read"]
        profile.authorizationAnswerHasScope = false
        profile.tokenAnswerHasIDToken = false
        profile.tokenAnswerExtras = { answer, user, _ in
            let subjects = Identifiers.ProviderSubjects(userID: user.id)
            answer["account_id"] = .string(subjects.dropbox)
            answer["uid"] = .string(subjects.dropboxUID)
        }
        return profile
    }()
}

extension Emulator {
    func addDropboxRoutes(to router: Router<BasicRequestContext>) {
        router.post("/dropbox/oauth2/token") { request, _ in
            try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.dropbox, form), noStore: true)
            }
        }

        addAuthorizeRoutes("/dropbox/oauth2/authorize", provider: .dropbox, to: router)

        router.post("/dropbox/2/users/get_current_account") { request, _ in
            let body = String(buffer: try await request.body.collect(upTo: maximumBodySize)).trimmingCharacters(in: .whitespacesAndNewlines)
            return await dropboxRPC(request) { () throws(ProviderOAuthError) in
                guard body.isEmpty || body == "null" else {
                    throw ProviderOAuthError(
                        status: 400, code: "bad_request",
                        description: "Error in call to API function \"users/get_current_account\": request body: could not decode input as JSON")
                }
                return HTTPAnswer.json(try await state.dropboxAccount(request.bearerToken))
            }
        }

        // Revokes the Bearer token and its refresh token; answers `null`.
        router.post("/dropbox/2/auth/token/revoke") { request, _ in
            await dropboxRPC(request) { () throws(ProviderOAuthError) in
                try await state.dropboxRevoke(request.bearerToken)
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "null")))
            }
        }
    }

    /// A Dropbox API call, logged under the app of its Bearer token.
    private func dropboxRPC(_ request: Request, _ body: () async throws(ProviderOAuthError) -> Response) async -> Response {
        let clientID = await request.bearerToken.asyncFlatMap { await state.clientID(ofToken: $0) }
        return await providerEndpoint(request, clientID: clientID, body)
    }
}
