import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import Testing

/// Every module of ``ProviderModules/all`` against its stand-in in the emulator, found by the module's name: each kind
/// of credential an app can send (an ID token with its nonce, a code with its PKCE verifier, an access token) signs in
/// when the module takes it and is refused when it does not, and the browser flow runs where the module's provider
/// offers it. Nothing here names a provider: a module added to the registry is covered as it is, and one whose stand-in
/// is missing, or mints less than the module takes, fails.
@Suite("Server: every provider module against its emulator stand-in")
struct ProviderContractTests {
    /// One module and one kind of credential.
    struct Case: Sendable, CustomTestStringConvertible {
        let module: String
        let credential: CredentialKind
        var testDescription: String { "\(module): \(credential.label)" }
    }

    static let modules = ProviderModules.all.map { $0.name }
    static let cases = modules.flatMap { module in CredentialKind.allCases.map { Case(module: module, credential: $0) } }
    /// An app registered at every stand-in that no server configuration lists.
    static let stranger = "com.example.stranger"

    // MARK: What a provider takes, and what its app SDK hands the app

    /// The kinds `provider` takes (``IdentityProvider/credentialKinds``).
    static func accepted(by provider: any IdentityProvider) -> Set<CredentialKind> { provider.credentialKinds }

    /// The kinds the body fields `provider` names for people take (``IdentityProvider/acceptedCredentials``: one `{…}`
    /// per way to sign in), which must be the kinds it takes.
    static func named(by provider: any IdentityProvider) -> Set<CredentialKind> {
        var kinds: Set<CredentialKind> = []
        for group in provider.acceptedCredentials.components(separatedBy: " or ") {
            let fields = Set(group.split { !$0.isLetter }.map(String.init))
            if !fields.isDisjoint(with: ["idToken", "identityToken"]) { kinds.insert(.idToken) }
            if fields.contains("codeVerifier") { kinds.insert(.authorizationCode) }
            if fields.contains("accessToken") { kinds.insert(.accessToken) }
        }
        return kinds
    }

    /// Whether `provider` takes Apple's body: `identityToken`, with the code Apple's SDK hands beside it.
    static func takesAppleBody(_ provider: any IdentityProvider) -> Bool { provider.signInBody == AppleSignInRequest.self }

    /// A fresh credential of `kind` from the emulator's stand-in for `provider`, for the user with `subjects`, as the body
    /// the app sends: the field names are the ones the provider says it takes.
    static func body(
        _ provider: String, _ kind: CredentialKind, _ harness: ServerHarness, subjects: [String: Any], clientID: String = EmulatorHarness.providerClientID
    ) async throws -> [String: any Sendable] {
        let sub = try #require(subjects[provider] as? String, "the emulator's user has no \(provider) subject")
        let apple = takesAppleBody(try #require(harness.server.providers[provider], "\(provider) is not configured"))
        switch kind {
        case .authorizationCode:
            let verifier = PKCE.makeVerifier()
            let minted = try await harness.emulator.providerSignIn(provider, sub: sub, clientID: clientID, ["codeChallenge": PKCE.challenge(for: verifier)])
            return ["authorizationCode": try #require(minted["authorizationCode"] as? String), "codeVerifier": verifier, "clientId": clientID]
        case .idToken:
            let nonce = PKCE.makeVerifier()
            let minted = try await harness.emulator.providerSignIn(provider, sub: sub, clientID: clientID, ["nonce": sha256Hex(nonce)])
            let token = try #require((minted["idToken"] ?? minted["identityToken"]) as? String, "\(minted)")
            var body: [String: any Sendable] = [apple ? "identityToken" : "idToken": token, "rawNonce": nonce]
            // The code the SDK hands with the ID token, where the provider takes them together (Apple).
            if apple, let code = minted["authorizationCode"] as? String { body["authorizationCode"] = code }
            return body
        case .accessToken:
            let minted = try await harness.emulator.providerSignIn(provider, sub: sub, clientID: clientID)
            return ["accessToken": try #require(minted["accessToken"] as? String)]
        }
    }

    /// A made-up credential of `kind`, for a provider that does not take it.
    static func madeUp(_ kind: CredentialKind) -> [String: any Sendable] {
        switch kind {
        case .idToken: ["idToken": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "rawNonce": "made-up-nonce"]
        case .authorizationCode: ["authorizationCode": "made-up-code", "codeVerifier": PKCE.makeVerifier()]
        case .accessToken: ["accessToken": "made-up-access-token"]
        }
    }

    // MARK: The stand-in

    /// The emulator's stand-in for `module`; a module without one fails the test that asks.
    static func standIn(_ module: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> EmulatedProvider {
        try #require(
            EmulatedProvider.named(module),
            "the emulator has no stand-in named \(module): add a ProviderProfile for it to ProviderProfiles.all (Sources/LatchkeyEmulator)",
            sourceLocation: sourceLocation)
    }

    @Test("the emulator stands in for the module, under the module's name", arguments: modules)
    func standIn(module: String) throws {
        let standIn = try Self.standIn(module)
        #expect(standIn.displayName == ProviderModules.all.first { $0.name == module }?.displayName)
        #expect(!standIn.appCredentials.isEmpty)
    }

    @Test("what a module's provider tells people it takes is what it takes", arguments: modules)
    func acceptedCredentialsSayWhatItTakes(module: String) async throws {
        try await ServerHarness.with { harness in
            let provider = try #require(harness.server.providers[module], "\(module) is not configured by its emulatedSettings")
            #expect(!provider.credentialKinds.isEmpty)
            #expect(Self.named(by: provider) == Self.accepted(by: provider), "\(module): \(provider.acceptedCredentials)")
        }
    }

    @Test("every stand-in but the generic OpenID Connect issuer is a module's")
    func noStandInWithoutModule() {
        #expect(Set(EmulatedProvider.all.map(\.name)).subtracting(Self.modules) == ["oidc"])
    }

    // MARK: Each kind of credential

    @Test(
        "a credential the module takes signs in, and again finds the same user (a foreign app's ID token, a replayed code, a made-up access token are refused); one it does not take is invalid_request",
        arguments: cases)
    func credential(_ test: Case) async throws {
        var emulator = EmulatorHarness.configuration()
        emulator.addClientEverywhere(Self.stranger)
        emulator.addApp(clientID: Self.stranger, teamID: Fixtures.teamID)
        try await ServerHarness.with(emulator: emulator) { harness in
            let path = "/v1/auth/\(test.module)"
            let standIn = try Self.standIn(test.module)
            let provider = try #require(harness.server.providers[test.module], "\(test.module) is not configured by its emulatedSettings")
            guard Self.accepted(by: provider).contains(test.credential) else {
                let refused = try await harness.post(path, json: Self.madeUp(test.credential))
                #expect(refused.status == 400 && refused.error == "invalid_request", "\(test.module) takes \(provider.acceptedCredentials): \(refused.text)")
                return
            }
            try #require(
                standIn.appCredentials.contains(test.credential.minted),
                "\(test.module) takes \(provider.acceptedCredentials), but the emulator's stand-in hands an app only \(standIn.appCredentials.map(\.rawValue).sorted()): its ProviderProfile's appSignIn must mint it"
            )
            let subjects = try await ProviderEndToEndTests.newUser(harness)
            let body = try await Self.body(test.module, test.credential, harness, subjects: subjects)
            let first = try await harness.post(path, json: body)
            #expect(first.status == 200, "\(first.text)")
            let created = try first.decode(SignInResponse.self)
            #expect(created.isNewUser)
            #expect(created.user.identities.map(\.provider) == [test.module])
            #expect(created.user.identities.first?.subject == subjects[test.module] as? String)
            let second = try await harness.post(path, json: try await Self.body(test.module, test.credential, harness, subjects: subjects))
            try await harness.expectReturningUser(second, created)

            switch test.credential {
            case .idToken:
                let foreign = try await harness.post(
                    path, json: try await Self.body(test.module, .idToken, harness, subjects: subjects, clientID: Self.stranger))
                #expect(foreign.status == 401 && foreign.error == "unexpected_audience", "\(foreign.text)")
            case .authorizationCode:
                let replayed = try await harness.post(path, json: body)
                #expect(replayed.status == 400 && replayed.error == "invalid_grant", "\(replayed.text)")
            case .accessToken:
                let madeUp = try await harness.post(path, json: Self.madeUp(.accessToken))
                #expect(madeUp.status == 400 && madeUp.error == "invalid_grant", "\(madeUp.text)")
            }
        }
    }

    // MARK: The browser flow

    @Test(
        "the browser flow signs in through the stand-in's page where the module's provider offers it; elsewhere the chooser leaves it out and /oauth2/authorize refuses it",
        arguments: modules)
    func browserFlow(module: String) async throws {
        _ = try Self.standIn(module)
        try await BrowserFlowTests.with { harness in
            let provider = try #require(harness.server.providers[module], "\(module) is not configured by its emulatedSettings")
            let chooser = try await harness.send("GET", "/oauth2/authorize?" + formURLEncoded(BrowserFlowTests.AppRequest(provider: nil).query))
            #expect(chooser.text.contains("provider=\(module)\"") == provider.signsInWithBrowser, "\(chooser.text)")
            guard provider.signsInWithBrowser else {
                let answer = try await BrowserFlowTests.run(harness, BrowserFlowTests.AppRequest(provider: module))
                #expect(BrowserFlowTests.fields(of: answer.headers["location"] ?? "")["error"] == "invalid_request", "\(answer.status) \(answer.text)")
                return
            }
            try await BrowserFlowTests.expectSignsIn(harness, provider: module)
        }
    }
}

extension CredentialKind {
    /// How the suite's test cases name it.
    var label: String {
        switch self {
        case .idToken: "ID token with nonce"
        case .authorizationCode: "code with PKCE verifier"
        case .accessToken: "access token"
        }
    }

    /// What the provider's app SDK hands the app for it, in the emulator's words.
    var minted: EmulatedProvider.AppCredential {
        switch self {
        case .idToken: .idToken
        case .authorizationCode: .authorizationCode
        case .accessToken: .accessToken
        }
    }
}
