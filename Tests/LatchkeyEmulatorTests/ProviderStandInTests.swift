import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyTestSupport
import Testing

@Suite("Emulator: Microsoft, Facebook, Dropbox and OpenID Connect stand-ins")
struct ProviderStandInTests {
    static let client = EmulatorHarness.providerClientID
    static let redirect = EmulatorHarness.redirectURI
    static let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"

    func subjects(_ user: [String: Any]) throws -> [String: String] { try #require(user["subjects"] as? [String: String]) }

    func claims(_ token: String) -> [String: Any] { jsonSegment(token.split(separator: ".")[1]) }

    func exchange(_ harness: EmulatorHarness, _ path: String, code: String, verifier: String?, redirect: String? = nil) async throws
        -> EmulatorHarness.Answer
    {
        var form: [(String, String)] = [("client_id", Self.client), ("grant_type", "authorization_code"), ("code", code)]
        if let verifier { form.append(("code_verifier", verifier)) }
        if let redirect { form.append(("redirect_uri", redirect)) }
        return try await harness.send("POST", path, form: form)
    }

    func refresh(_ harness: EmulatorHarness, _ path: String, _ token: String) async throws -> EmulatorHarness.Answer {
        try await harness.send("POST", path, form: [("client_id", Self.client), ("grant_type", "refresh_token"), ("refresh_token", token)])
    }

    @Test("a user answers its subject at every provider and any of them finds it; unknown providers and clients are refused")
    func subjectsAndControlErrors() async throws {
        try await EmulatorHarness.with { harness in
            let user = try await harness.createUserAnswer(["microsoftTenant": Self.tenant])
            let subjects = try subjects(user)
            // A subject at the stand-in of every module of the server's registry, and at the generic OpenID Connect issuer.
            let standIns = Set(ProviderModules.all.map { $0.name } + ["oidc"])
            #expect(Set(subjects.keys) == standIns)
            #expect(subjects["line"]?.wholeMatch(of: /U[0-9a-f]{32}/) != nil)
            #expect(subjects["github"]?.wholeMatch(of: /[1-9][0-9]{7,8}/) != nil)
            #expect(subjects["apple"] == user["sub"] as? String)
            #expect(subjects["facebook"]?.allSatisfy(\.isNumber) == true)
            #expect(subjects["dropbox"]?.wholeMatch(of: /dbid:[A-Za-z0-9_-]{40}/) != nil)
            #expect(user["microsoftTenant"] as? String == Self.tenant)
            let personal = try await harness.createUserAnswer(["email": "p@example.com"])
            #expect(personal["microsoftTenant"] as? String == "9188040d-6c67-4c5b-b112-36a304b66dad")
            for (provider, sub) in subjects {
                let signIn = try await harness.providerSignIn(provider == "apple" ? "oidc" : provider, sub: sub)
                #expect(signIn["sub"] as? String == subjects[provider == "apple" ? "oidc" : provider], "\(provider)")
            }
            let apple = try await harness.send("POST", "/emulator/authorizations", json: ["sub": subjects["dropbox"]!, "clientId": Fixtures.bundleID])
            #expect(apple.json["identityToken"] != nil)
            let unknown = try await harness.send(
                "POST", "/emulator/authorizations", json: ["provider": "myspace", "sub": subjects["google"]!, "clientId": "x"])
            #expect(unknown.status == 400)
            let unregistered = try await harness.send(
                "POST", "/emulator/authorizations", json: ["provider": "microsoft", "sub": subjects["google"]!, "clientId": "not-registered"])
            #expect(unregistered.status == 400)
            #expect(unregistered.json["error"] as? String == "invalid_request")
            #expect(try await harness.send("POST", "/emulator/users", json: ["microsoftTenant": "contoso"]).status == 400)
        }
    }

    @Test("Microsoft: discovery issuers per tenant, keys without alg but with issuer, tokens verified against tid")
    func microsoftDiscoveryAndToken() async throws {
        try await EmulatorHarness.with { harness in
            let common = try await harness.send("GET", "/microsoft/common/v2.0/.well-known/openid-configuration").json
            #expect(common["issuer"] as? String == "https://login.microsoftonline.com/{tenantid}/v2.0")
            #expect(common["jwks_uri"] as? String == harness.emulator.baseURL + "/microsoft/common/discovery/v2.0/keys")
            let specific = try await harness.send("GET", "/microsoft/\(Self.tenant)/v2.0/.well-known/openid-configuration").json
            #expect(specific["issuer"] as? String == "https://login.microsoftonline.com/\(Self.tenant)/v2.0")
            #expect(try await harness.send("GET", "/microsoft/not-a-tenant/v2.0/.well-known/openid-configuration").status == 400)
            let keys = try #require(try await harness.send("GET", "/microsoft/common/discovery/v2.0/keys").json["keys"] as? [[String: Any]])
            #expect(!keys.isEmpty)
            #expect(keys.allSatisfy { $0["alg"] == nil && $0["issuer"] as? String == "https://login.microsoftonline.com/{tenantid}/v2.0" })

            let sub = try subjects(try await harness.createUserAnswer(["microsoftTenant": Self.tenant]))["microsoft"]!
            let signIn = try await harness.providerSignIn("microsoft", sub: sub, ["nonce": "ms-nonce"])
            let verifier = IdentityTokenVerifier(policy: .microsoft(clientIDs: [Self.client]), keys: harness.keys(at: "/microsoft/common/discovery/v2.0/keys"))
            let identity = try await verifier.verify(try #require(signIn["idToken"] as? String), expecting: .init(rawNonce: "ms-nonce"))
            #expect(identity.subject == sub)
            #expect(identity.tenantID == Self.tenant)
            #expect(identity.issuer == "https://login.microsoftonline.com/\(Self.tenant)/v2.0")
            #expect(identity.emailVerified == true)
            let claims = claims(signIn["idToken"] as! String)
            #expect(claims["ver"] as? String == "2.0")
            #expect(claims["preferred_username"] as? String == "jane@example.com")
            #expect(UUID(uuidString: claims["oid"] as? String ?? "") != nil)
        }
    }

    @Test("Microsoft: PKCE code exchange, wrong verifier, replay, foreign tenant and refresh")
    func microsoftCodeExchange() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try subjects(try await harness.createUserAnswer(["microsoftTenant": Self.tenant]))["microsoft"]!
            let verifier = PKCE.makeVerifier()
            func code() async throws -> String {
                try #require(
                    try await harness.providerSignIn("microsoft", sub: sub, ["nonce": "n-1", "codeChallenge": PKCE.challenge(for: verifier)])[
                        "authorizationCode"] as? String)
            }
            let path = "/microsoft/common/oauth2/v2.0/token"
            let wrong = try await exchange(harness, path, code: try await code(), verifier: PKCE.makeVerifier())
            #expect(wrong.status == 400)
            #expect(wrong.json["error"] as? String == "invalid_grant")
            #expect(try await exchange(harness, path, code: try await code(), verifier: nil).json["error"] as? String == "invalid_grant")
            let otherTenant = try await exchange(harness, "/microsoft/consumers/oauth2/v2.0/token", code: try await code(), verifier: verifier)
            #expect(otherTenant.json["error"] as? String == "invalid_grant")

            let good = try await code()
            let answer = try await exchange(harness, path, code: good, verifier: verifier)
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.json["token_type"] as? String == "Bearer")
            #expect((answer.json["scope"] as? String)?.contains("offline_access") == true)
            #expect(answer.headers["cache-control"] == "no-store")
            let idToken = try #require(answer.json["id_token"] as? String)
            #expect(claims(idToken)["nonce"] as? String == "n-1")
            #expect(claims(idToken)["tid"] as? String == Self.tenant)
            let replay = try await exchange(harness, path, code: good, verifier: verifier)
            #expect(replay.status == 400)
            #expect(replay.json["error"] as? String == "invalid_grant")

            let refreshed = try await refresh(harness, "/microsoft/\(Self.tenant)/oauth2/v2.0/token", try #require(answer.json["refresh_token"] as? String))
            #expect(refreshed.status == 200, "\(refreshed.text)")
            #expect(refreshed.json["refresh_token"] as? String != nil)
            #expect(try await refresh(harness, path, "M.C5-bogus").json["error"] as? String == "invalid_grant")
        }
    }

    @Test("Google: a control-API sign-in's code redeems at /google/token; a revoked refresh token is invalid_grant")
    func googleRevoke() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try subjects(try await harness.createUserAnswer())["google"]!
            let verifier = PKCE.makeVerifier()
            let signIn = try await harness.providerSignIn(
                "google", sub: sub, ["nonce": "g-n", "codeChallenge": PKCE.challenge(for: verifier), "redirectUri": Self.redirect])
            let google = IdentityTokenVerifier(policy: .google(clientIDs: [Self.client]), keys: harness.keys(at: "/google/oauth2/v3/certs"))
            #expect(try await google.verify(signIn["idToken"] as! String, expecting: .init(rawNonce: "g-n")).subject == sub)
            let code = try #require(signIn["authorizationCode"] as? String)
            #expect(try await exchange(harness, "/google/token", code: code, verifier: verifier).json["error"] as? String == "redirect_uri_mismatch")
            let answer = try await exchange(harness, "/google/token", code: code, verifier: verifier, redirect: Self.redirect)
            #expect(answer.status == 200, "\(answer.text)")
            #expect(claims(answer.json["id_token"] as! String)["nonce"] as? String == "g-n")
            let refreshToken = try #require(answer.json["refresh_token"] as? String)
            #expect(try await refresh(harness, "/google/token", refreshToken).status == 200)
            #expect(try await harness.send("POST", "/google/revoke", form: [("token", refreshToken)]).status == 200)
            let refused = try await refresh(harness, "/google/token", refreshToken)
            #expect(refused.status == 400)
            #expect(refused.json["error"] as? String == "invalid_grant")
            let unknown = try await harness.send("POST", "/google/revoke", form: [("token", "nope")])
            #expect(unknown.status == 400)
            #expect(unknown.json["error"] as? String == "invalid_token")
            let revokes = try await harness.requestLog().filter { $0["endpoint"] as? String == "/google/revoke" }
            #expect(revokes.map { $0["status"] as? Int } == [200, 400])
            #expect(revokes.first?["clientId"] as? String == Self.client)
        }
    }

    @Test("Facebook: Limited Login token verifies; debug_token valid, foreign app token, unknown token, after DELETE permissions")
    func facebook() async throws {
        try await EmulatorHarness.with { harness in
            let discovery = try await harness.send("GET", "/facebook/.well-known/openid-configuration/").json
            #expect(discovery["issuer"] as? String == "https://www.facebook.com")
            #expect(discovery["jwks_uri"] as? String == harness.emulator.baseURL + "/facebook/.well-known/oauth/openid/jwks/")
            let sub = try subjects(try await harness.createUserAnswer())["facebook"]!
            let signIn = try await harness.providerSignIn("facebook", sub: sub, ["nonce": "fb-nonce"])
            let policy = IdentityTokenPolicy(providerName: "Facebook", issuers: ["https://www.facebook.com"], audiences: [Self.client])
            let verifier = IdentityTokenVerifier(policy: policy, keys: harness.keys(at: "/facebook/.well-known/oauth/openid/jwks/"))
            let idToken = try #require(signIn["idToken"] as? String)
            #expect(try await verifier.verify(idToken, expecting: .init(rawNonce: "fb-nonce")).subject == sub)
            #expect(claims(idToken)["jti"] is String)

            let token = try #require(signIn["accessToken"] as? String)
            let appToken = "\(Self.client)|\(Self.client)-secret"
            func debug(_ input: String, app: String = appToken) async throws -> EmulatorHarness.Answer {
                try await harness.send(
                    "GET", "/facebook/debug_token?input_token=\(input)&access_token=\(app.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")
            }
            let valid = try #require(try await debug(token).json["data"] as? [String: Any])
            #expect(valid["is_valid"] as? Bool == true)
            #expect(valid["app_id"] as? String == Self.client)
            #expect(valid["user_id"] as? String == sub)
            #expect(valid["type"] as? String == "USER")
            #expect(valid["expires_at"] is Int && valid["data_access_expires_at"] is Int)
            #expect(valid["scopes"] as? [String] == ["public_profile", "email"])
            let wrongApp = try await debug(token, app: "\(Self.client)|wrong")
            #expect(wrongApp.status == 400)
            let error = try #require(wrongApp.json["error"] as? [String: Any])
            #expect(error["type"] as? String == "OAuthException" && error["code"] as? Int == 190)
            let unknown = try await debug("EAAbogus")
            #expect(unknown.status == 200)
            #expect((unknown.json["data"] as? [String: Any])?["is_valid"] as? Bool == false)

            let me = try await harness.send("GET", "/facebook/me?fields=id,name,email&access_token=\(token)").json
            #expect(me["id"] as? String == sub && me["name"] as? String == "Jane Appleseed" && me["email"] as? String == "jane@example.com")
            let removed = try await harness.send("DELETE", "/facebook/me/permissions?access_token=\(token)")
            #expect(removed.json["success"] as? Bool == true)
            let after = try #require(try await debug(token).json["data"] as? [String: Any])
            #expect(after["is_valid"] as? Bool == false)
            #expect(after["error"] is [String: Any])
            #expect(try await harness.send("GET", "/facebook/me?access_token=\(token)").status == 400)
            let log = try await harness.requestLog().filter { $0["endpoint"] as? String == "/facebook/debug_token" }
            #expect(log.count == 4)
            #expect(log.first?["clientId"] as? String == Self.client)
        }
    }

    @Test("Dropbox: PKCE exchange without a secret, replay, get_current_account, revoke")
    func dropbox() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try subjects(try await harness.createUserAnswer())["dropbox"]!
            let verifier = PKCE.makeVerifier()
            let signIn = try await harness.providerSignIn(
                "dropbox", sub: sub, ["codeChallenge": PKCE.challenge(for: verifier), "redirectUri": Self.redirect])
            let code = try #require(signIn["authorizationCode"] as? String)
            #expect(signIn["accessToken"] is String)
            let wrong = try await exchange(harness, "/dropbox/oauth2/token", code: code, verifier: PKCE.makeVerifier(), redirect: Self.redirect)
            #expect(wrong.json["error"] as? String == "invalid_grant")
            let answer = try await exchange(harness, "/dropbox/oauth2/token", code: code, verifier: verifier, redirect: Self.redirect)
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.json["token_type"] as? String == "bearer")
            #expect(answer.json["account_id"] as? String == sub)
            #expect(answer.json["uid"] is String && answer.json["expires_in"] is Int)
            let replay = try await exchange(harness, "/dropbox/oauth2/token", code: code, verifier: verifier, redirect: Self.redirect)
            #expect(replay.status == 400)
            #expect(replay.json["error_description"] as? String == "code doesn't exist or has expired")

            let access = try #require(answer.json["access_token"] as? String)
            let bearer = [("Authorization", "Bearer \(access)")]
            let account = try await harness.send("POST", "/dropbox/2/users/get_current_account", rawBody: "null", headers: bearer)
            #expect(account.status == 200, "\(account.text)")
            #expect(account.json["account_id"] as? String == sub)
            #expect((account.json["name"] as? [String: Any])?["display_name"] as? String == "Jane Appleseed")
            #expect((account.json["account_type"] as? [String: Any])?[".tag"] as? String == "basic")
            #expect(account.json["email_verified"] as? Bool == true)
            let bad = try await harness.send("POST", "/dropbox/2/users/get_current_account", headers: [("Authorization", "Bearer sl.nope")])
            #expect(bad.status == 401)
            #expect((bad.json["error"] as? [String: Any])?[".tag"] as? String == "invalid_access_token")

            let revoked = try await harness.send("POST", "/dropbox/2/auth/token/revoke", headers: bearer)
            #expect(revoked.status == 200)
            #expect(revoked.text == "null")
            #expect(try await harness.send("POST", "/dropbox/2/users/get_current_account", headers: bearer).status == 401)
            let refreshToken = try #require(answer.json["refresh_token"] as? String)
            #expect(try await refresh(harness, "/dropbox/oauth2/token", refreshToken).json["error"] as? String == "invalid_grant")
        }
    }

    @Test("OpenID Connect: issuer from the request's base URL, token verified, exchange, refresh and revoke")
    func oidc() async throws {
        try await EmulatorHarness.with { harness in
            let issuer = harness.emulator.baseURL + "/oidc"
            let discovery = try await harness.send("GET", "/oidc/.well-known/openid-configuration").json
            #expect(discovery["issuer"] as? String == issuer)
            #expect(discovery["token_endpoint"] as? String == issuer + "/token")
            #expect(discovery["revocation_endpoint"] as? String == issuer + "/revoke")
            #expect(discovery["code_challenge_methods_supported"] as? [String] == ["S256"])
            let sub = try subjects(try await harness.createUserAnswer())["oidc"]!
            let verifier = PKCE.makeVerifier()
            let signIn = try await harness.providerSignIn("oidc", sub: sub, ["nonce": "o-n", "codeChallenge": PKCE.challenge(for: verifier)])
            let policy = IdentityTokenPolicy(providerName: "OIDC", issuers: [issuer], audiences: [Self.client])
            let tokens = IdentityTokenVerifier(policy: policy, keys: harness.keys(at: "/oidc/jwks"))
            #expect(try await tokens.verify(signIn["idToken"] as! String, expecting: .init(rawNonce: "o-n")).subject == sub)
            let code = try #require(signIn["authorizationCode"] as? String)
            let answer = try await exchange(harness, "/oidc/token", code: code, verifier: verifier)
            #expect(answer.status == 200, "\(answer.text)")
            let identity = try await tokens.verify(
                answer.json["id_token"] as! String, expecting: .init(rawNonce: "o-n", accessToken: answer.json["access_token"] as? String))
            #expect(identity.emailVerified == true)
            #expect(try await exchange(harness, "/oidc/token", code: code, verifier: verifier).json["error"] as? String == "invalid_grant")
            let refreshToken = try #require(answer.json["refresh_token"] as? String)
            #expect(try await refresh(harness, "/oidc/token", refreshToken).status == 200)
            let revoke = try await harness.send("POST", "/oidc/revoke", form: [("client_id", Self.client), ("token", refreshToken)])
            #expect(revoke.status == 200)
            #expect(try await refresh(harness, "/oidc/token", refreshToken).json["error"] as? String == "invalid_grant")
            #expect(try await harness.send("POST", "/oidc/revoke", form: [("client_id", "nobody"), ("token", "x")]).status == 401)
        }
    }

    @Test("faults, the request log and key rotation cover the new endpoints")
    func faultsLogAndRotation() async throws {
        try await EmulatorHarness.with { harness in
            _ = try await harness.send("POST", "/emulator/faults", json: ["endpoint": "/dropbox/oauth2/token", "kind": "status", "status": 503, "count": 1])
            let faulted = try await harness.send("POST", "/dropbox/oauth2/token", form: [("client_id", Self.client), ("grant_type", "authorization_code")])
            #expect(faulted.status == 503)
            let next = try await harness.send("POST", "/dropbox/oauth2/token", form: [("client_id", Self.client), ("grant_type", "authorization_code")])
            #expect(next.status == 400)
            let entries = try await harness.requestLog().filter { $0["endpoint"] as? String == "/dropbox/oauth2/token" }
            #expect(entries.map { $0["status"] as? Int } == [503, 400])
            #expect(entries.last?["clientId"] as? String == Self.client)
            #expect(entries.last?["grantType"] as? String == "authorization_code")
            #expect(entries.last?["error"] as? String == "invalid_grant")

            let before = try await harness.send("GET", "/microsoft/common/discovery/v2.0/keys").json["keys"] as? [[String: Any]]
            let rotated = try await harness.send("POST", "/emulator/keys/rotate", json: ["provider": "microsoft"])
            #expect(rotated.status == 200)
            let after = try await harness.send("GET", "/microsoft/common/discovery/v2.0/keys").json["keys"] as? [[String: Any]]
            #expect(before?.count == 1 && after?.count == 2)
            // The rotation answers the keys as the route publishes them: no `alg`, each with the issuer template.
            let answered = try #require(rotated.json["keys"] as? [[String: Any]])
            #expect(answered.count == 2)
            #expect(answered.allSatisfy { $0["alg"] == nil && $0["issuer"] as? String == "https://login.microsoftonline.com/{tenantid}/v2.0" })
            #expect(Set(answered.compactMap { $0["kid"] as? String }) == Set((after ?? []).compactMap { $0["kid"] as? String }))
            #expect(try await harness.send("GET", "/auth/keys").json["keys"].map { ($0 as? [Any])?.count } == 1)
            #expect(try await harness.send("POST", "/emulator/keys/rotate", json: ["provider": "dropbox"]).status == 400)
            #expect(try await harness.send("POST", "/emulator/keys/rotate").status == 200)
            #expect(try await harness.requestLog().contains { $0["endpoint"] as? String == "/microsoft/common/discovery/v2.0/keys" })
        }
    }
}
