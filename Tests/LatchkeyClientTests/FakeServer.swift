import Foundation
import LatchkeyModels
import LatchkeyTestSupport

@testable import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Opens once; everyone waiting goes on.
final class Gate: @unchecked Sendable {
    // @unchecked: every field is only used while holding `lock`.
    private let lock = NSLock()
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        await withCheckedContinuation { continuation in
            let go = lock.withLock {
                if isOpen { return true }
                waiters.append(continuation)
                return false
            }
            if go { continuation.resume() }
        }
    }

    func open() {
        let waiting = lock.withLock {
            isOpen = true
            defer { waiters = [] }
            return waiters
        }
        for waiter in waiting { waiter.resume() }
    }
}

/// Latchkey's wire contract in memory, with rotation as the real server does it: each refresh token works once;
/// presenting it again answers the same successor while that successor is unused (`session.unusedSuccessorRecovery`),
/// and otherwise revokes the session (reuse detection) with 400 `invalid_grant`.
actor FakeServer: LatchkeyTransport {
    enum Fault {
        /// Answers instead of the server: a proxy's page, a 503, a 429…
        case answer(Int, String, [String: String] = [:])
        /// No answer at all.
        case fail(any Error)
        /// The server rotates and commits, then the answer is lost.
        case commitThenFail(any Error)
    }

    private struct RefreshRecord {
        var userID: String
        var family: Int
        var successor: TokenPairResponse?
    }

    let clock: MutableClock
    var accessLifetime = 900
    var recoversUnusedSuccessor = true
    /// Answers the next refresh requests, in order.
    var faults: [Fault] = []
    /// Awaited after a rotation is committed, before it is answered.
    var beforeRefreshAnswer: (@Sendable () async -> Void)?

    private(set) var refreshRequests = 0
    private(set) var presented: [String: Int] = [:]
    private(set) var reuseDetections = 0
    private(set) var logouts = 0
    private(set) var resourceRequests = 0
    private(set) var meRequests = 0
    /// What `GET /v1/me` answers as each user's given name.
    var givenNames: [String: String] = [:]
    private(set) var signInBodies: [String: Data] = [:]
    /// Whether `POST /v1/auth/passkey/signup/options` answers (`passkeys.allowSignUp`), and with a `challengeId`.
    var passkeySignUpOpen = true
    var passkeyChallengeIDs = true
    private var passkeyChallenges: Set<String> = []
    private var refreshTokens: [String: RefreshRecord] = [:]
    private var accessTokens: [String: (userID: String, family: Int, expiresAt: Date)] = [:]
    private var revokedFamilies: Set<Int> = []
    private var counter = 0

    init(clock: MutableClock) {
        self.clock = clock
    }

    func set(faults: [Fault]) { self.faults = faults }
    func set(givenName: String, of userID: String) { givenNames[userID] = givenName }
    func set(beforeRefreshAnswer hook: (@Sendable () async -> Void)?) { beforeRefreshAnswer = hook }
    func set(recoversUnusedSuccessor value: Bool) { recoversUnusedSuccessor = value }
    func set(passkeySignUpOpen open: Bool, challengeIDs: Bool = true) {
        passkeySignUpOpen = open
        passkeyChallengeIDs = challengeIDs
    }

    /// Makes every access token issued so far fail with 401 (the session lives on).
    func rejectIssuedAccessTokens() { accessTokens = [:] }

    /// Ends a user's sessions as an administrator would.
    func revokeSessions(of userID: String) {
        for record in refreshTokens.values where record.userID == userID { revokedFamilies.insert(record.family) }
    }

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let path = request.url?.path ?? ""
        switch (request.httpMethod ?? "GET", path) {
        case ("POST", "/v1/token"):
            return try await refresh(request)
        case ("POST", "/v1/logout"):
            guard let access = bearer(request) else { return Self.error(401, "invalid_token") }
            revokedFamilies.insert(access.family)
            logouts += 1
            return Self.json(200, ["revokedSessions": 1])
        case ("POST", "/v1/auth/passkey/signup/options"):
            signInBodies["passkey/signup/options"] = request.httpBody
            guard passkeySignUpOpen else { return Self.error(403, "signup_closed") }
            let body = try JSONDecoder().decode(PasskeySignUpOptionsRequest.self, from: request.httpBody ?? Data())
            counter += 1
            let options = PublicKeyCredentialCreationOptionsJSON(
                rp: .init(id: "example.com", name: "Example"),
                user: .init(
                    id: Base64URL.encode(Array("handle-\(counter)".utf8)), name: body.displayName ?? "Passkey", displayName: body.displayName ?? "Passkey"),
                challenge: Base64URL.encode(Array("challenge-\(counter)".utf8)), pubKeyCredParams: [.init(alg: -7)], timeout: 300_000, excludeCredentials: [],
                authenticatorSelection: .init(userVerification: "required"), challengeId: passkeyChallengeIDs ? "challenge-\(counter)" : nil)
            passkeyChallenges.insert("challenge-\(counter)")
            return Self.answer(200, try JSONEncoder().encode(options))
        case ("POST", "/v1/auth/passkey/signup"):
            signInBodies["passkey/signup"] = request.httpBody
            guard let body = try? JSONDecoder().decode(PasskeySignUpRequest.self, from: request.httpBody ?? Data()) else {
                return Self.error(400, "invalid_request")
            }
            guard passkeyChallenges.remove(body.challengeId) != nil else { return Self.error(400, "invalid_challenge") }
            counter += 1
            let userID = "passkey-user-\(counter)"
            let pair = issue(userID: userID, family: counter)
            let user = UserResponse(
                id: userID, email: nil, emailVerified: nil, givenName: body.name, familyName: nil, createdAt: clock.now,
                identities: [
                    .init(
                        provider: "passkey", subject: body.credential.id, email: nil, isPrivateEmail: nil, realUserStatus: nil, emailForwardingEnabled: nil,
                        firstSeenAt: clock.now)
                ])
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            return Self.answer(200, try encoder.encode(SignInResponse(tokens: pair, user: user, isNewUser: true)))
        case ("POST", let path) where path.hasPrefix("/v1/auth/"):
            let body = (try? JSONSerialization.jsonObject(with: request.httpBody ?? Data())) as? [String: Any] ?? [:]
            let provider = String(path.dropFirst("/v1/auth/".count))
            signInBodies[provider] = request.httpBody
            guard let userID = (body["identityToken"] ?? body["idToken"] ?? body["authorizationCode"]) as? String else {
                return Self.error(400, "invalid_request")
            }
            if userID == "refused" { return Self.error(401, "invalid_token") }
            counter += 1
            let pair = issue(userID: userID, family: counter)
            let user = UserResponse(
                id: userID, email: nil, emailVerified: nil, givenName: nil, familyName: nil, createdAt: clock.now, identities: [])
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            return Self.answer(200, try encoder.encode(SignInResponse(tokens: pair, user: user, isNewUser: true)))
        case ("GET", "/v1/me"):
            guard let access = bearer(request) else { return Self.error(401, "invalid_token") }
            meRequests += 1
            let user = UserResponse(
                id: access.userID, email: nil, emailVerified: nil, givenName: givenNames[access.userID], familyName: nil, createdAt: clock.now,
                identities: [])
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            return Self.answer(200, try encoder.encode(user))
        default:
            resourceRequests += 1
            guard let access = bearer(request) else { return Self.error(401, "invalid_token") }
            return Self.answer(200, Data("hello \(access.userID)".utf8))
        }
    }

    private func refresh(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        refreshRequests += 1
        let form = String(decoding: request.httpBody ?? Data(), as: UTF8.self)
        var fields: [String: String] = [:]
        for pair in form.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        guard request.value(forHTTPHeaderField: "Content-Type") == "application/x-www-form-urlencoded", fields["grant_type"] == "refresh_token",
            let token = fields["refresh_token"]
        else { return Self.error(400, "invalid_request") }
        presented[token, default: 0] += 1
        var lost: (any Error)?
        if !faults.isEmpty {
            switch faults.removeFirst() {
            case .answer(let status, let body, let headers): return Self.answer(status, Data(body.utf8), headers)
            case .fail(let error): throw error
            case .commitThenFail(let error): lost = error
            }
        }
        guard var record = refreshTokens[token], !revokedFamilies.contains(record.family) else { return Self.error(400, "invalid_grant") }
        let pair: TokenPairResponse
        if let successor = record.successor {
            guard recoversUnusedSuccessor, presented[successor.refreshToken, default: 0] == 0 else {
                reuseDetections += 1
                revokedFamilies.insert(record.family)
                return Self.error(400, "invalid_grant")
            }
            pair = successor
        } else {
            pair = issue(userID: record.userID, family: record.family)
            record.successor = pair
            refreshTokens[token] = record
        }
        await beforeRefreshAnswer?()
        if let lost { throw lost }
        return Self.answer(200, try JSONEncoder().encode(pair))
    }

    private func issue(userID: String, family: Int) -> TokenPairResponse {
        counter += 1
        let pair = TokenPairResponse(accessToken: "at-\(userID)-\(counter)", expiresIn: accessLifetime, refreshToken: "rt-\(userID)-\(counter)")
        accessTokens[pair.accessToken] = (userID, family, clock.now.addingTimeInterval(TimeInterval(accessLifetime)))
        refreshTokens[pair.refreshToken] = RefreshRecord(userID: userID, family: family)
        return pair
    }

    private func bearer(_ request: URLRequest) -> (userID: String, family: Int, expiresAt: Date)? {
        guard let header = request.value(forHTTPHeaderField: "Authorization"), header.hasPrefix("Bearer "),
            let access = accessTokens[String(header.dropFirst(7))], access.expiresAt > clock.now, !revokedFamilies.contains(access.family)
        else { return nil }
        return access
    }

    static func error(_ status: Int, _ code: String) -> (Data, HTTPURLResponse) {
        answer(status, try! JSONEncoder().encode(OAuthErrorResponse(error: code, errorDescription: "fake server: \(code)")))
    }

    static func json(_ status: Int, _ object: [String: Any]) -> (Data, HTTPURLResponse) {
        answer(status, try! JSONSerialization.data(withJSONObject: object))
    }

    static func answer(_ status: Int, _ body: Data, _ headers: [String: String] = [:]) -> (Data, HTTPURLResponse) {
        let url = URL(string: "https://auth.example.com")!
        return (body, HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!)
    }
}

/// A JSON object's fields, for looking at a request body.
func fields(_ body: Data?) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: body ?? Data())) as? [String: Any] ?? [:]
}
