import Crypto
import Foundation
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The client with a device key (DPoP, RFC 9449): a proof on every request to Latchkey, `DPoP` tokens, the server's
/// nonces, and where the key is kept. Each proof is checked as the server checks it (LatchkeyJOSE's DPoPProofCheck).
@Suite("Client: DPoP-bound sessions")
struct DPoPClientTests {
    /// A software key and its RFC 7638 thumbprint, computed apart from the client (Crypto and LatchkeyJOSE).
    static func key() throws -> (key: SoftwareDeviceKey, thumbprint: String) {
        let key = SoftwareDeviceKey(key: SoftwareSigningKey())
        return (key, DPoPProofCheck.thumbprint(of: try P256.Signing.PublicKey(rawRepresentation: key.publicKey)))
    }

    /// The request's proof, verified for its method and URL (and `ath` when a `DPoP` token goes with it), and its claims.
    static func proof(of request: URLRequest, clock: MutableClock) throws -> (proof: VerifiedDPoPProof, claims: [String: Any]) {
        let header = try #require(request.value(forHTTPHeaderField: "DPoP"), "\(request.httpMethod ?? "GET") \(request.url?.path ?? "") has no proof")
        let token = AccessCredential(authorization: request.value(forHTTPHeaderField: "Authorization")).flatMap { $0.isDPoP ? $0.token : nil }
        // An hour's window: the test's clock moves between the requests and this check.
        let proof = try DPoPProofCheck(maximumAge: 3600, timeSource: clock.source).verify(
            header, method: request.httpMethod ?? "GET", url: request.url?.absoluteString ?? "", accessToken: token)
        let payload = String(header.split(separator: ".")[1])
        let claims = try JSONSerialization.jsonObject(with: try #require(Data(base64Encoded: Self.padded(payload)))) as? [String: Any]
        return (proof, try #require(claims))
    }

    static func padded(_ base64URL: String) -> String {
        let base64 = base64URL.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        return base64 + String(repeating: "=", count: (4 - base64.count % 4) % 4)
    }

    static func line(_ request: URLRequest) -> String { "\(request.httpMethod ?? "GET") \(request.url?.path ?? "")" }

    @Test("with .dpop, every request to Latchkey carries a proof by the device key for its method and URL, with ath where a DPoP token goes")
    func proofOnEveryRequest() async throws {
        let fixture = Fixture()
        let (key, thumbprint) = try Self.key()
        let store = InMemoryTokenStore()
        let client = fixture.client(store: store, deviceBinding: .dpop(key: key))
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        #expect(await fixture.server.boundFamilies.values.contains(thumbprint))
        #expect(try store.load()?.tokenType == "DPoP")
        _ = try await client.user()
        var post = URLRequest(url: URL(string: "https://api.example.com/notes?page=2#top")!)
        post.httpMethod = "POST"
        let (_, resource) = try await client.data(for: post)
        #expect((resource as? HTTPURLResponse)?.statusCode == 200)
        fixture.clock.advance(901)
        _ = try await client.validAccessToken()
        await client.signOut()
        await client.background.finish()
        #expect(await fixture.server.logouts == 1)

        let requests = await fixture.server.requests
        #expect(requests.map(Self.line) == ["POST /v1/auth/apple", "GET /v1/me", "POST /notes", "POST /v1/token", "POST /v1/logout"])
        for request in requests {
            let (proof, claims) = try Self.proof(of: request, clock: fixture.clock)
            #expect(proof.thumbprint == thumbprint, "\(Self.line(request))")
            #expect(claims["htm"] as? String == request.httpMethod)
            let htu = try #require(claims["htu"] as? String)
            #expect(!htu.contains("?") && !htu.contains("#") && htu.hasSuffix(request.url?.path ?? "-"), "\(htu)")
            let authorization = request.value(forHTTPHeaderField: "Authorization")
            // A token goes with the resource requests, as DPoP, and its hash with their proofs; none with the sign-in and the refresh.
            let withToken = !["/v1/auth/apple", "/v1/token"].contains(request.url?.path ?? "")
            #expect((authorization?.hasPrefix("DPoP ") ?? false) == withToken, "\(Self.line(request))")
            #expect((claims["ath"] != nil) == withToken, "\(Self.line(request))")
        }
        // Each proof is new.
        #expect(Set(requests.compactMap { $0.value(forHTTPHeaderField: "DPoP") }).count == requests.count)
    }

    @Test("with .none, no request carries a DPoP header and the tokens go as Bearer")
    func noneSendsNoProof() async throws {
        let fixture = Fixture()
        let client = fixture.client(store: InMemoryTokenStore())
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        _ = try await client.user()
        _ = try await client.data(for: fixture.resource())
        fixture.clock.advance(901)
        _ = try await client.validAccessToken()
        var request = fixture.resource()
        try await client.authorize(&request)
        #expect(request.value(forHTTPHeaderField: "Authorization")?.hasPrefix("Bearer ") == true)
        #expect(request.value(forHTTPHeaderField: "DPoP") == nil)
        await client.signOut()
        await client.background.finish()
        let requests = await fixture.server.requests
        #expect(requests.count == 5)
        #expect(requests.allSatisfy { $0.value(forHTTPHeaderField: "DPoP") == nil })
        #expect(requests.compactMap { $0.value(forHTTPHeaderField: "Authorization") }.allSatisfy { $0.hasPrefix("Bearer ") })
        #expect(await fixture.server.boundFamilies.isEmpty)
    }

    @Test("use_dpop_nonce: the request goes once more with the nonce, later proofs carry the latest, and a second refusal is the answer")
    func nonceRetry() async throws {
        let fixture = Fixture()
        let (key, _) = try Self.key()
        let client = fixture.client(store: InMemoryTokenStore(), deviceBinding: .dpop(key: key))
        await fixture.server.set(dpopNonce: "nonce-A")
        // Sign-in (400 use_dpop_nonce), then a resource with the nonce known.
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        _ = try await client.user()
        var requests = await fixture.server.requests
        #expect(requests.map(Self.line) == ["POST /v1/auth/apple", "POST /v1/auth/apple", "GET /v1/me"])
        #expect(try requests.map { try Self.proof(of: $0, clock: fixture.clock).proof.nonce } == [nil, "nonce-A", "nonce-A"])

        // A resource's 401 with a DPoP challenge, and the refresh's 400: each retried once with the nonce answered.
        await fixture.server.set(dpopNonce: "nonce-B")
        let (_, resource) = try await client.data(for: fixture.resource())
        #expect((resource as? HTTPURLResponse)?.statusCode == 200)
        await fixture.server.set(dpopNonce: "nonce-C")
        fixture.clock.advance(901)
        _ = try await client.validAccessToken()
        requests = Array(await fixture.server.requests.dropFirst(3))
        #expect(requests.map(Self.line) == ["GET /feed", "GET /feed", "POST /v1/token", "POST /v1/token"])
        // Nonces are kept by server: the backend's first proof has none, and the refresh first tries Latchkey's last one.
        #expect(try requests.map { try Self.proof(of: $0, clock: fixture.clock).proof.nonce } == [nil, "nonce-B", "nonce-A", "nonce-C"])
        #expect(await fixture.server.refreshRequests == 1, "the refused proof never reached the refresh")

        // A server whose nonce never settles: one retry, then its answer.
        await fixture.server.set(dpopNonce: "nonce-D", neverSettles: true)
        await fixture.server.resetRequests()
        let (_, refused) = try await client.data(for: fixture.resource())
        #expect((refused as? HTTPURLResponse)?.statusCode == 401)
        let signIn = await #expect(throws: LatchkeyClientError.rejected) {
            try await client.signIn(provider: "google", idToken: "user-2")
        }
        #expect(signIn?.serverError?.error == "use_dpop_nonce")
        #expect(await fixture.server.requests.map(Self.line) == ["GET /feed", "GET /feed", "POST /v1/auth/google", "POST /v1/auth/google"])
    }

    @Test("authorize: DPoP and a proof for the request's method and URL with ath; Bearer without a proof for an unbound session")
    func authorizeForOtherStacks() async throws {
        let fixture = Fixture()
        let (key, thumbprint) = try Self.key()
        let client = fixture.client(store: InMemoryTokenStore(), deviceBinding: .dpop(key: key))
        try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        var request = URLRequest(url: URL(string: "https://api.example.com/notes/7?fields=all")!)
        request.httpMethod = "PUT"
        try await client.authorize(&request)
        let token = try #require(client.currentAccessToken)
        #expect(request.value(forHTTPHeaderField: "Authorization") == "DPoP \(token)")
        let (proof, claims) = try Self.proof(of: request, clock: fixture.clock)
        #expect(proof.thumbprint == thumbprint)
        #expect(claims["htm"] as? String == "PUT" && claims["htu"] as? String == "https://api.example.com/notes/7")
        #expect(claims["ath"] as? String == Base64URL.encode(Array(SHA256.hash(data: Data(token.utf8)))))
        // The app's stack sends it (the fake server as its transport); the same proof twice is refused.
        #expect(try await fixture.server.send(request).1.statusCode == 200)
        #expect(try await fixture.server.send(request).1.statusCode == 401)

        // A nonce asked for: handleUnauthorized says go again, and the next authorize's proof carries it.
        await fixture.server.set(dpopNonce: "nonce-1")
        try await client.authorize(&request)
        let (_, asked) = try await fixture.server.send(request)
        #expect(asked.statusCode == 401 && asked.value(forHTTPHeaderField: "DPoP-Nonce") == "nonce-1")
        #expect(await client.handleUnauthorized(asked, for: request))
        #expect(await fixture.server.refreshRequests == 0)
        try await client.authorize(&request)
        #expect(try Self.proof(of: request, clock: fixture.clock).proof.nonce == "nonce-1")
        #expect(try await fixture.server.send(request).1.statusCode == 200)
        // The same refusal for a proof that carried that nonce already: no go-ahead.
        #expect(await !client.handleUnauthorized(asked, for: request))

        let bearer = fixture.client(store: InMemoryTokenStore())
        try await bearer.signInWithApple(identityToken: "user-2", authorizationCode: nil, rawNonce: "n")
        var plain = fixture.resource()
        try await bearer.authorize(&plain)
        #expect(plain.value(forHTTPHeaderField: "Authorization") == "Bearer \(bearer.currentAccessToken ?? "-")")
        #expect(plain.value(forHTTPHeaderField: "DPoP") == nil)
    }

    @Test("the browser flow names the key in advance (dpop_jkt); without a key it does not")
    func authorizationURLNamesTheKey() throws {
        let fixture = Fixture()
        let (key, thumbprint) = try Self.key()
        func jkt(_ client: LatchkeyClient) -> String? {
            let url = client.authorizationURL(provider: "apple", clientID: "web", redirectURI: "com.example.app:/callback")
            return URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "dpop_jkt" }?.value
        }
        #expect(jkt(fixture.client(store: InMemoryTokenStore(), deviceBinding: .dpop(key: key))) == thumbprint)
        #expect(jkt(fixture.client(store: InMemoryTokenStore())) == nil)
    }

    @Test("a stored DPoP session is used as DPoP by the next launch; a session stored before tokenType existed is a bearer one")
    func storedTokenType() async throws {
        let fixture = Fixture()
        let (key, _) = try Self.key()
        let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("latchkey-dpop-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let first = fixture.client(store: FileTokenStore(url: file), deviceBinding: .dpop(key: key))
        try await first.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        let relaunched = fixture.client(store: FileTokenStore(url: file), deviceBinding: .dpop(key: key))
        let (_, response) = try await relaunched.data(for: fixture.resource())
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(await fixture.server.refreshRequests == 0)
        #expect(await fixture.server.requests.last?.value(forHTTPHeaderField: "Authorization")?.hasPrefix("DPoP ") == true)

        var old = try #require(try FileTokenStore(url: file).load())
        old.tokenType = nil
        let json = try #require(String(data: try old.encoded(), encoding: .utf8))
        #expect(!json.contains("tokenType"))
        #expect(try StoredSession.decoded(from: Data(json.utf8)).credential.isDPoP == false)
    }

    #if !canImport(Security)
        @Test("on Linux, .dpop keeps a software key beside a FileTokenStore's file (mode 0600): the next launch signs with the same key")
        func keyBesideTheSessionFile() async throws {
            let fixture = Fixture()
            let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("latchkey-dpop-\(UUID().uuidString).json")
            defer {
                for suffix in ["", ".lock", ".dpop-key"] { try? FileManager.default.removeItem(atPath: file.path + suffix) }
            }
            let first = fixture.client(store: FileTokenStore(url: file), deviceBinding: .dpop)
            try await first.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
            let attributes = try FileManager.default.attributesOfItem(atPath: file.path + ".dpop-key")
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            let relaunched = fixture.client(store: FileTokenStore(url: file), deviceBinding: .dpop)
            fixture.clock.advance(901)
            _ = try await relaunched.validAccessToken()
            #expect(await fixture.server.refreshRequests == 1)
            #expect(try first.signer?.thumbprint() == relaunched.signer?.thumbprint())
            // In memory with another store: a key of this process only.
            let memory = fixture.client(store: InMemoryTokenStore(), deviceBinding: .dpop)
            #expect(try memory.signer?.thumbprint() != first.signer?.thumbprint())
        }
    #endif

    @Test(
        "where the key is kept: the Secure Enclave for an app on a device, the Keychain in the Simulator, extensions and shared groups, beside the session file or in memory elsewhere",
        arguments: [
            (true, true, false, nil, nil, DeviceKeyPlan(items: .keychain(accessGroup: nil), secureEnclave: true)),
            (true, false, false, nil, nil, DeviceKeyPlan(items: .keychain(accessGroup: nil), secureEnclave: false)),
            (true, true, true, nil, nil, DeviceKeyPlan(items: .keychain(accessGroup: nil), secureEnclave: false)),
            (true, true, false, "TEAM.group", nil, DeviceKeyPlan(items: .keychain(accessGroup: "TEAM.group"), secureEnclave: false)),
            (true, true, false, nil, "/tmp/s.json", DeviceKeyPlan(items: .keychain(accessGroup: nil), secureEnclave: true)),
            (false, false, false, nil, "/tmp/s.json", DeviceKeyPlan(items: .files(beside: URL(fileURLWithPath: "/tmp/s.json")), secureEnclave: false)),
            (false, false, false, nil, nil, DeviceKeyPlan(items: .memory, secureEnclave: false)),
        ] as [(Bool, Bool, Bool, String?, String?, DeviceKeyPlan)])
    func keyPlan(keychain: Bool, secureEnclave: Bool, appExtension: Bool, group: String?, file: String?, expected: DeviceKeyPlan) {
        let plan = DeviceKeyPlan.choose(
            hasKeychain: keychain, hasSecureEnclave: secureEnclave, isAppExtension: appExtension, accessGroup: group,
            sessionFile: file.map { URL(fileURLWithPath: $0) })
        #expect(plan == expected)
    }

    /// Items whose reads and adds answer as scripted, then as the memory they wrap.
    final class ScriptedItems: InstallItemStore, @unchecked Sendable {
        // @unchecked: every field is only used while holding `lock`.
        private let lock = NSLock()
        let inner = MemoryInstallItems()
        var readFails = false
        /// Adds refused as "exists" while this many remain, each after `racingData` (another process's key), if any, is stored.
        var racingAdds = 0
        var racingData: Data?
        private(set) var replaces = 0

        func read(_ name: String) throws -> Data? {
            if lock.withLock({ readFails }) { throw KeychainDecisions.error(KeychainDecisions.interactionNotAllowed) }
            return try inner.read(name)
        }

        func add(_ name: String, _ data: Data) throws -> Bool {
            let (racing, stored) = lock.withLock { () -> (Bool, Data?) in
                guard racingAdds > 0 else { return (false, nil) }
                racingAdds -= 1
                return (true, racingData)
            }
            guard racing else { return try inner.add(name, data) }
            if let stored { try inner.replace(name, with: stored) }
            return false
        }

        func replace(_ name: String, with data: Data?) throws {
            lock.withLock { replaces += 1 }
            try inner.replace(name, with: data)
        }
    }

    @Test("the key is made once and kept; a damaged one is replaced; another process's key wins a race; a locked store replaces nothing")
    func keyLoading() throws {
        let items = ScriptedItems()
        let factory = DeviceKeyFactory.software
        let first = try factory.load(from: items)
        #expect(try factory.load(from: items).publicKey == first.publicKey)
        #expect(try items.read("dpop-key")?.count == 32)

        items.readFails = true
        #expect(throws: KeychainStoreError.self) { try factory.load(from: items) }
        #expect(items.replaces == 0)
        items.readFails = false
        #expect(try factory.load(from: items).publicKey == first.publicKey)

        try items.inner.replace("dpop-key", with: Data("damaged".utf8))
        let replaced = try factory.load(from: items)
        #expect(replaced.publicKey != first.publicKey)
        #expect(try factory.load(from: items).publicKey == replaced.publicKey)

        let racing = ScriptedItems()
        let theirs = SoftwareSigningKey()
        racing.racingAdds = 1
        racing.racingData = theirs.rawRepresentation
        #expect(try factory.load(from: racing).publicKey == theirs.rawPublicKey)

        // A store that keeps saying "exists" and then "none": the loader gives up instead of looping.
        let broken = ScriptedItems()
        broken.racingAdds = 5
        #expect(throws: LatchkeyClientError.storageUnavailable) { try factory.load(from: broken) }

        // The source reports a store that cannot be read as storageUnavailable, and tries again next time.
        items.readFails = true
        let source = DeviceKeySource(load: { try factory.load(from: items) })
        #expect(throws: LatchkeyClientError.storageUnavailable) { try source.key() }
        items.readFails = false
        #expect(try source.key().publicKey == replaced.publicKey)
    }

    @Test("items as files beside the session: added once (a second add finds the first), replaced, deleted, each mode 0600")
    func fileItems() throws {
        let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("latchkey-items-\(UUID().uuidString).json")
        let items = FileInstallItems(sessionFile: file)
        defer { try? FileManager.default.removeItem(atPath: items.path("app-attest")) }
        #expect(try items.read("app-attest") == nil)
        #expect(try items.add("app-attest", Data("one".utf8)))
        #expect(try !items.add("app-attest", Data("two".utf8)))
        #expect(try items.read("app-attest") == Data("one".utf8))
        try items.replace("app-attest", with: Data("three".utf8))
        #expect(try items.read("app-attest") == Data("three".utf8))
        let attributes = try FileManager.default.attributesOfItem(atPath: items.path("app-attest"))
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        try items.replace("app-attest", with: nil)
        #expect(try items.read("app-attest") == nil)
        try items.replace("app-attest", with: nil)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).filter { $0.hasPrefix(file.lastPathComponent) }
        #expect(leftovers.isEmpty, "\(leftovers)")
    }

    @Test(
        "the Keychain items' statuses: read, add and the delete of a replace",
        arguments: [
            (KeychainDecisions.success, "read data", "added", "deleted"),
            (KeychainDecisions.itemNotFound, "read none", "-25300", "deleted"),
            (KeychainDecisions.duplicateItem, "-25299", "exists", "-25299"),
            (KeychainDecisions.interactionNotAllowed, "-25308", "-25308", "-25308"),
            (KeychainDecisions.missingEntitlement, "-34018", "-34018", "-34018"),
        ] as [(Int32, String, String, String)])
    func keychainItemStatuses(status: Int32, read: String, add: String, delete: String) {
        func outcome(_ body: () throws(KeychainStoreError) -> String) -> String {
            do { return try body() } catch { return String(error.status) }
        }
        let readOutcome = outcome { () throws(KeychainStoreError) -> String in
            try KeychainItemDecisions.read(status: status, data: Data("x".utf8)) == nil ? "read none" : "read data"
        }
        let addOutcome = outcome { () throws(KeychainStoreError) -> String in try KeychainItemDecisions.added(status: status) ? "added" : "exists" }
        let deleteOutcome = outcome { () throws(KeychainStoreError) -> String in
            try KeychainItemDecisions.deleted(status: status)
            return "deleted"
        }
        #expect((readOutcome, addOutcome, deleteOutcome) == (read, add, delete))
        #expect(KeychainItemDecisions.account("dpop-key", issuer: "https://auth.example.com") == "dpop-key https://auth.example.com")
    }

    @Test(
        "which requests get a proof: every one to the Latchkey server, and any other with a DPoP token",
        arguments: [
            ("https://auth.example.com/v1/me", nil, true), ("https://AUTH.example.com:443/v1/token", nil, true),
            ("https://auth.example.com/v1/me", "Bearer t", true), ("https://api.example.com/feed", "Bearer t", false),
            ("https://api.example.com/feed", "DPoP t", true), ("https://api.example.com/feed", nil, false),
            ("http://auth.example.com/v1/me", nil, false), ("https://auth.example.com:8443/v1/me", nil, false),
        ] as [(String, String?, Bool)])
    func needsProof(url: String, authorization: String?, expected: Bool) {
        var request = URLRequest(url: URL(string: url)!)
        request.setValue(authorization, forHTTPHeaderField: "Authorization")
        #expect(DPoPSigner.needsProof(request, server: URL(string: "https://auth.example.com")!) == expected)
        // Under a path: only below it.
        let underPath = URL(string: "https://example.com/auth")!
        #expect(DPoPSigner.needsProof(URLRequest(url: URL(string: "https://example.com/auth/v1/me")!), server: underPath))
        #expect(!DPoPSigner.needsProof(URLRequest(url: URL(string: "https://example.com/authx/v1/me")!), server: underPath))
    }
}
