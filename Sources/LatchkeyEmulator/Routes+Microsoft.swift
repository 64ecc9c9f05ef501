import Foundation
import Hummingbird
import NIOCore

/// Microsoft's template issuer: `{tenantid}` stands for the token's `tid`.
let microsoftIssuerTemplate = "https://login.microsoftonline.com/{tenantid}/v2.0"

extension CodeRecord.Provider {
    static let microsoft = Self("microsoft")
}

extension ProviderProfile {
    /// The Microsoft identity platform v2.0 at `/microsoft/{tenant}`: tenant issuers from a template, keys without `alg`,
    /// a new refresh token on each refresh (the old one stays usable), `plain` PKCE allowed.
    static let microsoft: ProviderProfile = {
        var profile = ProviderProfile(provider: .microsoft, displayName: "Microsoft") { $0.addMicrosoftRoutes(to: $1) }
        profile.subject = { $0.microsoft }
        profile.lookupSubjects = { [$0.microsoft, $0.microsoftObjectID] }
        profile.register = { configuration, _, clientID, uris in
            configuration.microsoftClients.removeAll { $0.clientID == clientID }
            configuration.microsoftClients.append(.init(clientID: clientID, redirectURIs: uris))
        }
        profile.client = { configuration, _, clientID in configuration.microsoftClients.first { $0.clientID == clientID } }
        profile.tokenStyle = { _ in
            TokenStyle(
                accessPrefix: "EwB", refreshPrefix: "M.C5", codePrefix: "0.A", accessLifetime: 3599, tokenType: "Bearer",
                badCode: "AADSTS70008: The provided authorization code or refresh token has expired due to inactivity or was already redeemed.",
                badRefresh: "AADSTS70000: The provided refresh token is invalid or was revoked.", codeLifetime: nil)
        }
        profile.refresh = { _ in .newAndOldKept }
        profile.defaultScopes = ["openid", "profile", "email", "offline_access"]
        profile.allowsPlainChallenge = true
        profile.tokenAnswerExtras = { answer, _, style in answer["ext_expires_in"] = .int(style.accessLifetime) }
        profile.idTokenIssuer = { _, user, _ in "https://login.microsoftonline.com/\(user.microsoftTenant)/v2.0" }
        profile.idTokenExtras = { claims, user, _, issuedAt in
            claims["tid"] = .string(user.microsoftTenant)
            claims["oid"] = .string(Identifiers.ProviderSubjects(userID: user.id).microsoftObjectID)
            claims["ver"] = .string("2.0")
            claims["preferred_username"] = .string(user.email)
            claims["nbf"] = .int(issuedAt)
        }
        profile.keyID = Identifiers.microsoftKeyID
        profile.jwksAlgorithm = nil
        profile.jwksExtras = ["issuer": microsoftIssuerTemplate]
        return profile
    }()
}

extension Emulator {
    func addMicrosoftRoutes(to router: Router<BasicRequestContext>) {
        router.get("/microsoft/:tenant/v2.0/.well-known/openid-configuration") { request, context in
            let tenant = try context.parameters.require("tenant")
            return await providerEndpoint(request) { () throws(ProviderOAuthError) in
                let issuer =
                    switch tenant.lowercased() {
                    case "common", "organizations": microsoftIssuerTemplate
                    case "consumers": microsoftIssuerTemplate.replacingOccurrences(of: "{tenantid}", with: Identifiers.microsoftConsumersTenant)
                    case let guid where UUID(uuidString: guid) != nil: microsoftIssuerTemplate.replacingOccurrences(of: "{tenantid}", with: guid)
                    default: throw ProviderOAuthError(status: 400, code: "invalid_tenant", description: "AADSTS90002: Tenant '\(tenant)' not found.")
                    }
                let base = request.baseURL + "/microsoft/" + tenant
                var document = openIDConfiguration(
                    issuer: issuer, authorization: base + "/oauth2/v2.0/authorize", token: base + "/oauth2/v2.0/token",
                    jwks: base + "/discovery/v2.0/keys", revocation: nil, codeChallengeMethods: ["plain", "S256"])
                document["token_endpoint_auth_methods_supported"] = .array(["client_secret_post", "private_key_jwt", "client_secret_basic"].map(Claim.string))
                document["response_modes_supported"] = .array(["query", "fragment", "form_post"].map(Claim.string))
                document["tenant_region_scope"] = tenant.lowercased() == "consumers" ? .string("") : .string("WW")
                return HTTPAnswer.json(document)
            }
        }

        // Keys carry no `alg` and a per-key `issuer`, as Microsoft's do.
        router.get("/microsoft/:tenant/discovery/v2.0/keys") { request, _ in
            await providerDocument(request) { () throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.jwks(.microsoft))
            }
        }

        addAuthorizeRoutes("/microsoft/:tenant/oauth2/v2.0/authorize", provider: .microsoft, to: router)

        router.post("/microsoft/:tenant/oauth2/v2.0/token") { request, context in
            let tenant = try context.parameters.require("tenant")
            return try await providerFormEndpoint(request) { form throws(ProviderOAuthError) in
                HTTPAnswer.json(try await state.providerToken(.microsoft, form, tenant: tenant), noStore: true)
            }
        }
    }
}
