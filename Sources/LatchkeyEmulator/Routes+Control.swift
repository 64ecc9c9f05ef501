import Foundation
import Hummingbird
import NIOCore

/// The control API under `/emulator/`, for tests and demos in any language.
extension Emulator {
    func addControlRoutes(to router: Router<BasicRequestContext>) {
        let control = router.group("/emulator")

        control.post("/users") { request, context in
            let body = try await decode(CreateUserRequest.self, request, context)
            if let status = body.realUserStatus, !(0...2).contains(status) { return controlError("realUserStatus is 0, 1 or 2") }
            if let domain = body.relayDomain, !Identifiers.relayDomains.contains(domain) {
                return controlError("relayDomain is \(Identifiers.relayDomains.joined(separator: " or "))")
            }
            var tenant = Identifiers.microsoftConsumersTenant
            if let given = body.microsoftTenant?.lowercased(), given != "consumers" {
                guard UUID(uuidString: given) != nil else { return controlError("microsoftTenant is consumers or a tenant GUID") }
                tenant = given
            }
            do throws(ControlRefusal) {
                let user = try await state.createUser(
                    email: body.email, hideMyEmail: body.hideMyEmail ?? false, realUserStatus: body.realUserStatus ?? 2,
                    givenName: body.givenName, familyName: body.familyName, microsoftTenant: tenant,
                    relayDomain: body.relayDomain ?? Identifiers.relayDomains[0], subjects: body.subjects ?? [:]
                )
                return HTTPAnswer.json(await describe(user), status: .created)
            } catch {
                return controlError(error.message, status: error.notFound ? .notFound : .badRequest)
            }
        }

        // Many users at once for load tests: {count, hideMyEmail?, realUserStatus?} → {users: [{sub, googleSub}]}.
        control.post("/users/batch") { request, context in
            struct Body: Decodable {
                var count: Int
                var hideMyEmail: Bool?
                var realUserStatus: Int?
            }
            struct Created: Encodable {
                var sub: String?
                var googleSub: String
            }
            let body = try await decode(Body.self, request, context)
            guard (1...maximumUserBatch).contains(body.count) else { return controlError("count is 1 to \(maximumUserBatch)") }
            if let status = body.realUserStatus, !(0...2).contains(status) { return controlError("realUserStatus is 0, 1 or 2") }
            let teamIDs = await state.configuration.teams.map(\.teamID)
            let newUsers = (0..<body.count).map { _ in
                EmulatorState.NewUser(
                    email: nil, hideMyEmail: body.hideMyEmail ?? false, realUserStatus: body.realUserStatus ?? 2, givenName: nil, familyName: nil,
                    teamIDs: teamIDs
                )
            }
            // Added in slices so that requests to other endpoints are served in between.
            for start in stride(from: 0, to: newUsers.count, by: 1000) {
                await state.add(Array(newUsers[start..<min(start + 1000, newUsers.count)]))
            }
            let created = newUsers.map { user in
                Created(sub: user.subjects.first { $0.teamID == teamIDs.first }?.sub, googleSub: user.subjects.first { $0.teamID == "google" }!.sub)
            }
            return HTTPAnswer.json(["users": created], status: .created)
        }

        control.post("/authorizations") { request, context in
            let body = try await decode(AuthorizationRequest.self, request, context)
            guard let provider = ProviderProfiles.named(body.provider ?? "apple")?.provider else {
                return controlError("provider is one of \(ProviderProfiles.all.map(\.provider.name).joined(separator: ", "))")
            }
            guard let (user, _) = await state.user(bySubject: body.sub) else { return controlError("no user with sub \(body.sub)", status: .notFound) }
            if provider != .apple { return await providerAuthorization(provider, user: user, body, request) }
            guard configuration.app(body.clientId) != nil else { return controlError("client id \(body.clientId) is not registered") }
            let scopes = Set(body.scopes ?? ["name", "email"])
            guard scopes.isSubset(of: ["name", "email"]) else { return controlError("scopes are name and email") }
            do throws(AppleOAuthError) {
                let signIn = try await state.signIn(userID: user.id, clientID: body.clientId, redirectURI: nil, nonce: body.nonce, scopes: scopes, native: true)
                var answer: [String: Claim] = ["identityToken": .string(signIn.identityToken), "authorizationCode": .string(signIn.code)]
                if let shared = signIn.user { answer["user"] = .object(shared) }
                return await authorized(answer, clientID: body.clientId)
            } catch {
                return controlError(error.detail)
            }
        }

        control.post("/users/:sub/consent-revocation") { _, context in
            try await userAction(context) { sub throws(AppleOAuthError) in try await state.revokeConsent(subject: sub) }
        }

        control.delete("/users/:sub") { _, context in
            try await userAction(context) { sub throws(AppleOAuthError) in try await state.deleteUser(subject: sub) }
        }

        control.post("/users/:sub/email-forwarding") { request, context in
            let body = try await decode(EmailForwardingRequest.self, request, context)
            return try await userAction(context) { sub throws(AppleOAuthError) in try await state.setEmailForwarding(subject: sub, enabled: body.enabled) }
        }

        control.post("/apps/:clientId") { request, context in
            struct Body: Decodable { var notificationUrl: String? }
            let body = try await decode(Body.self, request, context)
            let clientID = try context.parameters.require("clientId")
            guard await state.setNotificationURL(body.notificationUrl, clientID: clientID) else { return controlError("no app \(clientID)", status: .notFound) }
            return HTTPAnswer.empty(.noContent)
        }

        // The development mailbox: `serve --dev` delivers sign-in codes here instead of by SMTP.
        control.post("/mail") { request, context in
            var message = try await decode(MailRecord.self, request, context)
            guard !message.to.isEmpty else { return controlError("to is the recipient's address") }
            message.receivedAt = await state.now
            await state.deliverMail(message)
            return HTTPAnswer.empty(.noContent)
        }
        control.get("/mail") { request, _ in
            HTTPAnswer.json(["messages": await state.mail(to: request.uri.queryParameters.get("to"))])
        }

        // App Store Connect's app transfer: {clientId, toTeamId} → 201 {teamId, keyId, privateKey}, the recipient team's new key.
        control.post("/apple/transfers") { request, context in
            let body = try await decode(AppTransferRequest.self, request, context)
            do throws(ControlRefusal) {
                let transfer = try await state.transferApp(clientID: body.clientId, toTeamID: body.toTeamId)
                return HTTPAnswer.json(["teamId": transfer.teamID, "keyId": transfer.keyID, "privateKey": transfer.privateKeyPEM], status: .created)
            } catch {
                return controlError(error.message, status: error.notFound ? .notFound : .badRequest)
            }
        }

        // No body rotates Apple's (and Google's) keys as always; {"provider": "microsoft"} rotates that provider's.
        control.post("/keys/rotate") { request, _ in
            struct Body: Decodable { var provider: String }
            let data = try await request.body.collect(upTo: maximumBodySize)
            guard data.readableBytes > 0 else {
                _ = try await state.rotateKeys()
                return HTTPAnswer.json(try await state.jwks(.apple))
            }
            guard let body = try? JSONDecoder().decode(Body.self, from: Data(Array(buffer: data))),
                let provider = ProviderProfiles.named(body.provider)?.provider
            else {
                return controlError("the body is {\"provider\": …} naming a provider")
            }
            guard try await state.rotateKeys([provider]) else { return controlError("\(provider.name) has no signing keys") }
            return HTTPAnswer.json(try await state.jwks(provider))
        }

        control.post("/clock") { request, context in
            let body = try await decode(ClockRequest.self, request, context)
            await state.setClockOffset(body.offsetSeconds)
            return HTTPAnswer.json(["offsetSeconds": body.offsetSeconds, "now": await state.now.timeIntervalSince1970])
        }

        control.post("/faults") { request, context in
            let fault = try await decode(FaultSpec.self, request, context)
            if let status = fault.status, !(100...599).contains(status) { return controlError("status must be an HTTP status") }
            await state.addFault(fault)
            return HTTPAnswer.json(fault, status: .created)
        }

        control.delete("/faults") { _, _ in
            await state.clearFaults()
            return HTTPAnswer.empty(.noContent)
        }

        control.get("/requests") { _, _ in HTTPAnswer.json(await state.requestLog) }
        control.delete("/requests") { _, _ in
            await state.clearRequestLog()
            return HTTPAnswer.empty(.noContent)
        }
        control.get("/notifications") { _, _ in HTTPAnswer.json(await state.notificationRecords) }
    }

    private func describe(_ user: UserRecord) async -> [String: Claim] {
        var answer: [String: Claim] = [
            "hideMyEmail": .bool(user.hideMyEmail), "realUserStatus": .int(user.realUserStatus), "realEmail": .string(user.email),
        ]
        var subs: [String: Claim] = [:]
        for team in await state.configuration.teams { subs[team.teamID] = .string(await state.subject(of: user, teamID: team.teamID)) }
        answer["subs"] = .object(subs)
        if let team = await state.defaultTeamID {
            answer["sub"] = .string(await state.subject(of: user, teamID: team))
            answer["email"] = .string(await state.visibleEmail(of: user, teamID: team))
        }
        answer["googleSub"] = .string(await state.subject(of: user, provider: .google))
        var subjects: [String: Claim] = [:]
        for provider in ProviderProfiles.all.map(\.provider) { subjects[provider.name] = .string(await state.subject(of: user, provider: provider)) }
        answer["subjects"] = .object(subjects)
        answer["microsoftTenant"] = .string(user.microsoftTenant)
        if let given = user.givenName { answer["givenName"] = .string(given) }
        if let family = user.familyName { answer["familyName"] = .string(family) }
        return answer
    }

    /// A sign-in at a provider other than Apple, answered as its app SDK hands it to the app.
    private func providerAuthorization(_ provider: CodeRecord.Provider, user: UserRecord, _ body: AuthorizationRequest, _ request: Request) async
        -> Response
    {
        guard configuration.oauthClient(provider, body.clientId) != nil else {
            return controlError("client id \(body.clientId) is not registered for \(provider.name)")
        }
        let method = body.codeChallenge == nil ? nil : (body.codeChallengeMethod ?? "S256")
        if let method, !(provider.profile.allowsPlainChallenge ? ["S256", "plain"] : ["S256"]).contains(method) {
            return controlError("codeChallengeMethod \(method) is not supported by \(provider.name)")
        }
        let authorization = EmulatorState.ProviderAuthorization(
            provider: provider, userID: user.id, clientID: body.clientId, redirectURI: body.redirectUri, nonce: body.nonce,
            scopes: body.scopes ?? provider.profile.defaultScopes, codeChallenge: body.codeChallenge, codeChallengeMethod: method,
            oidcIssuer: request.baseURL + (provider.profile.ownIssuerPath ? "/" + provider.name : "/oidc"))
        do throws(ProviderOAuthError) {
            let signIn = try await state.providerSignIn(authorization)
            var answer: [String: Claim] = ["sub": .string(signIn.subject)]
            if let token = signIn.idToken { answer["idToken"] = .string(token) }
            if let code = signIn.authorizationCode { answer["authorizationCode"] = .string(code) }
            if let token = signIn.accessToken { answer["accessToken"] = .string(token) }
            return await authorized(answer, clientID: body.clientId)
        } catch {
            return controlError(error.description)
        }
    }

    /// A minted sign-in's answer, logged under its client id.
    private func authorized(_ answer: [String: Claim], clientID: String) async -> Response {
        await state.record(RequestRecord(time: await state.now, method: "POST", endpoint: "/emulator/authorizations", clientId: clientID, status: 201))
        return HTTPAnswer.json(answer, status: .created)
    }

    private func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: BasicRequestContext) async throws -> T {
        do {
            return try await request.decode(as: T.self, context: context)
        } catch {
            throw HTTPError(.badRequest, message: "the body is not the JSON this endpoint takes (see the README's control API)")
        }
    }

    private func userAction(_ context: BasicRequestContext, _ action: (String) async throws(AppleOAuthError) -> Void) async throws -> Response {
        let sub = try context.parameters.require("sub")
        do {
            try await action(sub)
            return HTTPAnswer.empty(.noContent)
        } catch {
            return controlError("no user with sub \(sub)", status: .notFound)
        }
    }
}

func controlError(_ message: String, status: HTTPResponse.Status = .badRequest) -> Response {
    HTTPAnswer.json(["error": status == .notFound ? "not_found" : "invalid_request", "error_description": message], status: status)
}

/// The most users `POST /emulator/users/batch` makes in one request.
let maximumUserBatch = 100_000
