import Foundation
import Hummingbird
import HummingbirdAuth
import LatchkeyBackend
import LatchkeyBackendHummingbird
import LatchkeyClient
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyMail
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import LatchkeyTestSupport
import Logging
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Every ```swift block in a `///` comment under `Sources/` is copied here line for line, with just enough set-up
/// around it to compile and, where that is cheap and offline, to run against fixtures or the in-process emulator.
/// `examplesAreCopiedHere` fails when a documented example and its copy here drift apart.
@Suite("Documentation examples", .timeLimit(.minutes(3)))
struct DocumentationExamplesTests {
    // MARK: Keeping docs and tests together

    @Test("every ```swift block in a /// comment under Sources/ appears here, line for line and in order")
    func examplesAreCopiedHere() throws {
        let thisFile = URL(fileURLWithPath: #filePath)
        let root = thisFile.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let here = try String(contentsOf: thisFile, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(Self.trimmed)
        let examples = try Self.documentationExamples(under: root.appendingPathComponent("Sources"))
        #expect(!examples.isEmpty, "found no ```swift blocks under \(root.path)/Sources")
        for example in examples {
            #expect(!example.lines.isEmpty, "\(example.location): the example is empty")
            let copied = here.indices.contains { start in here[start...].starts(with: example.lines) }
            #expect(
                copied,
                "\(example.location): this example is not copied verbatim into DocumentationExamplesTests.swift:\n\(example.lines.joined(separator: "\n"))")
        }
    }

    struct Example {
        var location: String
        var lines: [String] = []
    }

    /// The non-empty, trimmed code lines of each ```swift block in `///` comments of the `.swift` files under `directory`.
    static func documentationExamples(under directory: URL) throws -> [Example] {
        guard let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else { return [] }
        var examples: [Example] = []
        for case let file as URL in files where file.pathExtension == "swift" {
            let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            var current: Example?
            for (number, line) in lines.enumerated() {
                let code = trimmed(line)
                guard code.hasPrefix("///") else {
                    if let open = current { Issue.record("\(open.location): the ```swift block is not closed") }
                    current = nil
                    continue
                }
                let text = trimmed(code.dropFirst(3))
                if current == nil {
                    if text == "```swift" { current = Example(location: "\(file.path):\(number + 1)") }
                } else if text == "```" {
                    examples.append(current!)
                    current = nil
                } else if !text.isEmpty {
                    current!.lines.append(text)
                }
            }
            if let open = current { Issue.record("\(open.location): the ```swift block is not closed") }
        }
        return examples
    }

    static func trimmed(_ line: some StringProtocol) -> String { line.trimmingCharacters(in: .whitespaces) }

    @Test("the README's backend example (the ```swift block after its `compiled:` marker) appears here, line for line")
    func readmeBackendExampleIsCopiedHere() throws {
        let thisFile = URL(fileURLWithPath: #filePath)
        let root = thisFile.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        let marker = try #require(readme.firstIndex { $0.contains("<!-- compiled:") }, "README.md has no compiled: marker")
        let start = try #require(readme[marker...].firstIndex { Self.trimmed($0) == "```swift" })
        let end = try #require(readme[(start + 1)...].firstIndex { Self.trimmed($0) == "```" })
        let lines = readme[(start + 1)..<end].map(Self.trimmed).filter { !$0.isEmpty }
        let here = try String(contentsOf: thisFile, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(Self.trimmed)
        #expect(lines.count > 5)
        #expect(here.indices.contains { here[$0...].starts(with: lines) }, "README.md's backend example is not copied verbatim here")
    }

    // MARK: LatchkeyModels

    @Test("PKCE.swift: a verifier, its S256 challenge, and the check")
    func pkce() {
        let verifier = PKCE.makeVerifier()
        let challenge = PKCE.challenge(for: verifier)  // send with the authorization request
        let ok = PKCE.verify(verifier: verifier, challenge: challenge, method: .s256)
        #expect(ok)
        #expect(PKCE.isValidVerifier(verifier))
    }

    // MARK: LatchkeyCore

    @Test("IdentityTokenPolicy.swift: Apple's policy for a bundle id and a Services ID")
    func identityTokenPolicy() {
        let policy = IdentityTokenPolicy.apple(clientIDs: ["com.example.app", "com.example.web"])
        #expect(policy.audiences == ["com.example.app", "com.example.web"])
        #expect(policy.issuers.contains("https://appleid.apple.com"))
    }

    @Test("VerificationKeySet.swift: a key set parsed from a JWKS document")
    func verificationKeySet() async throws {
        let data = Data(jwks(Fixtures.appleKey).utf8)
        let keys = try await VerificationKeySet(jwksJSON: Array(data))
        let key = keys["W6WcOKB"]
        #expect(key?.algorithm == "RS256")
        #expect(keys.keyIDs == ["W6WcOKB"])
    }

    @Test("IdentityTokenVerifier.swift: an identity token from the emulator, verified with its nonce")
    func identityTokenVerifier() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            let nonce = "documentation-nonce"
            let token = try await harness.nativeSignIn(sub: sub, nonce: nonce).identityToken
            let appleKeys = harness.keys
            let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.example.app"]), keys: appleKeys)
            let identity = try await verifier.verify(token, expecting: .init(rawNonce: nonce))
            print(identity.subject)
            #expect(identity.subject == sub)
        }
    }

    // MARK: LatchkeyProviders

    @Test("JWKSCache.swift: a cache of Apple's keys behind a verifier (built only: verifying would fetch from Apple)")
    func jwksCache() {
        let apple = JWKSCache(url: "https://appleid.apple.com/auth/keys", transport: AsyncHTTPClientTransport())
        let verifier = IdentityTokenVerifier(policy: .apple(clientIDs: ["com.example.app"]), keys: apple)
        #expect(apple.url == "https://appleid.apple.com/auth/keys")
        #expect(verifier.policy.audiences == ["com.example.app"])
    }

    @Test("AppleClientSecret.swift: a client secret signed with the fixture .p8, then served from the cache")
    func appleClientSecret() async throws {
        let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        let secrets = try AppleClientSecretProvider(credentials: credentials, clientID: "com.example.app")
        let secret = try await secrets.secret()
        let segments = secret.split(separator: ".")
        try #require(segments.count == 3)
        #expect(jsonSegment(segments[0])["kid"] as? String == Fixtures.keyID)
        #expect(jsonSegment(segments[1])["iss"] as? String == Fixtures.teamID)
        #expect(jsonSegment(segments[1])["sub"] as? String == "com.example.app")
        #expect(try await secrets.secret() == secret)
    }

    @Test("AppleClient.swift: a code exchange, against the emulator instead of Apple")
    func appleClient() async throws {
        try await EmulatorHarness.with { harness in
            let sub = try await harness.createUser()
            let code = try await harness.nativeSignIn(sub: sub).code
            let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
            let config = AppleConfiguration(credentials: credentials, clientIDs: ["com.example.app"], baseURL: harness.emulator.baseURL)
            let apple = try AppleClient(configuration: config)
            let tokens = try await apple.exchangeCode(code, clientID: "com.example.app")
            #expect(tokens.refreshToken != nil)
            #expect(tokens.idToken != nil)
        }
    }

    // MARK: LatchkeyEmulator

    @Test("Emulator.swift: the emulator started on loopback serves Apple's endpoints")
    func emulator() async throws {
        let configuration = EmulatorHarness.configuration()
        let emulator = try await Emulator.start(configuration: configuration)
        defer { Task { await emulator.stop() } }
        print(emulator.baseURL)  // http://127.0.0.1:53127
        #expect(emulator.baseURL == "http://127.0.0.1:\(emulator.port)")
        let keys = try await AsyncHTTPClientTransport().send(OutboundRequest(url: emulator.baseURL + "/auth/keys"))
        #expect(keys.status == 200)
    }

    @Test("EmulatorConfiguration.swift: a team and an app, enough for a code exchange with that team's key")
    func emulatorConfiguration() async throws {
        let p8PublicKey = Fixtures.p8PublicKey
        var configuration = EmulatorConfiguration()
        configuration.addTeam(teamID: "TEAMID1234", keyID: "KEYID12345", publicKeyPEM: p8PublicKey)
        configuration.addApp(clientID: "com.example.app", teamID: "TEAMID1234")
        #expect(configuration.teams == [.init(teamID: "TEAMID1234", keys: ["KEYID12345": p8PublicKey])])
        #expect(configuration.apps.map(\.clientID) == ["com.example.app"])

        try await EmulatorHarness.with(configuration) { harness in
            let sub = try await harness.createUser()
            let code = try await harness.nativeSignIn(sub: sub).code
            let credentials = try AppleSigningCredentials(teamID: "TEAMID1234", keyID: "KEYID12345", privateKeyPEM: Fixtures.p8)
            let client = try AppleClient(
                configuration: AppleConfiguration(credentials: credentials, clientIDs: ["com.example.app"], baseURL: harness.emulator.baseURL))
            let tokens = try await client.exchangeCode(code, clientID: "com.example.app")
            #expect(tokens.refreshToken != nil)
        }
    }

    // MARK: LatchkeyStore

    /// SQLAuthStore.swift. Compiled, not run: it would create `latchkey.sqlite` in the working directory
    /// (the store tests cover opening and migrating).
    static func sqlAuthStore() async throws -> SQLAuthStore {
        let store = try await SQLAuthStore.open(.sqlite(path: "latchkey.sqlite"))
        try await store.migrate()
        return store
    }

    // MARK: LatchkeyServer

    @Test("LatchkeyServer.swift: the server and its background services run in a service group until shut down")
    func latchkeyServer() async throws {
        try await EmulatorHarness.with { harness in
            var settings = ServerConfiguration()
            settings.port = 0
            settings.apple = .init(
                teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8, clientIDs: [Fixtures.bundleID], baseURL: harness.emulator.baseURL
            )
            let configuration = settings
            let path = NSTemporaryDirectory() + "latchkey-documentation-\(UUID().uuidString).sqlite"
            defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
            let store = try await SQLAuthStore.open(.sqlite(path: path))
            try await store.migrate()
            let encryptionKey = SecretBox.generateKey()
            var quiet = Logger(label: "latchkey.documentation")
            quiet.logLevel = .critical
            let logger = quiet

            // The example runs as a service of an outer group, whose graceful shutdown reaches the example's group.
            let outer = ServiceGroup(
                services: [
                    ClosureService {
                        let server = try await LatchkeyServer.make(configuration: configuration, store: store, encryptionKey: encryptionKey)
                        let group = ServiceGroup(services: server.services(with: server.makeApplication()), logger: logger)
                        try await group.run()
                    }
                ],
                logger: logger
            )
            let running = Task { try await outer.run() }
            // `make` creates the first signing key; the group then serves until it is shut down.
            try await poll(until: "the first signing key", within: .seconds(5), every: .milliseconds(50)) { try await !store.signingKeys().isEmpty }
            #expect(try await store.signingKeys().count == 1)
            try await Task.sleep(for: .milliseconds(200))
            await outer.triggerGracefulShutdown()
            try await running.value
            await store.close()
        }
    }
}

/// A service that runs a closure.
private struct ClosureService: Service {
    let body: @Sendable () async throws -> Void
    init(_ body: @escaping @Sendable () async throws -> Void) { self.body = body }
    func run() async throws { try await body() }
}

extension DocumentationExamplesTests {
    // MARK: LatchkeyClient

    @Test("AppleNonce.swift and LatchkeyClient.swift: the nonce in the request, then sign-in and a signed-in request against a real server")
    func clientExamples() async throws {
        final class AppleIDRequest { var nonce: String? }  // stands in for ASAuthorizationAppleIDRequest
        let request = AppleIDRequest()
        let nonce = AppleNonce()
        request.nonce = nonce.sha256  // request: the ASAuthorizationAppleIDRequest; send nonce.raw to Latchkey
        let container = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("latchkey-doc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: container) }
        try await ServerHarness.with { harness in
            let server = try #require(URL(string: harness.baseURL))
            let sub = try await harness.emulator.createUser()
            let minted = try await harness.emulator.nativeSignIn(sub: sub, nonce: request.nonce ?? "")
            // Stands in for ASAuthorizationAppleIDCredential, with its types.
            struct AppleIDCredential {
                var identityToken: Data?
                var authorizationCode: Data?
                var fullName: PersonNameComponents?
            }
            let credential = AppleIDCredential(identityToken: Data(minted.identityToken.utf8), authorizationCode: Data(minted.code.utf8), fullName: nil)
            let client = LatchkeyClient(baseURL: server, tokenStore: FileTokenStore(url: container.appendingPathComponent("session.json")))
            // From the ASAuthorizationAppleIDCredential of a request whose nonce was nonce.sha256:
            let identityToken = String(decoding: credential.identityToken ?? Data(), as: UTF8.self)
            let code = credential.authorizationCode.map { String(decoding: $0, as: UTF8.self) }
            try await client.signInWithApple(identityToken: identityToken, authorizationCode: code, rawNonce: nonce.raw, fullName: credential.fullName)
            let (data, _) = try await client.data(for: URLRequest(url: server.appendingPathComponent("v1/me")))
            let me = try JSONSerialization.jsonObject(with: data) as? [String: Any]
            #expect((me?["identities"] as? [[String: Any]])?.first?["subject"] as? String == sub)
        }
    }

    @Test("LatchkeySession.swift: the screen follows the session's state")
    @MainActor
    func sessionModelExample() async throws {
        @MainActor func screen(for session: LatchkeySession) -> String {
            switch session.state {
            case .unknown: "launch screen"  // the store is not readable yet: neither signed in nor out
            case .signedOut: "sign-in screen"
            case .signedIn(let user): "home of \(user.id)"
            case .signedInWithoutProfile: "home"  // signed in; the profile comes when the server answers
            }
        }
        let session = LatchkeySession(client: LatchkeyClient(baseURL: URL(string: "https://auth.example.com")!, tokenStore: InMemoryTokenStore()))
        #expect(screen(for: session) == "sign-in screen")
    }

    @Test("DeviceKey.swift: a client whose session is bound to the device's key, with App Attest (built only)")
    func deviceBindingExample() {
        let container = URL(fileURLWithPath: NSTemporaryDirectory())
        let server = URL(string: "https://auth.example.com")!
        let store = FileTokenStore(url: container.appendingPathComponent("session.json"))
        let client = LatchkeyClient(baseURL: server, tokenStore: store, deviceBinding: .dpop, appAttest: .enabled)
        _ = client
    }

    @Test("LatchkeyClient.swift: authorize() on a request of the app's own stack (built only: it would need a session)")
    func authorizeExample() {
        func example(client: LatchkeyClient) async throws -> URLRequest {
            var request = URLRequest(url: URL(string: "https://api.example.com/notes")!)
            try await client.authorize(&request)
            return request
        }
        _ = example
    }

    @Test("FileTokenStore.swift: a store in the app group's container")
    func fileStoreExample() throws {
        let container = URL(fileURLWithPath: NSTemporaryDirectory())
        let store = FileTokenStore(url: container.appendingPathComponent("session.json"))
        #expect(store.url.lastPathComponent == "session.json")
    }

    // MARK: LatchkeyMail

    @Test("SMTPServer.swift: a server URL with its password from elsewhere")
    func smtpServerExample() throws {
        let server = try SMTPServer(url: "smtps://codes%40example.com@smtp.example.com", password: "s3cret")
        #expect(server.description == "smtps://codes%40example.com@smtp.example.com:465")
    }

    @Test("MailMessage.swift: a message with a text and an HTML body")
    func mailMessageExample() {
        let message = MailMessage(
            from: "codes@example.com", to: "ada@example.org", subject: "Your sign-in code",
            text: "Your code is 123456.", html: "<p>Your code is <b>123456</b>.</p>")
        #expect(message.html != nil)
    }

    @Test("SMTPClient.swift: a client and a send (built only: sending would reach smtp.example.com)")
    func smtpClientExample() {
        func example() async throws {
            let server = try SMTPServer(url: "smtp://codes%40example.com@smtp.example.com:587", password: "s3cret")
            let client = SMTPClient(server: server, heloName: "auth.example.com", timeout: .seconds(10))
            try await client.send(MailMessage(from: "codes@example.com", to: "ada@example.org", subject: "Your code", text: "123456", html: nil))
        }
        _ = example
    }

    // MARK: LatchkeyBackend

    @Test("AccessTokenVerifier.swift: a verifier and a token's claim (built only: verifying would fetch from auth.example.com)")
    func accessTokenVerifierExample() {
        func example(bearer: String) async throws -> JSONValue? {
            let verifier = AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey")
            let token = try await verifier.verify(bearer)
            let plan = token[claim: "plan"]
            return plan
        }
        _ = example
    }

    @Test("AccessTokenVerifier.swift: a request's token as it came, DPoP-bound or not (built only)")
    func dpopVerifierExample() {
        func example(verifier: AccessTokenVerifier, authorization: String, proofs: [String]) async throws -> LatchkeyAccessToken {
            let token = try await verifier.verify(authorization: authorization, dpop: proofs, method: "GET", url: "https://api.example.com/notes")
            return token
        }
        _ = example
    }

    @Test("WebhookVerifier.swift: a delivery verified, and user.deleted acted on")
    func webhookVerifierExample() async throws {
        let secret = WebhookEndpoint.generateSecret()
        let key = try WebhookSignature.key(fromSecret: secret).get()
        let sent = LifecycleEvent.userDeleted("user-1", reason: .userRequest, at: Date())
        let body = Array(sent.body().utf8)
        let headers = Dictionary(
            uniqueKeysWithValues: WebhookSignature.headers(messageID: sent.id, timestamp: Int(Date().timeIntervalSince1970), body: sent.body(), key: key).map {
                ($0.name, $0.value)
            })
        let deleted = Mutex<[String]>([])
        func deleteEverything(of user: String) async throws { deleted.withLock { $0.append(user) } }
        let webhooks = try WebhookVerifier(secret: secret)
        let event = try webhooks.verify(body: body, headers: headers)
        if event.type == "user.deleted", let user = event.userID { try await deleteEverything(of: user) }
        #expect(deleted.withLock { $0 } == ["user-1"])
    }

    @Test("LatchkeyAuthenticator.swift: a router whose /api routes need a Latchkey access token (built only)")
    func authenticatorExample() {
        let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
        router.addMiddleware { LatchkeyAuthenticator(verifier: AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey")) }
        router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("me") { _, context -> String in
            try context.requireIdentity().userID
        }
        _ = router
        // DPoP-bound tokens too, for a server clients reach at api.example.com.
        func takingDPoP(router: Router<BasicAuthRequestContext<LatchkeyAccessToken>>, verifier: AccessTokenVerifier) {
            router.addMiddleware { LatchkeyAuthenticator(verifier: verifier, publicBaseURL: "https://api.example.com") }
        }
        takingDPoP(
            router: Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self),
            verifier: AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey"))
    }

    @Test("README.md: the backend example (built only: it would listen on port 8000 and fetch from auth.example.com)")
    func readmeBackendExample() {
        @Sendable func deleteEverything(of user: String) async throws { _ = user }
        func example() async throws {
            let verifier = AccessTokenVerifier(issuer: "https://auth.example.com", audience: "latchkey")
            let webhooks = try WebhookVerifier(secret: ProcessInfo.processInfo.environment["LATCHKEY_WEBHOOK_SECRET"] ?? "")
            let router = Router(context: BasicAuthRequestContext<LatchkeyAccessToken>.self)
            router.addMiddleware { LatchkeyAuthenticator(verifier: verifier) }
            router.group("api").add(middleware: IsAuthenticatedMiddleware()).get("notes") { _, context -> String in
                let token = try context.requireIdentity()
                return "notes of \(token.userID) on plan \(token[claim: "plan"] ?? .null)"
            }
            router.post("webhooks/latchkey") { request, _ -> HTTPResponse.Status in
                let body = try await request.body.collect(upTo: 64 * 1024)
                let headers = Dictionary(request.headers.map { ($0.name.canonicalName, $0.value) }, uniquingKeysWith: { first, _ in first })
                guard let event = try? webhooks.verify(body: body.readableBytesView, headers: headers) else { return .unauthorized }
                if event.type == "user.deleted", let user = event.userID { try await deleteEverything(of: user) }
                return .noContent
            }
            try await Application(router: router, configuration: .init(address: .hostname("0.0.0.0", port: 8000))).runService()
        }
        _ = example
    }

    #if canImport(AuthenticationServices) && (os(iOS) || os(macOS) || os(visionOS))
        @Test("Passkeys.swift: an account made with a passkey (built only: the platform's authenticator shows a sheet)")
        @MainActor
        func passkeySignUpExample() {
            @MainActor func example(client: LatchkeyClient) async throws {
                try await client.signUpWithPasskey(displayName: "Ada", using: PlatformPasskeyAuthenticator())
            }
            _ = example
        }
    #endif

    #if canImport(Security)
        @Test("KeychainTokenStore.swift: a store in the Keychain")
        func keychainStoreExample() {
            let store = KeychainTokenStore(service: "com.example.app.session", accessGroup: nil)
            _ = store
        }
    #endif
}
