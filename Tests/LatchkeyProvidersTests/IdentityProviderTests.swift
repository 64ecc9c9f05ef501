import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyTestSupport
import Synchronization
import Testing

/// Providers against in-memory provider endpoints: one answer per URL path.
@Suite("Providers: OpenID Connect, Microsoft tenants, Facebook and Dropbox")
struct IdentityProviderTests {
    static let key = Fixtures.appleKey
    static let now = Fixtures.now

    /// Answers by path; records nothing else. Unknown paths are 404.
    static func endpoints(_ answers: [String: @Sendable (OutboundRequest) -> OutboundResponse]) -> InMemoryTransport {
        InMemoryTransport { request throws(LatchkeyError) in
            let path = URLComponents(string: request.url)?.path ?? ""
            guard let answer = answers[path] else { return OutboundResponse(status: 404, body: Array(#"{"error":"not_found"}"#.utf8)) }
            return answer(request)
        }
    }

    static func json(_ text: String, status: Int = 200) -> OutboundResponse { OutboundResponse(status: status, body: Array(text.utf8)) }

    static func claims(iss: String, aud: String = "client-1", sub: String = "user-1", extra: [String: any Sendable] = [:]) -> [String: any Sendable] {
        var claims: [String: any Sendable] = [
            "iss": iss, "aud": aud, "sub": sub, "iat": Int(now.timeIntervalSince1970), "exp": Int(now.timeIntervalSince1970) + 600,
        ]
        claims.merge(extra) { $1 }
        return claims
    }

    // MARK: Generic OpenID Connect

    static func genericDiscovery(issuer: String, algorithms: String = #"["RS256"]"#) -> String {
        #"{"issuer":"\#(issuer)","jwks_uri":"https://id.example.com/keys","token_endpoint":"https://id.example.com/token","id_token_signing_alg_values_supported":\#(algorithms)}"#
    }

    @Test("a generic provider verifies ID tokens with the keys and algorithms its discovery names")
    func genericProvider() async throws {
        let transport = Self.endpoints([
            "/.well-known/openid-configuration": { _ in Self.json(Self.genericDiscovery(issuer: "https://id.example.com")) },
            "/keys": { _ in Self.json(jwks(Self.key)) },
        ])
        let provider = OpenIDProvider(
            configuration: .generic(name: "corp", issuer: "https://id.example.com", clientIDs: ["client-1"]), transport: transport,
            timeSource: .fixed(Self.now))
        let signIn = try await provider.verify(ProviderCredential(idToken: Self.key.sign(claims: Self.claims(iss: "https://id.example.com"))))
        #expect(signIn.identity.subject == "user-1")
        #expect(signIn.singleUseToken != nil)
        await #expect(throws: LatchkeyError(.unexpectedIssuer, "")) {
            _ = try await provider.verify(ProviderCredential(idToken: Self.key.sign(claims: Self.claims(iss: "https://evil.example.com"))))
        }
        await #expect(throws: LatchkeyError(.unexpectedAudience, "")) {
            _ = try await provider.verify(ProviderCredential(idToken: Self.key.sign(claims: Self.claims(iss: "https://id.example.com", aud: "other"))))
        }
    }

    @Test("validation ends a grant only on invalid_grant; an empty, HTML or unreadable 400/401 is no answer; a revoked token needs no revocation")
    func refusalsFromAnswersThatSayNothing() async throws {
        let tokenAnswer = Mutex(Self.json(#"{"access_token":"at"}"#))
        let revocationAnswer = Mutex(Self.json("{}"))
        let transport = Self.endpoints([
            "/.well-known/openid-configuration": { _ in
                Self.json(
                    #"{"issuer":"https://id.example.com","jwks_uri":"https://id.example.com/keys","token_endpoint":"https://id.example.com/token","revocation_endpoint":"https://id.example.com/revoke","id_token_signing_alg_values_supported":["RS256"]}"#
                )
            },
            "/token": { _ in tokenAnswer.withLock { $0 } },
            "/revoke": { _ in revocationAnswer.withLock { $0 } },
            "/oauth2/token": { _ in tokenAnswer.withLock { $0 } },
        ])
        let provider = OpenIDProvider(
            configuration: .generic(name: "corp", issuer: "https://id.example.com", clientIDs: ["client-1"]), transport: transport,
            timeSource: .fixed(Self.now))
        var dropboxConfiguration = DropboxConfiguration(appKey: "app-key")
        dropboxConfiguration.apiURL = "https://api.example.com"
        let dropbox = DropboxProvider(configuration: dropboxConfiguration, transport: transport, timeSource: .fixed(Self.now))

        #expect(await provider.validate(refreshToken: "rt", clientID: "client-1") == .valid)
        tokenAnswer.withLock { $0 = Self.json(#"{"error":"invalid_grant"}"#, status: 400) }
        #expect(await provider.validate(refreshToken: "rt", clientID: "client-1") == .revoked)
        #expect(await dropbox.validate(refreshToken: "rt", clientID: "app-key") == .revoked)
        for status in [400, 401] {
            for body in ["", "<html><body>Bad Request</body></html>", #"{"error":{"code":400,"message":"Bad Request"}}"#] {
                tokenAnswer.withLock { $0 = Self.json(body, status: status) }
                #expect(await provider.validate(refreshToken: "rt", clientID: "client-1") == .unreachable("invalid_provider_response"), "\(status) \(body)")
                #expect(await dropbox.validate(refreshToken: "rt", clientID: "app-key") == .unreachable("invalid_provider_response"), "\(status) \(body)")
            }
        }

        try await provider.revoke(refreshToken: "rt", clientID: "client-1")
        revocationAnswer.withLock { $0 = Self.json(#"{"error":"invalid_token"}"#, status: 400) }
        await #expect(throws: LatchkeyError(.invalidGrant, "")) { try await provider.revoke(refreshToken: "rt", clientID: "client-1") }
        revocationAnswer.withLock { $0 = Self.json("", status: 401) }
        await #expect(throws: LatchkeyError(.invalidProviderResponse, "")) { try await provider.revoke(refreshToken: "rt", clientID: "client-1") }
    }

    @Test("a generic provider whose discovery names another issuer, or only algorithms Latchkey does not verify, is refused")
    func genericDiscoveryRefusals() async throws {
        let mismatch = OpenIDProvider(
            configuration: .generic(name: "corp", issuer: "https://id.example.com", clientIDs: ["client-1"]),
            transport: Self.endpoints(["/.well-known/openid-configuration": { _ in Self.json(Self.genericDiscovery(issuer: "https://id.example.com/")) }]))
        let token = Self.key.sign(claims: Self.claims(iss: "https://id.example.com"))
        await #expect {
            _ = try await mismatch.verify(ProviderCredential(idToken: token))
        } throws: {
            ($0 as? LatchkeyError)?.code == .invalidConfiguration && ($0 as? LatchkeyError)?.reason.contains("oidc.corp.issuer") == true
        }
        let hmacOnly = OpenIDProvider(
            configuration: .generic(name: "corp", issuer: "https://id.example.com", clientIDs: ["client-1"]),
            transport: Self.endpoints([
                "/.well-known/openid-configuration": { _ in Self.json(Self.genericDiscovery(issuer: "https://id.example.com", algorithms: #"["HS256"]"#)) }
            ]))
        await #expect(throws: LatchkeyError(.invalidConfiguration, "")) { _ = try await hmacOnly.verify(ProviderCredential(idToken: token)) }
        let down = OpenIDProvider(
            configuration: .generic(name: "corp", issuer: "https://id.example.com", clientIDs: ["client-1"]),
            transport: Self.endpoints(["/.well-known/openid-configuration": { _ in Self.json("oops", status: 503) }]))
        await #expect(throws: LatchkeyError(.providerUnavailable, "")) { _ = try await down.verify(ProviderCredential(idToken: token)) }
    }

    @Test("a code is redeemed with its verifier; the provider's invalid_grant is ours; a bad verifier never leaves the server")
    func codeExchange() async throws {
        let seen = Mutex<[String: String]>([:])
        let transport = Self.endpoints([
            "/.well-known/openid-configuration": { _ in Self.json(Self.genericDiscovery(issuer: "https://id.example.com")) },
            "/keys": { _ in Self.json(jwks(Self.key)) },
            "/token": { request in
                let fields = request.formFields
                seen.withLock { $0 = fields }
                guard fields["code"] == "good-code" else { return Self.json(#"{"error":"invalid_grant"}"#, status: 400) }
                let idToken = Self.key.sign(claims: Self.claims(iss: "https://id.example.com"))
                return Self.json(#"{"access_token":"at","id_token":"\#(idToken)","refresh_token":"rt","token_type":"Bearer"}"#)
            },
        ])
        let provider = OpenIDProvider(
            configuration: .generic(name: "corp", issuer: "https://id.example.com", clientIDs: ["client-1"]), transport: transport,
            timeSource: .fixed(Self.now))
        let verifier = PKCE.makeVerifier()
        let signIn = try await provider.verify(ProviderCredential(authorizationCode: "good-code", codeVerifier: verifier, redirectURI: "app:/cb"))
        #expect(signIn.grant == "rt")
        #expect(signIn.singleUseToken == nil)
        #expect(
            seen.withLock { $0 } == [
                "grant_type": "authorization_code", "code": "good-code", "code_verifier": verifier, "client_id": "client-1", "redirect_uri": "app:/cb",
            ])
        await #expect(throws: LatchkeyError(.invalidGrant, "")) {
            _ = try await provider.verify(ProviderCredential(authorizationCode: "used-code", codeVerifier: verifier))
        }
        let before = transport.count
        await #expect(throws: LatchkeyError(.malformedRequest, "")) {
            _ = try await provider.verify(ProviderCredential(authorizationCode: "good-code", codeVerifier: "short"))
        }
        #expect(transport.count == before)
        // Validation and revocation go to the same endpoints.
        #expect(await provider.validate(refreshToken: "rt", clientID: "client-1") == .revoked)  // the fake answers invalid_grant to anything but a code
    }

    // MARK: Microsoft

    @Test("Microsoft: iss must be the token's own tenant's issuer; keys without alg verify; tenants are allow-listed")
    func microsoft() async throws {
        let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
        let keyWithoutAlg =
            #"{"keys":[\#(Self.key.jwk.replacingOccurrences(of: #","alg":"RS256""#, with: #","issuer":"https://login.microsoftonline.com/{tenantid}/v2.0""#))]}"#
        let transport = Self.endpoints([
            "/common/v2.0/.well-known/openid-configuration": { _ in
                Self.json(
                    #"{"issuer":"https://login.microsoftonline.com/{tenantid}/v2.0","jwks_uri":"https://login.microsoftonline.com/common/discovery/v2.0/keys"}"#
                )
            },
            "/common/discovery/v2.0/keys": { _ in Self.json(keyWithoutAlg) },
        ])
        let provider = OpenIDProvider(
            configuration: .microsoft(clientIDs: ["client-1"], tenants: ["organizations"]), transport: transport, timeSource: .fixed(Self.now))
        func token(iss: String, tid: String) -> String {
            Self.key.sign(claims: Self.claims(iss: iss, extra: ["tid": tid, "ver": "2.0"]))
        }
        let signIn = try await provider.verify(ProviderCredential(idToken: token(iss: "https://login.microsoftonline.com/\(tenant)/v2.0", tid: tenant)))
        #expect(signIn.identity.tenantID == tenant)
        // Another tenant's issuer with this tid: refused.
        await #expect(throws: LatchkeyError(.unexpectedIssuer, "")) {
            _ = try await provider.verify(
                ProviderCredential(idToken: token(iss: "https://login.microsoftonline.com/11111111-2222-3333-4444-555555555555/v2.0", tid: tenant)))
        }
        // A personal account, under organizations only: refused, naming the setting.
        let personal = OpenIDProviderConfiguration.microsoftConsumersTenant
        await #expect {
            _ = try await provider.verify(ProviderCredential(idToken: token(iss: "https://login.microsoftonline.com/\(personal)/v2.0", tid: personal)))
        } throws: {
            ($0 as? LatchkeyError)?.reason.contains("microsoft.tenants") == true
        }
    }

    @Test("Microsoft in a national cloud: tokens issued under the authority's own host verify")
    func microsoftNationalCloud() async throws {
        let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
        let issuer = "https://login.microsoftonline.us/{tenantid}/v2.0"
        let key = Self.key.jwk.replacingOccurrences(of: #","alg":"RS256""#, with: #","issuer":"\#(issuer)""#)
        let transport = Self.endpoints([
            "/common/v2.0/.well-known/openid-configuration": { _ in
                Self.json(#"{"issuer":"\#(issuer)","jwks_uri":"https://login.microsoftonline.us/common/discovery/v2.0/keys"}"#)
            },
            "/common/discovery/v2.0/keys": { _ in Self.json(#"{"keys":[\#(key)]}"#) },
        ])
        let provider = OpenIDProvider(
            configuration: .microsoft(clientIDs: ["client-1"], authority: "https://login.microsoftonline.us/"), transport: transport,
            timeSource: .fixed(Self.now))
        func token(iss: String) -> String { Self.key.sign(claims: Self.claims(iss: iss, extra: ["tid": tenant, "ver": "2.0"])) }
        let signIn = try await provider.verify(ProviderCredential(idToken: token(iss: "https://login.microsoftonline.us/\(tenant)/v2.0")))
        #expect(signIn.identity.tenantID == tenant)
        await #expect(throws: LatchkeyError(.unexpectedIssuer, "")) {
            _ = try await provider.verify(ProviderCredential(idToken: token(iss: "https://login.microsoftonline.us/11111111-2222-3333-4444-555555555555/v2.0")))
        }
    }

    // MARK: Facebook

    static func debugToken(appID: String = "app-1", valid: Bool = true, type: String = "USER", expiresAt: Int = 0) -> String {
        #"{"data":{"app_id":"\#(appID)","type":"\#(type)","application":"Example","data_access_expires_at":0,"expires_at":\#(expiresAt),"is_valid":\#(valid),"scopes":["public_profile"],"user_id":"10215241773831025"}}"#
    }

    func facebook(_ debug: String, secret: String? = "secret") -> FacebookProvider {
        var configuration = FacebookConfiguration(appID: "app-1", appSecret: secret)
        configuration.graphURL = "https://graph.example.com"
        return FacebookProvider(
            configuration: configuration,
            transport: Self.endpoints([
                "/debug_token": { request in
                    // The app's own token authenticates the check.
                    request.url.contains("access_token=app-1%7Csecret") ? Self.json(debug) : Self.json(#"{"error":{"code":190}}"#, status: 400)
                },
                "/me": { _ in Self.json(#"{"id":"10215241773831025","name":"Ann Lee","email":"ann@example.com"}"#) },
            ]), timeSource: .fixed(Self.now))
    }

    @Test("Facebook classic tokens: valid for this app signs in; another app's, an invalid or an expired one is refused")
    func facebookAccessTokens() async throws {
        let signIn = try await facebook(Self.debugToken()).verify(ProviderCredential(accessToken: "user-token"))
        #expect(signIn.identity.subject == "10215241773831025")
        #expect(signIn.identity.email == "ann@example.com")
        #expect(signIn.grant == "user-token")
        await #expect(throws: LatchkeyError(.unexpectedAudience, "")) {
            _ = try await facebook(Self.debugToken(appID: "app-2")).verify(ProviderCredential(accessToken: "t"))
        }
        await #expect(throws: LatchkeyError(.invalidGrant, "")) {
            _ = try await facebook(Self.debugToken(valid: false)).verify(ProviderCredential(accessToken: "t"))
        }
        await #expect(throws: LatchkeyError(.invalidGrant, "")) {
            _ = try await facebook(Self.debugToken(type: "PAGE")).verify(ProviderCredential(accessToken: "t"))
        }
        await #expect(throws: LatchkeyError(.tokenExpired, "")) {
            _ = try await facebook(Self.debugToken(expiresAt: Int(Self.now.timeIntervalSince1970) - 1)).verify(ProviderCredential(accessToken: "t"))
        }
        await #expect(throws: LatchkeyError(.invalidConfiguration, "")) {
            _ = try await facebook(Self.debugToken(), secret: nil).verify(ProviderCredential(accessToken: "t"))
        }
        // A wrong app secret is the operator's problem: sign-ins fail as such, and validations never end sessions.
        await #expect(throws: LatchkeyError(.invalidClient, "")) {
            _ = try await facebook(Self.debugToken(), secret: "wrong").verify(ProviderCredential(accessToken: "t"))
        }
        #expect(await facebook(Self.debugToken(), secret: "wrong").validate(refreshToken: "t", clientID: "app-1") == .unreachable("invalid_client"))
        #expect(await facebook(Self.debugToken(valid: false)).validate(refreshToken: "t", clientID: "app-1") == .revoked)
        #expect(await facebook(Self.debugToken()).validate(refreshToken: "t", clientID: "app-1") == .valid)
    }

    // MARK: Dropbox

    @Test("Dropbox: a code with PKCE, then get_current_account; access tokens only when turned on")
    func dropbox() async throws {
        let account =
            #"{"account_id":"dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc","name":{"given_name":"Ann","surname":"Lee","familiar_name":"Ann","display_name":"Ann Lee","abbreviated_name":"AL"},"email":"ann@example.com","email_verified":true,"disabled":false}"#
        let transport = Self.endpoints([
            "/oauth2/token": { request in
                let fields = request.formFields
                guard fields["code_verifier"] != nil, fields["client_id"] == "app-key", fields["client_secret"] == nil else {
                    return Self.json(#"{"error":"invalid_grant","error_description":"code doesn't exist or has expired"}"#, status: 400)
                }
                return Self.json(
                    #"{"access_token":"sl.at","token_type":"bearer","expires_in":14400,"refresh_token":"rt","account_id":"dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc","uid":"1"}"#
                )
            },
            "/2/users/get_current_account": { request in
                request.headers.contains { $0.name == "Authorization" && $0.value == "Bearer sl.at" }
                    ? Self.json(account) : Self.json(#"{"error_summary":"invalid_access_token/","error":{".tag":"invalid_access_token"}}"#, status: 401)
            },
        ])
        var configuration = DropboxConfiguration(appKey: "app-key")
        configuration.apiURL = "https://api.example.com"
        let provider = DropboxProvider(configuration: configuration, transport: transport, timeSource: .fixed(Self.now))
        let signIn = try await provider.verify(ProviderCredential(authorizationCode: "c", codeVerifier: PKCE.makeVerifier(), redirectURI: "app:/cb"))
        #expect(signIn.identity.subject == "dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc")
        #expect(signIn.identity.givenName == "Ann")
        #expect(signIn.grant == "rt")
        await #expect(throws: LatchkeyError(.malformedRequest, "")) { _ = try await provider.verify(ProviderCredential(accessToken: "sl.at")) }
        configuration.acceptAccessTokens = true
        let open = DropboxProvider(configuration: configuration, transport: transport, timeSource: .fixed(Self.now))
        #expect(try await open.verify(ProviderCredential(accessToken: "sl.at")).identity.email == "ann@example.com")
        await #expect(throws: LatchkeyError(.invalidGrant, "")) { _ = try await open.verify(ProviderCredential(accessToken: "stolen-elsewhere")) }
    }
}
