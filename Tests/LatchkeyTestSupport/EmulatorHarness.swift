import AsyncHTTPClient
import Foundation
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyProviders
import NIOCore
import NIOHTTP1

/// An emulator on loopback with the fixture team, and clients pointed at it.
public struct EmulatorHarness: Sendable {
    public let emulator: RunningEmulator
    public let apple: AppleClient
    public let keys: JWKSCache
    /// For raw requests; follows no redirects.
    let http: HTTPClient

    public static let redirectURI = "https://app.example.com/callback"
    public static let googleClientID = "google-ios-client"
    /// Registered at every stand-in (``EmulatorConfiguration/addClientEverywhere(_:redirectURIs:)``), and as an app of the
    /// fixture team at Apple: one client id that signs in with any provider.
    public static let providerClientID = "com.example.everywhere"

    /// The fixture team (``Fixtures/teamID`` with the `.p8` of ``Fixtures/keyID``), the bundle id and the Services ID.
    public static func configuration(notificationURL: String? = nil) -> EmulatorConfiguration {
        var configuration = EmulatorConfiguration()
        configuration.addTeam(teamID: Fixtures.teamID, keyID: Fixtures.keyID, publicKeyPEM: Fixtures.p8PublicKey)
        configuration.addApp(clientID: Fixtures.bundleID, teamID: Fixtures.teamID, notificationURL: notificationURL)
        configuration.addApp(clientID: Fixtures.servicesID, teamID: Fixtures.teamID, redirectURIs: [redirectURI])
        configuration.googleClients = [.init(clientID: googleClientID, redirectURIs: [redirectURI])]
        configuration.addClientEverywhere(providerClientID, redirectURIs: [redirectURI])
        configuration.addApp(clientID: providerClientID, teamID: Fixtures.teamID, redirectURIs: [redirectURI])
        configuration.notificationInitialBackoff = .milliseconds(20)
        return configuration
    }

    public static func start(
        _ configuration: EmulatorConfiguration = configuration(), retry: RetryPolicy = .init(maximumAttempts: 3, initialBackoff: .milliseconds(5))
    ) async throws -> EmulatorHarness {
        // The suite runs every test at once: about 650 descriptors at its peak (32 server harnesses' SQLite connections,
        // listeners and clients), near the usual soft limit of 1,024 on a machine with more going on.
        _ = OpenFileLimit.raised
        let emulator = try await Emulator.start(configuration: configuration)
        let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        let apple = try AppleClient(
            configuration: AppleConfiguration(
                credentials: credentials, clientIDs: [Fixtures.bundleID, Fixtures.servicesID], baseURL: emulator.baseURL, requestTimeout: .seconds(5),
                retry: retry)
        )
        var cacheConfiguration = JWKSCache.Configuration()
        cacheConfiguration.refetchCooldown = .zero  // tests rotate keys and expect the next token to refetch
        let keys = JWKSCache(url: emulator.baseURL + "/auth/keys", transport: AsyncHTTPClientTransport(), configuration: cacheConfiguration)
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        return EmulatorHarness(emulator: emulator, apple: apple, keys: keys, http: http)
    }

    public func stop() async {
        try? await http.shutdown()
        await emulator.stop()
    }

    /// Runs `body` against a fresh emulator and stops it afterwards, also when `body` throws.
    public static func with<T>(_ configuration: EmulatorConfiguration = configuration(), _ body: (EmulatorHarness) async throws -> T) async throws -> T {
        let harness = try await start(configuration)
        do {
            let result = try await body(harness)
            await harness.stop()
            return result
        } catch {
            await harness.stop()
            throw error
        }
    }

    /// A verifier for the emulator's Apple tokens at the real current time.
    public var verifier: IdentityTokenVerifier {
        IdentityTokenVerifier(policy: .apple(clientIDs: [Fixtures.bundleID, Fixtures.servicesID]), keys: keys)
    }

    // MARK: HTTP

    public struct Answer: Sendable {
        public let status: Int
        public let headers: [String: String]
        public let body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
        public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:] }
        public var array: [[String: Any]] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [[String: Any]] ?? [] }
    }

    /// A raw request to the emulator; redirects are not followed.
    public func send(
        _ method: String, _ path: String, json: [String: any Sendable]? = nil, form: [(String, String)]? = nil, rawBody: String? = nil,
        headers: [(String, String)] = []
    ) async throws -> Answer {
        var request = HTTPClientRequest(url: emulator.baseURL + path)
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: json)))
        } else if let rawBody {
            request.body = .bytes(ByteBuffer(string: rawBody))
        } else if let form {
            if !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            }
            request.body = .bytes(ByteBuffer(string: formURLEncoded(form)))
        }
        let response = try await http.execute(request, timeout: .seconds(60))
        let body = try await response.body.collect(upTo: 1 << 20)
        var answerHeaders: [String: String] = [:]
        for (name, value) in response.headers { answerHeaders[name.lowercased()] = value }
        return Answer(status: Int(response.status.code), headers: answerHeaders, body: Array(buffer: body))
    }

    /// Creates a test user; returns its `sub` for the fixture team.
    public func createUser(
        email: String = "jane@example.com", hideMyEmail: Bool = false, realUserStatus: Int = 2, givenName: String = "Jane", familyName: String = "Appleseed"
    ) async throws -> String {
        let answer = try await send(
            "POST", "/emulator/users",
            json: ["email": email, "hideMyEmail": hideMyEmail, "realUserStatus": realUserStatus, "givenName": givenName, "familyName": familyName])
        guard answer.status == 201, let sub = answer.json["sub"] as? String else {
            throw HarnessError("creating a user answered \(answer.status): \(answer.text)")
        }
        return sub
    }

    /// What an iPhone hands the app after a native sign-in.
    public func nativeSignIn(sub: String, clientID: String = Fixtures.bundleID, nonce: String? = nil, scopes: [String]? = nil) async throws -> (
        identityToken: String, code: String, user: [String: Any]?
    ) {
        var body: [String: any Sendable] = ["sub": sub, "clientId": clientID]
        if let nonce { body["nonce"] = nonce }
        if let scopes { body["scopes"] = scopes }
        let answer = try await send("POST", "/emulator/authorizations", json: body)
        guard answer.status == 201, let token = answer.json["identityToken"] as? String, let code = answer.json["authorizationCode"] as? String else {
            throw HarnessError("authorization answered \(answer.status): \(answer.text)")
        }
        return (token, code, answer.json["user"] as? [String: Any])
    }

    /// Creates a user from `fields` (defaults for the rest); returns the control API's answer, whose `subjects`
    /// names the user at every provider.
    public func createUserAnswer(_ fields: [String: any Sendable] = [:]) async throws -> [String: Any] {
        let defaults: [String: any Sendable] = ["email": "jane@example.com", "givenName": "Jane", "familyName": "Appleseed"]
        let answer = try await send("POST", "/emulator/users", json: defaults.merging(fields) { _, given in given })
        guard answer.status == 201 else { throw HarnessError("creating a user answered \(answer.status): \(answer.text)") }
        return answer.json
    }

    /// A sign-in at `provider` minted by the control API (`fields` adds nonce, codeChallenge, redirectUri…); throws unless 201.
    public func providerSignIn(_ provider: String, sub: String, clientID: String = providerClientID, _ fields: [String: any Sendable] = [:]) async throws
        -> [String: Any]
    {
        let body: [String: any Sendable] = ["provider": provider, "sub": sub, "clientId": clientID]
        let answer = try await send("POST", "/emulator/authorizations", json: body.merging(fields) { _, given in given })
        guard answer.status == 201 else { throw HarnessError("\(provider) authorization answered \(answer.status): \(answer.text)") }
        return answer.json
    }

    /// Keys published at `path` of the emulator, refetched whenever a kid is unknown.
    public func keys(at path: String) -> JWKSCache {
        var configuration = JWKSCache.Configuration()
        configuration.refetchCooldown = .zero
        return JWKSCache(url: emulator.baseURL + path, transport: AsyncHTTPClientTransport(), configuration: configuration)
    }

    public func requestLog() async throws -> [[String: Any]] { try await send("GET", "/emulator/requests").array }

    /// A form for `/auth/token` with a correctly built secret for `clientID`.
    public func tokenForm(clientID: String = Fixtures.bundleID, secret: String? = nil, _ fields: [(String, String)]) throws -> [(String, String)] {
        let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        let secret = try secret ?? AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: clientID, issuedAt: Date(), lifetime: 600)
        return [("client_id", clientID), ("client_secret", secret)] + fields
    }
}

public struct HarnessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
