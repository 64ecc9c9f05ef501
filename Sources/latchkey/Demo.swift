import ArgumentParser
import AsyncHTTPClient
import Configuration
import Crypto
import Foundation
import Hummingbird
import LatchkeyBackend
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyStore
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import Synchronization

/// `latchkey demo`: the whole Sign in with Apple lifecycle, offline, narrated.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Walk through the whole sign-in lifecycle offline (Apple, then Google linked to it), narrating each step.",
        discussion: "Starts the emulator (every provider) and a Latchkey server in-process on loopback, with a throwaway SQLite database."
    )

    func run() async throws {
        let say = Narrator()
        var logger = Logger(label: "latchkey.demo")
        logger.logLevel = .critical
        let directory = NSTemporaryDirectory() + "latchkey-demo-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }

        say.step("Starting offline providers (the emulator: Apple, Google and others) and a Latchkey server on loopback")
        let team = try TestTeam.createOrLoad(in: directory + "/team")
        let clientID = "com.example.app"
        let running = try await Emulator.start(
            configuration: try Runtime.emulatorConfiguration(team: team, clientIDs: [clientID], notificationURL: ""), logger: logger)
        let settings = Runtime.emulatedProviderSettings(baseURL: running.baseURL, team: team, clientIDs: [clientID])
        var configuration = try ServerConfiguration(
            reading: ConfigReader(
                provider: InMemoryProvider(
                    values: Dictionary(
                        uniqueKeysWithValues: settings.map {
                            (AbsoluteConfigKey($0.key.split(separator: ".").map(String.init)), ConfigValue(.string($0.value), isSecret: false))
                        }))))
        configuration.port = 0
        configuration.database = .sqlite(path: directory + "/latchkey.sqlite")
        configuration.session.reuseGraceWindow = 1
        configuration.session.anonymous.enabled = true
        // The app's backend, as far as webhooks go: a tiny receiver that checks each delivery's signature.
        let backend = try await DemoBackend.start(logger: logger)
        configuration.webhooks = [WebhookEndpoint(url: backend.url, secret: Secret(backend.secret))]
        let store = try await Runtime.openStore(configuration, logger: logger)
        let server = try await LatchkeyServer.make(configuration: configuration, store: store, encryptionKey: SecretBox.generateKey(), logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let group = ServiceGroup(
            services: server.services(with: server.makeApplication { continuation.yield($0) }), gracefulShutdownSignals: [], logger: logger)
        let serverTask = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw CLIError("the server did not start") }
        let latchkey = "http://127.0.0.1:\(port)"
        await running.setNotificationURL(latchkey + "/v1/apple/notifications", for: clientID)
        say.detail("emulator \(running.baseURL) · Latchkey \(latchkey) · Apple team \(team.teamID)")
        let http = DemoHTTP()

        do {
            say.step("Jane signs in with Apple on her iPhone; she hides her e-mail")
            let user = try await http.json(
                "POST", running.baseURL + "/emulator/users", ["email": "jane@example.com", "hideMyEmail": true, "givenName": "Jane", "familyName": "Appleseed"])
            let sub = user["sub"]
            let nonce = PKCE.makeVerifier()
            let apple = try await http.json(
                "POST", running.baseURL + "/emulator/authorizations", ["sub": sub, "clientId": clientID, "nonce": hashedNonce(nonce)])
            say.detail("the app receives an identity token, a one-time authorization code and, this first time only, her name")

            say.step("The app sends them to Latchkey: POST /v1/auth/apple")
            var signIn = try await http.json(
                "POST", latchkey + "/v1/auth/apple",
                [
                    "identityToken": apple["identityToken"], "authorizationCode": apple["authorizationCode"], "rawNonce": nonce,
                    "fullName": ["givenName": "Jane", "familyName": "Appleseed"],
                ])
            let me = signIn.child("user")
            say.detail("new user \(me["id"]) · e-mail \(me["email"]) · isNewUser \(signIn.flag("isNewUser"))")
            say.detail("Latchkey verified the token (signature, issuer, audience, expiry, nonce), redeemed the code at Apple and sealed Apple's refresh token")

            say.step("Every later API call carries Latchkey's short-lived access token: GET /v1/me")
            let profile = try await http.json("GET", latchkey + "/v1/me", bearer: signIn["accessToken"])
            say.detail(
                "\(profile["givenName"]) \(profile["familyName"]), \((profile.object["identities"] as? [Any])?.count ?? 0) identity; any backend can check the token against \(latchkey)/.well-known/jwks.json"
            )

            say.step("The access token expires after 10 minutes; the app refreshes: POST /v1/token")
            let first = signIn["refreshToken"]
            let rotated = try await http.json("POST", latchkey + "/v1/token", ["grant_type": "refresh_token", "refresh_token": first])
            let current = try await http.json("POST", latchkey + "/v1/token", ["grant_type": "refresh_token", "refresh_token": rotated["refreshToken"]])
            say.detail("a new access token and a new refresh token each time; each refresh token works once")

            say.step("Someone replays the first refresh token")
            try await Task.sleep(for: .milliseconds(1200))
            let replay = try await http.json("POST", latchkey + "/v1/token", ["grant_type": "refresh_token", "refresh_token": first], expectError: true)
            say.detail("\(replay["error"]): \(replay["error_description"])")
            let dead = try await http.json(
                "POST", latchkey + "/v1/token", ["grant_type": "refresh_token", "refresh_token": current["refreshToken"]], expectError: true)
            say.detail("and the legitimate successor died with it: \(dead["error"])")

            say.step("Someone who stole her identity token tries to sign in with it")
            let stolen = try await http.json("POST", latchkey + "/v1/auth/apple", ["identityToken": apple["identityToken"]], expectError: true)
            say.detail("without the app's raw nonce: \(stolen["error"])")
            let replayed = try await http.json(
                "POST", latchkey + "/v1/auth/apple", ["identityToken": apple["identityToken"], "rawNonce": nonce], expectError: true)
            say.detail("even with it: \(replayed["error"]) — each identity token starts one session")

            /// A fresh native sign-in at the emulator, sent to Latchkey as an app would.
            func signInAgain() async throws -> Reply {
                let nonce = PKCE.makeVerifier()
                let apple = try await http.json(
                    "POST", running.baseURL + "/emulator/authorizations", ["sub": sub, "clientId": clientID, "nonce": hashedNonce(nonce)])
                return try await http.json(
                    "POST", latchkey + "/v1/auth/apple",
                    ["identityToken": apple["identityToken"], "authorizationCode": apple["authorizationCode"], "rawNonce": nonce])
            }

            say.step("Jane signs in again; Apple shares no name this time, Latchkey keeps the first one")
            signIn = try await signInAgain()
            let again = signIn.child("user")
            say.detail("same user: \(again["id"]) · name \(again["givenName"]) · isNewUser \(signIn.flag("isNewUser"))")

            say.step("In Settings, Jane stops using Sign in with Apple for the app; Apple notifies the server")
            _ = try await http.json("POST", running.baseURL + "/emulator/users/\(sub)/consent-revocation", [:], expectEmpty: true)
            var refreshToken = signIn["refreshToken"]
            var revoked = Reply(object: [:])
            for _ in 0..<100 {
                revoked = try await http.json(
                    "POST", latchkey + "/v1/token", ["grant_type": "refresh_token", "refresh_token": refreshToken], expectError: true, allowSuccess: true)
                if revoked.has("error") { break }
                refreshToken = revoked["refreshToken"]
                try await Task.sleep(for: .milliseconds(50))
            }
            say.detail("the session is gone: \(revoked["error"]) — \(revoked["error_description"])")

            say.detail("the Apple identity was her only one, so the account went with it")

            say.step("Jane signs in with Apple once more: a new account")
            signIn = try await signInAgain()
            say.detail("isNewUser \(signIn.flag("isNewUser")) · user \(signIn.child("user")["id"])")

            say.step("In the app's settings she links her Google account: POST /v1/me/identities/google with a code and its PKCE verifier")
            let verifier = PKCE.makeVerifier()
            let google = try await http.json(
                "POST", running.baseURL + "/emulator/authorizations",
                ["provider": "google", "sub": sub, "clientId": clientID, "codeChallenge": PKCE.challenge(for: verifier)])
            let linked = try await http.json(
                "POST", latchkey + "/v1/me/identities/google", ["authorizationCode": google["authorizationCode"], "codeVerifier": verifier],
                bearer: signIn["accessToken"])
            let providers = (linked.object["identities"] as? [[String: Any]] ?? []).compactMap { $0["provider"] as? String }
            say.detail("identities: \(providers.joined(separator: " + ")) — linked because she was signed in, never because an e-mail matched")
            say.detail("Latchkey redeemed the code at Google with the verifier and sealed Google's refresh token")

            say.step("On her Mac she signs in with Google: POST /v1/auth/google")
            let macNonce = PKCE.makeVerifier()
            let mac = try await http.json(
                "POST", running.baseURL + "/emulator/authorizations", ["provider": "google", "sub": sub, "clientId": clientID, "nonce": hashedNonce(macNonce)])
            let viaGoogle = try await http.json("POST", latchkey + "/v1/auth/google", ["idToken": mac["idToken"], "rawNonce": macNonce])
            say.detail(
                "same user: \(viaGoogle.child("user")["id"] == signIn.child("user")["id"]) · isNewUser \(viaGoogle.flag("isNewUser")) · provider google"
            )

            say.step("Her friend Tom, who has an account from his iPad, tries the app on a new phone as a guest: POST /v1/auth/anonymous")
            let tomUser = try await http.json("POST", running.baseURL + "/emulator/users", ["email": "tom@example.com", "givenName": "Tom"])
            func tomApple() async throws -> (token: String, nonce: String) {
                let tomNonce = PKCE.makeVerifier()
                let minted = try await http.json(
                    "POST", running.baseURL + "/emulator/authorizations", ["sub": tomUser["sub"], "clientId": clientID, "nonce": hashedNonce(tomNonce)])
                return (minted["identityToken"], tomNonce)
            }
            let ipad = try await tomApple()
            let tom = try await http.json("POST", latchkey + "/v1/auth/apple", ["identityToken": ipad.token, "rawNonce": ipad.nonce])
            let guest = try await http.json("POST", latchkey + "/v1/auth/anonymous", [:])
            say.detail(
                "guest \(guest.child("user")["id"]) · isAnonymous \(guest.child("user").flag("isAnonymous")) · no account asked for (guideline 5.1.1(v))")
            say.step("Later he signs in with Apple on that phone: his Apple account is already a user, so the link offers a merge")
            let offered = try await tomApple()
            let refused = try await http.json(
                "POST", latchkey + "/v1/me/identities/apple", ["identityToken": offered.token, "rawNonce": offered.nonce], bearer: guest["accessToken"],
                expectError: true)
            say.detail("\(refused["error"]) · mergeable \(refused.flag("mergeable"))")
            let proof = try await tomApple()
            let merged = try await http.json(
                "POST", latchkey + "/v1/me/merge/apple", ["identityToken": proof.token, "rawNonce": proof.nonce], bearer: guest["accessToken"])
            say.detail(
                "POST /v1/me/merge/apple → a session of his account \(merged.child("user")["id"]) (the same as his iPad's: \(merged.child("user")["id"] == tom.child("user")["id"]))"
            )
            if await backend.waitFor(type: "user.merged", userID: tom.child("user")["id"]) != nil {
                say.detail("the app's backend got webhook user.merged (fromUserId the guest, intoUserId Tom) and moves the guest's rows to Tom")
            } else {
                say.detail("the app's backend did not get user.merged within 10 s (latchkey webhooks list shows why)")
            }

            say.step("Then Jane deletes her account in the app: DELETE /v1/me")
            let deletion = try await http.json("DELETE", latchkey + "/v1/me", bearer: viaGoogle["accessToken"])
            let log = try await http.array("GET", running.baseURL + "/emulator/requests")
            func calls(_ endpoint: String) -> String {
                log.filter { $0["endpoint"] as? String == endpoint }.map { "\($0["status"] ?? "?")" }.joined(separator: ", ")
            }
            say.detail(
                "provider grants revoked: \(deletion["tokensRevoked"]) · \"Apple\" received POST /auth/revoke → \(calls("/auth/revoke")), as the App Store requires; \"Google\" POST /google/revoke → \(calls("/google/revoke"))"
            )
            let userID = viaGoogle.child("user")["id"]
            if let heard = await backend.waitFor(type: "user.deleted", userID: userID) {
                say.detail(
                    "the app's backend got webhook user.deleted (reason \(heard.reason ?? "none"), signature verified, webhook-id \(heard.id.prefix(16))…) and deletes Jane's data too"
                )
            } else {
                say.detail("the app's backend did not get user.deleted within 10 s (latchkey webhooks list shows why)")
            }

            say.step("And when something is wrong, Latchkey says what")
            let other = try await http.json(
                "POST", running.baseURL + "/emulator/authorizations",
                [
                    "sub": try await http.json("POST", running.baseURL + "/emulator/users", [:])["sub"], "clientId": clientID,
                    "nonce": "hashed-nonce-from-the-app",
                ])
            let wrong = try await http.json(
                "POST", latchkey + "/v1/auth/apple", ["identityToken": other["identityToken"], "rawNonce": "some-other-nonce"], expectError: true)
            say.detail("\(wrong["error"]): \(wrong["error_description"])")
            say.step("Done. Next: `latchkey serve --dev` to run both for your app, `swift run -c release latchkey-bench` for figures.")
        } catch {
            await http.shutdown()
            await backend.stop()
            await group.triggerGracefulShutdown()
            _ = try? await serverTask.value
            await running.stop()
            await store.close()
            throw error
        }
        await http.shutdown()
        await backend.stop()
        await group.triggerGracefulShutdown()
        _ = try? await serverTask.value
        await running.stop()
        await store.close()
    }

}

/// A JSON object read leniently for narration: missing values read as empty strings.
struct Reply: @unchecked Sendable {  // holds JSONSerialization output, which is immutable
    let object: [String: Any]
    subscript(_ key: String) -> String {
        guard let value = object[key] else { return "" }
        return "\(value)"
    }
    func child(_ key: String) -> Reply { Reply(object: object[key] as? [String: Any] ?? [:]) }
    func has(_ key: String) -> Bool { object[key] != nil }
    /// A JSON boolean as `true`/`false` (Foundation hands them over as numbers).
    func flag(_ key: String) -> String { (object[key] as? NSNumber)?.boolValue == true ? "true" : "false" }
}

/// A small JSON-over-HTTP client for the demo's narration.
final class DemoHTTP: Sendable {
    private let client = HTTPClient(eventLoopGroupProvider: .singleton)

    func shutdown() async { try? await client.shutdown() }

    func json(
        _ method: String, _ url: String, _ body: [String: any Sendable]? = nil, bearer: String? = nil, expectError: Bool = false, expectEmpty: Bool = false,
        allowSuccess: Bool = false
    ) async throws -> Reply {
        let (status, bytes) = try await send(method, url, body, bearer: bearer)
        guard expectError || (200..<300).contains(status) else {
            throw CLIError("\(method) \(url) answered \(status): \(String(decoding: bytes, as: UTF8.self))")
        }
        if expectError, !allowSuccess, (200..<300).contains(status) { throw CLIError("\(method) \(url) unexpectedly succeeded") }
        if expectEmpty || bytes.isEmpty { return Reply(object: [:]) }
        return Reply(object: (try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]) ?? [:])
    }

    func array(_ method: String, _ url: String) async throws -> [[String: Any]] {
        let (_, bytes) = try await send(method, url, nil, bearer: nil)
        return (try JSONSerialization.jsonObject(with: Data(bytes)) as? [[String: Any]]) ?? []
    }

    private func send(_ method: String, _ url: String, _ body: [String: any Sendable]?, bearer: String?) async throws -> (Int, [UInt8]) {
        var request = HTTPClientRequest(url: url)
        request.method = HTTPMethod(rawValue: method)
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: Array(try JSONSerialization.data(withJSONObject: body))))
        }
        let response = try await client.execute(request, timeout: .seconds(15))
        return (Int(response.status.code), Array(buffer: try await response.body.collect(upTo: 1 << 20)))
    }
}

/// Prints numbered steps, in colour only on a terminal.
struct Narrator {
    private let colour = isatty(STDOUT_FILENO) == 1
    private final class Counter: @unchecked Sendable { var value = 0 }  // used from the command's task only
    private let counter = Counter()

    func step(_ text: String) {
        counter.value += 1
        print(colour ? "\u{1B}[1m\(counter.value). \(text)\u{1B}[0m" : "\(counter.value). \(text)")
        flushStandardOutput()
    }

    func detail(_ text: String) {
        print("   " + text)
        flushStandardOutput()
    }
}

/// The demo app's backend: receives Latchkey's webhooks on loopback and keeps those whose signature verifies.
final class DemoBackend: Sendable {
    let secret = WebhookEndpoint.generateSecret()
    private let port = Mutex(0)
    private let heard = Mutex<[LatchkeyWebhookEvent]>([])
    private let task = Mutex<Task<Void, any Error>?>(nil)

    var url: String { "http://127.0.0.1:\(port.withLock { $0 })/webhooks" }

    static func start(logger: Logger) async throws -> DemoBackend {
        let backend = DemoBackend()
        // What an app's Swift backend would use: LatchkeyBackend's verifier.
        let verifier = try WebhookVerifier(secret: backend.secret)
        let router = Router()
        router.post("/webhooks") { request, _ -> HTTPResponse.Status in
            let body = try await request.body.collect(upTo: 64 * 1024)
            let headers = Dictionary(request.headers.map { ($0.name.canonicalName, $0.value) }, uniquingKeysWith: { first, _ in first })
            guard let event = try? verifier.verify(body: body.readableBytesView, headers: headers) else { return .badRequest }
            backend.heard.withLock { $0.append(event) }
            return .noContent
        }
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: logger)
        backend.task.withLock { $0 = Task { try await application.runService() } }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else { throw CLIError("the demo backend did not start") }
        backend.port.withLock { $0 = port }
        return backend
    }

    /// The first verified event of `type` for `userID`, waiting up to 10 s (deliveries go out about once a second).
    func waitFor(type: String, userID: String) async -> LatchkeyWebhookEvent? {
        for _ in 0..<100 {
            if let found = heard.withLock({ $0.first { $0.type == type && $0.userID == userID } }) { return found }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }

    func stop() async {
        let running = task.withLock { $0 }
        running?.cancel()
        _ = try? await running?.value
    }
}

extension LatchkeyWebhookEvent {
    /// `data.reason` as text (`user.deleted` has one).
    fileprivate var reason: String? {
        if case .string(let reason)? = data["reason"] { return reason }
        return nil
    }
}
