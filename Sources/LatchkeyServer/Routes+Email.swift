import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels

/// E-mail one-time codes: sign in, or link an address as another way in. `start` answers 202 for every address
/// alike; a code dies after five wrong tries.
extension LatchkeyServer {
    func addEmailRoutes(to router: Router<LatchkeyRequestContext>) {
        router.post("/v1/auth/email/start") { request, context in try await emailStart(request, from: origin(request, context), linking: false) }
        router.post("/v1/auth/email/verify") { request, _ in try await emailVerify(request, linking: false) }
        router.post("/v1/me/identities/email/start") { request, context in try await emailStart(request, from: origin(request, context), linking: true) }
        router.post("/v1/me/identities/email/verify") { request, _ in try await emailVerify(request, linking: true) }
    }

    var requireEmailCodes: EmailCodes {
        get throws {
            guard let emailCodes else {
                throw APIError(status: .notFound, code: "not_found", description: "e-mail sign-in is off on this server (email.smtp.url)")
            }
            return emailCodes
        }
    }

    func emailStart(_ request: Request, from origin: RequestOrigin, linking: Bool) async throws -> Response {
        if linking { _ = try await authenticate(request) }
        let codes = try requireEmailCodes
        let body = try decodeJSON(
            EmailStartRequest.self, try Self.onlyMembers(["email", "inviteCode"], of: try await request.bytes(limit: configuration.maximumBodySize)))
        try await codes.start(try EmailCodes.address(body.email), ip: origin.ip)
        return JSONBody.response(StatusResponse(status: "sent"), status: .accepted)
    }

    func emailVerify(_ request: Request, linking: Bool) async throws -> Response {
        let token = linking ? try await authenticate(request).0 : nil
        let bytes = try await request.bytes(limit: configuration.maximumBodySize)
        let (body, identity) = try await verifiedEmail(bytes)
        if let token {
            let identities = try await sessions.signIns.link(
                identity: identity, provider: EmailCodes.provider, userID: token.userID, inviteCode: body.inviteCode)
            guard let user = try await store.user(id: token.userID) else { throw LatchkeyError(.invalidToken, "the user of this access token is gone") }
            return JSONBody.response(Self.userResponse(user, identities))
        }
        let outcome = try await attesting(bytes) {
            try await sessions.signIns.signIn(
                identity: identity, provider: EmailCodes.provider, userAgent: request.headers[.userAgent], inviteCode: body.inviteCode)
        }
        metrics.signIn(provider: EmailCodes.provider, outcome: outcome.isNewUser ? "new_user" : "ok")
        return Self.signInResponse(outcome)
    }

    /// The address a `{email, code, inviteCode?}` body proves (held to the per-account rate limit), with the body.
    func verifiedEmail(_ bytes: [UInt8]) async throws -> (EmailVerifyRequest, VerifiedIdentity) {
        let codes = try requireEmailCodes
        let body = try decodeJSON(EmailVerifyRequest.self, try Self.onlyMembers(["email", "code", "inviteCode", "appAttest"], of: bytes))
        let address = try EmailCodes.address(body.email)
        try signInFlow.admit(EmailCodes.provider, address.normalized)
        return (body, try await codes.verify(address, code: body.code))
    }

    /// `bytes`, refused unless the JSON object in it names only `allowed` members (as the schema says).
    static func onlyMembers(_ allowed: [String], of bytes: [UInt8]) throws -> [UInt8] {
        if let members = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
            let unknown = members.keys.first(where: { !allowed.contains($0) })
        {
            throw APIError.invalidRequest("unknown member \(unknown.prefix(40)); this body takes \(allowed.joined(separator: ", "))")
        }
        return bytes
    }
}
