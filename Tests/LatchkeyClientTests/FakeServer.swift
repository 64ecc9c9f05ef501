import Foundation
import LatchkeyJOSE
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
/// and otherwise revokes the session (reuse detection) with 400 `invalid_grant`. DPoP as the server does it too: a
/// proof is checked wherever one comes (DPoPProofCheck, each `jti` once), a sign-in with one binds its session (`DPoP`
/// tokens), a bound session refreshes only with a proof by its key and its tokens go only as `DPoP` with one; with
/// ``dpopNonce`` set, a proof without it is answered `use_dpop_nonce`.
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
    /// Every request, as it came.
    private(set) var requests: [URLRequest] = []
    /// The nonce every proof must carry, when set.
    var dpopNonce: String?
    /// Whether the nonce changes right after each `use_dpop_nonce` answer, so a retry with the one answered never passes.
    var noncesNeverSettle = false
    private var spentProofs: Set<String> = []
    /// The key thumbprint of each bound session family.
    private(set) var boundFamilies: [Int: String] = [:]
    /// `POST /v1/attest/challenge`s answered, and whether sign-ins carrying `appAttest` are refused (`invalid_attestation`).
    private(set) var attestChallenges = 0
    var refusesAttestation = false
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
    func set(dpopNonce nonce: String?, neverSettles: Bool = false) {
        dpopNonce = nonce
        noncesNeverSettle = neverSettles
    }
    func set(refusesAttestation refuses: Bool) { refusesAttestation = refuses }
    func resetRequests() { requests = [] }
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
        requests.append(request)
        let proof: VerifiedDPoPProof?
        switch checkProof(request, path: path) {
        case .success(let verified): proof = verified
        case .failure(let refusal): return refusal.answer
        }
        switch (request.httpMethod ?? "GET", path) {
        case ("POST", "/v1/token"):
            return try await refresh(request, proof: proof)
        case ("POST", "/v1/attest/challenge"):
            attestChallenges += 1
            counter += 1
            return Self.json(200, ["challenge": "attest-challenge-\(counter)", "expiresIn": 300])
        case ("POST", "/v1/logout"):
            guard let access = bearer(request, proof: proof) else { return Self.error(401, "invalid_token") }
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
            let pair = issue(userID: userID, family: counter, proof: proof)
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
            if body["appAttest"] != nil, refusesAttestation { return Self.error(401, "invalid_attestation") }
            counter += 1
            let pair = issue(userID: userID, family: counter, proof: proof)
            let user = UserResponse(
                id: userID, email: nil, emailVerified: nil, givenName: nil, familyName: nil, createdAt: clock.now, identities: [])
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            return Self.answer(200, try encoder.encode(SignInResponse(tokens: pair, user: user, isNewUser: true)))
        case ("GET", "/v1/me"):
            guard let access = bearer(request, proof: proof) else { return Self.error(401, "invalid_token") }
            meRequests += 1
            let user = UserResponse(
                id: access.userID, email: nil, emailVerified: nil, givenName: givenNames[access.userID], familyName: nil, createdAt: clock.now,
                identities: [])
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            return Self.answer(200, try encoder.encode(user))
        default:
            resourceRequests += 1
            guard let access = bearer(request, proof: proof) else { return Self.error(401, "invalid_token") }
            return Self.answer(200, Data("hello \(access.userID)".utf8))
        }
    }

    private func refresh(_ request: URLRequest, proof: VerifiedDPoPProof?) async throws -> (Data, HTTPURLResponse) {
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
        if let bound = boundFamilies[record.family], proof?.thumbprint != bound { return Self.error(400, "invalid_dpop_proof") }
        let pair: TokenPairResponse
        if let successor = record.successor {
            guard recoversUnusedSuccessor, presented[successor.refreshToken, default: 0] == 0 else {
                reuseDetections += 1
                revokedFamilies.insert(record.family)
                return Self.error(400, "invalid_grant")
            }
            pair = successor
        } else {
            pair = issue(userID: record.userID, family: record.family, proof: proof)
            record.successor = pair
            refreshTokens[token] = record
        }
        await beforeRefreshAnswer?()
        if let lost { throw lost }
        return Self.answer(200, try JSONEncoder().encode(pair))
    }

    /// A pair of `family`, bound to the key of `proof` when there is one (a session stays bound once it is).
    private func issue(userID: String, family: Int, proof: VerifiedDPoPProof? = nil) -> TokenPairResponse {
        counter += 1
        if let proof { boundFamilies[family] = proof.thumbprint }
        let pair = TokenPairResponse(
            accessToken: "at-\(userID)-\(counter)", tokenType: boundFamilies[family] == nil ? "Bearer" : "DPoP", expiresIn: accessLifetime,
            refreshToken: "rt-\(userID)-\(counter)")
        accessTokens[pair.accessToken] = (userID, family, clock.now.addingTimeInterval(TimeInterval(accessLifetime)))
        refreshTokens[pair.refreshToken] = RefreshRecord(userID: userID, family: family)
        return pair
    }

    /// The access token of the request, when it is valid and presented as its binding requires: a bound one as `DPoP`
    /// with a proof by its key (checked with `ath` already), an unbound one as `Bearer`.
    private func bearer(_ request: URLRequest, proof: VerifiedDPoPProof?) -> (userID: String, family: Int, expiresAt: Date)? {
        guard let header = request.value(forHTTPHeaderField: "Authorization"), let space = header.firstIndex(of: " "),
            let access = accessTokens[String(header[header.index(after: space)...])], access.expiresAt > clock.now,
            !revokedFamilies.contains(access.family)
        else { return nil }
        switch (header[..<space], boundFamilies[access.family]) {
        case ("Bearer", nil): return access
        case ("DPoP", let bound?) where proof?.thumbprint == bound: return access
        default: return nil
        }
    }

    struct Refusal: Error {
        let answer: (Data, HTTPURLResponse)
    }

    /// The request's DPoP proof, verified as the server does (for its method and URL, with `ath` when a `DPoP` token
    /// goes with it, each `jti` once, and the nonce when one is required); nil without one.
    private func checkProof(_ request: URLRequest, path: String) -> Result<VerifiedDPoPProof?, Refusal> {
        guard let header = request.value(forHTTPHeaderField: "DPoP") else { return .success(nil) }
        let atTokenEndpoint = path.hasPrefix("/v1/auth/") || path == "/v1/token" || path == "/v1/attest/challenge"
        func refuse(_ code: String, nonce: String? = nil) -> Result<VerifiedDPoPProof?, Refusal> {
            let body = try! JSONEncoder().encode(OAuthErrorResponse(error: code, errorDescription: "fake server: \(code)"))
            var headers = nonce.map { ["DPoP-Nonce": $0] } ?? [:]
            guard atTokenEndpoint else {
                headers["WWW-Authenticate"] = #"DPoP error="\#(code)", algs="ES256""#
                return .failure(Refusal(answer: Self.answer(401, body, headers)))
            }
            return .failure(Refusal(answer: Self.answer(400, body, headers)))
        }
        let authorization = request.value(forHTTPHeaderField: "Authorization")
        let token = authorization.flatMap { $0.hasPrefix("DPoP ") ? String($0.dropFirst(5)) : nil }
        guard
            let proof = try? DPoPProofCheck(timeSource: clock.source).verify(
                header, method: request.httpMethod ?? "GET", url: request.url?.absoluteString ?? "", accessToken: token)
        else { return refuse("invalid_dpop_proof") }
        guard spentProofs.insert(proof.jti).inserted else { return refuse("invalid_dpop_proof") }
        if let dpopNonce, proof.nonce != dpopNonce {
            if noncesNeverSettle {
                // The nonce answered is replaced at once: a retry with it is refused too.
                counter += 1
                self.dpopNonce = "nonce-\(counter)"
            }
            return refuse("use_dpop_nonce", nonce: dpopNonce)
        }
        return .success(proof)
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
