import Crypto
import Foundation

/// Everything the emulator remembers, and the rules of Apple's endpoints, free of HTTP (the other providers'
/// rules are in EmulatorState+Providers.swift).
actor EmulatorState {
    private(set) var configuration: EmulatorConfiguration
    /// Each provider's RS256 signing keys, made when the provider first needs them: an RSA key takes a while to
    /// make, and most runs use one or two providers.
    private var keyRings: [CodeRecord.Provider: SigningKeyRing] = [:]
    private var clockOffset: TimeInterval = 0

    var users: [UUID: UserRecord] = [:]
    /// Every subject of every user (each team's, and one or more per other provider under the pseudo-team named
    /// after the provider), so a lookup costs the same with any number of users.
    private var usersBySubject: [String: (userID: UUID, teamID: String)] = [:]
    /// Users by lowercased e-mail, oldest first (nothing stops two users from sharing an address).
    private var usersByEmail: [String: [UUID]] = [:]
    private var consents: [String: ConsentRecord] = [:]
    /// Codes and access tokens, forgotten a while after they expire (`expiredRecordRetention`): add them with
    /// ``addCode(_:)`` and ``addAccessToken(_:lifetime:)``, which sweep away what has been forgotten.
    var codes: ExpiringRecords<CodeRecord>
    var grants: [String: GrantRecord] = [:]
    var accessTokens: ExpiringRecords<AccessTokenRecord>
    private var transfers: [String: TransferRecord] = [:]
    /// Apps moved to another team, oldest first.
    private var appTransfers: [AppTransferRecord] = []
    /// Refresh tokens, access tokens and transfer subjects of a user and team (keyed as consents), so revoking
    /// and signing look at that user's records only. Access tokens leave theirs when they are swept.
    var grantsByAuthorization: [String: [String]] = [:]
    var accessTokensByAuthorization: [String: Set<String>] = [:]
    private var transfersByAuthorization: [String: [String]] = [:]
    private var faults: [FaultSpec] = []
    /// The request log: a ring of at most `configuration.requestLogCapacity` entries, the oldest at `logStart`.
    private var log: [RequestRecord] = []
    private var logStart = 0
    private var deliveries: [String: NotificationRecord] = [:]
    /// The development mailbox (`POST`/`GET /emulator/mail`): the newest 1,000 messages.
    private var mail: [MailRecord] = []
    /// The App Attest stand-in's keys by key id (EmulatorState+AppAttest.swift).
    var appAttestKeys: [[UInt8]: AppAttestKeyRecord] = [:]
    private let outbox: AsyncStream<PendingNotification>.Continuation
    let pendingNotifications: AsyncStream<PendingNotification>

    init(configuration: EmulatorConfiguration) {
        self.configuration = configuration
        codes = ExpiringRecords(retention: configuration.expiredRecordRetention)
        accessTokens = ExpiringRecords(retention: configuration.expiredRecordRetention)
        (pendingNotifications, outbox) = AsyncStream.makeStream()
    }

    /// Keeps a message for `GET /emulator/mail`, dropping the oldest past 1,000.
    func deliverMail(_ message: MailRecord) {
        mail.append(message)
        if mail.count > 1000 { mail.removeFirst(mail.count - 1000) }
    }

    /// The messages to `address` (case-insensitively), oldest first; every message when nil.
    func mail(to address: String?) -> [MailRecord] {
        guard let address = address?.lowercased() else { return mail }
        return mail.filter { $0.to.lowercased() == address }
    }

    /// The emulator's clock: real time plus the offset set through the control API.
    var now: Date { Date().addingTimeInterval(clockOffset) }

    func setClockOffset(_ seconds: TimeInterval) { clockOffset = seconds }

    /// Points an app's server-to-server notifications somewhere else (nil stops them); false for an unknown client id.
    func setNotificationURL(_ url: String?, clientID: String) -> Bool {
        guard let index = configuration.apps.firstIndex(where: { $0.clientID == clientID }) else { return false }
        configuration.apps[index].notificationURL = url
        return true
    }

    /// `provider`'s signing keys, made on first use.
    func keys(_ provider: CodeRecord.Provider) throws(ProviderOAuthError) -> SigningKeyRing {
        if let ring = keyRings[provider] { return ring }
        guard let makeKeyID = provider.profile.keyID else {
            throw ProviderOAuthError(status: 500, code: "server_error", description: "\(provider.name) has no signing keys")
        }
        do {
            let ring = try SigningKeyRing(makeKeyID: makeKeyID)
            keyRings[provider] = ring
            return ring
        } catch {
            throw ProviderOAuthError(status: 500, code: "server_error", description: "could not make a signing key")
        }
    }

    /// `provider`'s JWKS document as its key route publishes it: `alg` RS256 on each key unless its profile says
    /// otherwise (Microsoft's carry no `alg` and a per-key `issuer`, its template).
    func jwks(_ provider: CodeRecord.Provider) throws(ProviderOAuthError) -> [String: [[String: String]]] {
        try keys(provider).jwks(algorithm: provider.profile.jwksAlgorithm, extra: provider.profile.jwksExtras)
    }

    /// Rotates `providers`' keys; false when one of them has no keys (Dropbox).
    func rotateKeys(_ providers: [CodeRecord.Provider] = [.apple, .google]) throws -> Bool {
        guard providers.allSatisfy({ $0.profile.keyID != nil }) else { return false }
        for provider in providers {
            var ring = try keys(provider)
            try ring.rotate()
            keyRings[provider] = ring
        }
        return true
    }

    // MARK: - Users

    /// A user not yet added, with every subject it will answer to. Hashing the subjects is most of the cost
    /// of a user, so many can be made off the actor and added at once.
    struct NewUser: Sendable {
        var record: UserRecord
        let subjects: [(sub: String, teamID: String)]

        /// `givenSubjects` are ``UserRecord/givenSubjects``: subjects the user already has, by team id or provider name.
        init(
            email: String?, hideMyEmail: Bool, realUserStatus: Int, givenName: String?, familyName: String?, teamIDs: [String],
            microsoftTenant: String = Identifiers.microsoftConsumersTenant, givenSubjects: [String: String] = [:]
        ) {
            let id = UUID()
            record = UserRecord(
                id: id,
                email: email ?? "user-\(Identifiers.randomAlphanumeric(6))@example.com",
                hideMyEmail: hideMyEmail,
                realUserStatus: realUserStatus,
                givenName: givenName,
                familyName: familyName,
                microsoftTenant: microsoftTenant,
                givenSubjects: givenSubjects
            )
            subjects = EmulatorState.subjects(of: record, teamIDs: teamIDs)
        }
    }

    func createUser(
        email: String?, hideMyEmail: Bool, realUserStatus: Int, givenName: String?, familyName: String?,
        microsoftTenant: String = Identifiers.microsoftConsumersTenant, relayDomain: String = Identifiers.relayDomains[0],
        givenSubjects: [String: String] = [:]
    ) -> UserRecord {
        var user = NewUser(
            email: email, hideMyEmail: hideMyEmail, realUserStatus: realUserStatus, givenName: givenName, familyName: familyName,
            teamIDs: configuration.teams.map(\.teamID), microsoftTenant: microsoftTenant, givenSubjects: givenSubjects
        )
        user.record.relayDomain = relayDomain
        add([user])
        return user.record
    }

    /// The providers whose subject a new user may be given (``createUser(email:hideMyEmail:realUserStatus:givenName:familyName:microsoftTenant:relayDomain:subjects:)``).
    static let givableSubjects: Set<String> = ["apple", "google"]

    /// A user who already exists at Apple or Google: `subjects` by provider name, `apple` being the user's subject under
    /// the default team. Refused when another user has one of them, or when there is no team for an Apple subject.
    func createUser(
        email: String?, hideMyEmail: Bool, realUserStatus: Int, givenName: String?, familyName: String?, microsoftTenant: String, relayDomain: String,
        subjects: [String: String]
    ) throws(ControlRefusal) -> UserRecord {
        var given: [String: String] = [:]
        for (provider, sub) in subjects.sorted(by: { $0.key < $1.key }) {
            guard Self.givableSubjects.contains(provider) else { throw ControlRefusal("subjects takes apple and google only, not \(provider)") }
            guard !sub.isEmpty else { throw ControlRefusal("subjects.\(provider) is empty") }
            guard let key = provider == "apple" ? defaultTeamID : provider else { throw ControlRefusal("no team is configured for an Apple subject") }
            if let (other, teamID) = usersBySubject[sub] {
                throw ControlRefusal("subject \(sub) is already user \(other.uuidString.lowercased())'s (under \(teamID))")
            }
            guard !given.values.contains(sub) else { throw ControlRefusal("subjects.apple and subjects.google must differ") }
            given[key] = sub
        }
        return createUser(
            email: email, hideMyEmail: hideMyEmail, realUserStatus: realUserStatus, givenName: givenName, familyName: familyName,
            microsoftTenant: microsoftTenant, relayDomain: relayDomain, givenSubjects: given)
    }

    /// Adds users made with ``NewUser`` (under this emulator's teams).
    func add(_ newUsers: [NewUser]) {
        for user in newUsers {
            users[user.record.id] = user.record
            for (sub, teamID) in user.subjects { usersBySubject[sub] = (user.record.id, teamID) }
            usersByEmail[user.record.email.lowercased(), default: []].append(user.record.id)
        }
    }

    /// Every subject of a user: one per team, then the other providers' under pseudo-teams named after the
    /// provider (`google`, `microsoft` for both `sub` and `oid`, …), as their profiles say.
    /// A subject the user was given (``UserRecord/givenSubjects``) replaces the derived one of its team or provider.
    static func subjects(of user: UserRecord, teamIDs: [String]) -> [(sub: String, teamID: String)] {
        let other = Identifiers.ProviderSubjects(userID: user.id)
        return teamIDs.map { (appleSubject(of: user, teamID: $0), $0) }
            + ProviderProfiles.all.filter { $0.provider != .apple }.flatMap { profile in
                let name = profile.provider.name
                return (user.givenSubjects[name].map { [$0] } ?? profile.lookupSubjects?(other) ?? [profile.subject(other)]).map { ($0, name) }
            }
    }

    /// The user's subject under `teamID`: the one given at creation, else derived from the user and team.
    static func appleSubject(of user: UserRecord, teamID: String) -> String {
        user.givenSubjects[teamID] ?? Identifiers.appleSubject(userID: user.id, teamID: teamID)
    }

    private func removeUser(_ id: UUID) {
        guard let user = users.removeValue(forKey: id) else { return }
        for (sub, _) in Self.subjects(of: user, teamIDs: configuration.teams.map(\.teamID)) where usersBySubject[sub]?.userID == id {
            usersBySubject[sub] = nil
        }
        let email = user.email.lowercased()
        usersByEmail[email]?.removeAll { $0 == id }
        if usersByEmail[email]?.isEmpty == true { usersByEmail[email] = nil }
    }

    /// The user whose subject (under any team) is `sub`, with that team.
    func user(bySubject sub: String) -> (UserRecord, teamID: String)? {
        guard let (userID, teamID) = usersBySubject[sub], let user = users[userID] else { return nil }
        return (user, teamID)
    }

    func user(byEmail email: String) -> UserRecord? { usersByEmail[email.lowercased()]?.first.flatMap { users[$0] } }

    func subject(of user: UserRecord, teamID: String) -> String { Self.appleSubject(of: user, teamID: teamID) }

    /// The address apps of `teamID` see: the relay address when the user hides their e-mail.
    func visibleEmail(of user: UserRecord, teamID: String) -> String {
        user.hideMyEmail ? Identifiers.relayEmail(userID: user.id, teamID: teamID, domain: user.relayDomain) : user.email
    }

    var defaultTeamID: String? { configuration.teams.first?.teamID }

    // MARK: - Sign-in

    struct SignIn: Sendable {
        let code: String
        let identityToken: String
        /// Name and e-mail, only on the user's first authorization of the team's apps.
        let user: [String: Claim]?
    }

    /// What an iPhone hands the app after a native sign-in, or what `/auth/authorize` returns on the web.
    func signIn(userID: UUID, clientID: String, redirectURI: String?, nonce: String?, scopes: Set<String>, native: Bool) async throws(AppleOAuthError) -> SignIn
    {
        guard let app = configuration.app(clientID) else { throw AppleOAuthError(code: "invalid_client", detail: "client_id \(clientID) is not registered") }
        guard let user = users[userID] else { throw AppleOAuthError(code: "invalid_request", detail: "no such user") }
        let consentKey = Self.consentKey(userID, app.teamID)
        var sharedUser: [String: Claim]?
        if let existing = consents[consentKey] {
            consents[consentKey]?.scopes = existing.scopes.union(scopes)
            consents[consentKey]?.clientIDs.insert(clientID)
        } else {
            consents[consentKey] = ConsentRecord(scopes: scopes, firstAuthorizedAt: now, clientIDs: [clientID])
            if !scopes.isEmpty { sharedUser = userJSON(user, teamID: app.teamID, scopes: scopes) }
        }
        let code = Identifiers.authorizationCode()
        addCode(
            CodeRecord(
                code: code, provider: .apple, userID: userID, clientID: clientID, redirectURI: redirectURI, nonce: nonce,
                scopes: scopes, createdAt: now, native: native, codeChallenge: nil, codeChallengeMethod: nil
            ))
        let claims = appleIDTokenClaims(user: user, app: app, nonce: nonce, native: native, code: code, accessToken: nil)
        do {
            return SignIn(code: code, identityToken: try await keys(.apple).sign(claims), user: sharedUser)
        } catch {
            throw AppleOAuthError(code: "server_error", detail: "signing failed")
        }
    }

    private func userJSON(_ user: UserRecord, teamID: String, scopes: Set<String>) -> [String: Claim] {
        var json: [String: Claim] = [:]
        if scopes.contains("name") {
            json["name"] = .object(["firstName": .string(user.givenName ?? ""), "lastName": .string(user.familyName ?? "")])
        }
        if scopes.contains("email") { json["email"] = .string(visibleEmail(of: user, teamID: teamID)) }
        return json
    }

    static func consentKey(_ userID: UUID, _ teamID: String) -> String { "\(userID.uuidString)|\(teamID)" }

    private func bool(_ value: Bool) -> Claim {
        configuration.booleanStyle == .strings ? .string(value ? "true" : "false") : .bool(value)
    }

    private func appleIDTokenClaims(user: UserRecord, app: EmulatorConfiguration.App, nonce: String?, native: Bool, code: String?, accessToken: String?)
        -> ClaimSet
    {
        let issuedAt = Int(now.timeIntervalSince1970)
        var claims = ClaimSet([
            ("iss", .string(configuration.appleIssuer)),
            ("aud", .string(app.clientID)),
            ("exp", .int(issuedAt + Int(configuration.identityTokenLifetime))),
            ("iat", .int(issuedAt)),
            ("sub", .string(subject(of: user, teamID: app.teamID))),
        ])
        if let code { claims["c_hash"] = .string(Self.halfHash(code)) }
        if let accessToken { claims["at_hash"] = .string(Self.halfHash(accessToken)) }
        if consents[Self.consentKey(user.id, app.teamID)]?.scopes.contains("email") == true {
            claims["email"] = .string(visibleEmail(of: user, teamID: app.teamID))
            claims["email_verified"] = bool(true)
            claims["is_private_email"] = bool(user.hideMyEmail)
        }
        claims["auth_time"] = .int(issuedAt)
        claims["nonce_supported"] = .bool(true)
        if let nonce { claims["nonce"] = .string(nonce) }
        if native { claims["real_user_status"] = .int(user.realUserStatus) }
        let transfer = transfersByAuthorization[Self.consentKey(user.id, app.teamID)]?.lazy.compactMap { self.transfers[$0] }
            .first { self.now < self.windowEnd(of: $0) }
        if let transfer { claims["transfer_sub"] = .string(transfer.transferSubject) }
        return claims
    }

    static func halfHash(_ value: String) -> String {
        base64URL(Array(SHA256.hash(data: Array(value.utf8))).prefix(16))
    }

    // MARK: - /auth/token

    /// Answers `/auth/token` as Apple does.
    func appleToken(_ form: [String: String]) async throws(AppleOAuthError) -> [String: Claim] {
        let clientID = try authenticateClient(form)
        switch form["grant_type"] {
        case "authorization_code": return try await redeemCode(form, clientID: clientID)
        case "refresh_token": return try await validateRefreshToken(form, clientID: clientID)
        case "client_credentials":
            guard form["scope"] == "user.migration" else {
                throw AppleOAuthError(code: "invalid_scope", detail: "client_credentials needs scope=user.migration")
            }
            let token = Identifiers.accessToken()
            let teamID = configuration.app(clientID)!.teamID
            addAccessToken(
                AccessTokenRecord(
                    token: token, clientID: clientID, teamID: teamID, userID: nil, refreshToken: nil, expiresAt: now.addingTimeInterval(3600)),
                lifetime: 3600)
            return ["access_token": .string(token), "token_type": .string("Bearer"), "expires_in": .int(3600)]
        case nil:
            throw AppleOAuthError(code: "invalid_request", detail: "grant_type is missing")
        default:
            throw AppleOAuthError(code: "unsupported_grant_type", detail: "grant_type \(form["grant_type"]!) is not supported")
        }
    }

    /// Checks `client_id` and `client_secret`; returns the client id.
    private func authenticateClient(_ form: [String: String]) throws(AppleOAuthError) -> String {
        guard let clientID = form["client_id"], !clientID.isEmpty else { throw AppleOAuthError(code: "invalid_request", detail: "client_id is missing") }
        guard let secret = form["client_secret"], !secret.isEmpty else { throw AppleOAuthError(code: "invalid_request", detail: "client_secret is missing") }
        if let problem = ClientSecretCheck.problem(secret: secret, clientID: clientID, configuration: configuration, now: now) {
            throw AppleOAuthError(code: "invalid_client", detail: problem)
        }
        return clientID
    }

    private func redeemCode(_ form: [String: String], clientID: String) async throws(AppleOAuthError) -> [String: Claim] {
        guard let code = form["code"], !code.isEmpty else { throw AppleOAuthError(code: "invalid_request", detail: "code is missing") }
        guard let record = codes.record(code, now: now), record.provider == .apple else {
            throw AppleOAuthError(code: "invalid_grant", detail: "unknown code (or expired over \(Int(codes.retention)) s ago)")
        }
        guard !record.used else { throw AppleOAuthError(code: "invalid_grant", detail: "the code was already redeemed") }
        guard now < record.createdAt.addingTimeInterval(codeLifetime(.apple)) else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the code expired")
        }
        guard record.clientID == clientID else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the code was issued to \(record.clientID), not \(clientID)")
        }
        guard record.redirectURI == form["redirect_uri"] else {
            throw AppleOAuthError(code: "invalid_grant", detail: "redirect_uri does not match the authorization request")
        }
        codes.update(code, now: now) { $0.used = true }
        guard let user = users[record.userID], let app = configuration.app(clientID) else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the user no longer exists")
        }
        guard consents[Self.consentKey(user.id, app.teamID)] != nil else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the user revoked consent")
        }
        let refreshToken = Identifiers.refreshToken()
        addGrant(GrantRecord(refreshToken: refreshToken, provider: .apple, userID: user.id, clientID: clientID, teamID: app.teamID, createdAt: now))
        let accessToken = issueAccessToken(clientID: clientID, teamID: app.teamID, userID: user.id, refreshToken: refreshToken)
        let claims = appleIDTokenClaims(user: user, app: app, nonce: record.nonce, native: record.native, code: nil, accessToken: accessToken)
        return [
            "access_token": .string(accessToken), "token_type": .string("Bearer"),
            "expires_in": .int(Int(configuration.accessTokenLifetime)), "refresh_token": .string(refreshToken),
            "id_token": .string(try await sign(claims)),
        ]
    }

    private func validateRefreshToken(_ form: [String: String], clientID: String) async throws(AppleOAuthError) -> [String: Claim] {
        guard let token = form["refresh_token"], !token.isEmpty else { throw AppleOAuthError(code: "invalid_request", detail: "refresh_token is missing") }
        guard var grant = grants[token], grant.provider == .apple, !grant.revoked else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the refresh token is unknown or revoked")
        }
        guard grant.clientID == clientID else { throw AppleOAuthError(code: "invalid_grant", detail: "the refresh token belongs to \(grant.clientID)") }
        guard let user = users[grant.userID], let app = configuration.app(clientID) else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the user no longer exists")
        }
        // A refresh token is the authorization of one team: after the app moved to another team (an app transfer), those
        // the sending team was issued no longer validate for it. Apple documents nothing either way; refusing them makes a
        // server that keeps using them notice, and the recipient's first sign-in of the user issues its own.
        guard grant.teamID == app.teamID else {
            throw AppleOAuthError(code: "invalid_grant", detail: "the refresh token was issued under team \(grant.teamID); the app moved to team \(app.teamID)")
        }
        grant.validations += 1
        grants[token] = grant
        let accessToken = issueAccessToken(clientID: clientID, teamID: app.teamID, userID: user.id, refreshToken: token)
        let claims = appleIDTokenClaims(user: user, app: app, nonce: nil, native: false, code: nil, accessToken: accessToken)
        return [
            "access_token": .string(accessToken), "token_type": .string("Bearer"),
            "expires_in": .int(Int(configuration.accessTokenLifetime)), "id_token": .string(try await sign(claims)),
        ]
    }

    func addGrant(_ grant: GrantRecord) {
        grants[grant.refreshToken] = grant
        grantsByAuthorization[Self.consentKey(grant.userID, grant.teamID), default: []].append(grant.refreshToken)
    }

    /// Issues an access token (Apple-shaped unless `token` is given) of a user and team (a provider's pseudo-team).
    func issueAccessToken(
        clientID: String, teamID: String, userID: UUID, refreshToken: String?, token: String = Identifiers.accessToken(), lifetime: TimeInterval? = nil,
        scopes: [String] = []
    ) -> String {
        let lifetime = lifetime ?? configuration.accessTokenLifetime
        addAccessToken(
            AccessTokenRecord(
                token: token, clientID: clientID, teamID: teamID, userID: userID, refreshToken: refreshToken, expiresAt: now.addingTimeInterval(lifetime),
                scopes: scopes),
            lifetime: lifetime)
        return token
    }

    // MARK: - Codes and access tokens that expire

    /// How long `provider`'s codes live: Google's ten minutes, everyone else's `authorizationCodeLifetime`.
    func codeLifetime(_ provider: CodeRecord.Provider) -> TimeInterval { style(provider).codeLifetime ?? configuration.authorizationCodeLifetime }

    func addCode(_ record: CodeRecord) {
        sweepExpired()
        let lifetime = codeLifetime(record.provider)
        codes.insert(record, key: record.code, expiresAt: record.createdAt.addingTimeInterval(lifetime), lifetime: lifetime)
    }

    /// Adds an access token (indexed under its user and team, unless it is a team's), which lives `lifetime`.
    func addAccessToken(_ record: AccessTokenRecord, lifetime: TimeInterval) {
        sweepExpired()
        accessTokens.insert(record, key: record.token, expiresAt: record.expiresAt, lifetime: lifetime)
        if let userID = record.userID { accessTokensByAuthorization[Self.consentKey(userID, record.teamID), default: []].insert(record.token) }
    }

    /// Drops the codes and access tokens forgotten by now: each issue pays for the records it sweeps.
    private func sweepExpired() {
        let now = self.now
        _ = codes.sweep(now: now)
        for record in accessTokens.sweep(now: now) {
            guard let userID = record.userID else { continue }
            let key = Self.consentKey(userID, record.teamID)
            accessTokensByAuthorization[key]?.remove(record.token)
            if accessTokensByAuthorization[key]?.isEmpty == true { accessTokensByAuthorization[key] = nil }
        }
    }

    /// How many codes and access tokens are held, and how many entries the access-token index has.
    var heldRecordCounts: (codes: Int, accessTokens: Int, indexedAccessTokens: Int) {
        (codes.count, accessTokens.count, accessTokensByAuthorization.values.reduce(0) { $0 + $1.count })
    }

    private func sign(_ claims: ClaimSet) async throws(AppleOAuthError) -> String {
        do { return try await keys(.apple).sign(claims) } catch { throw AppleOAuthError(code: "server_error", detail: "signing failed") }
    }

    // MARK: - /auth/revoke

    /// Revokes a refresh or access token. Unknown tokens are fine (RFC 7009).
    func appleRevoke(_ form: [String: String]) throws(AppleOAuthError) {
        let clientID = try authenticateClient(form)
        guard let token = form["token"], !token.isEmpty else { throw AppleOAuthError(code: "invalid_request", detail: "token is missing") }
        let now = self.now
        let grant = grants[token] ?? accessTokens.record(token, now: now)?.refreshToken.flatMap { grants[$0] }
        if let grant {
            guard grant.clientID == clientID else { throw AppleOAuthError(code: "invalid_grant", detail: "the token belongs to \(grant.clientID)") }
            revokeAuthorization(userID: grant.userID, teamID: grant.teamID)
        } else if let access = accessTokens.record(token, now: now) {
            guard access.clientID == clientID else { throw AppleOAuthError(code: "invalid_grant", detail: "the token belongs to \(access.clientID)") }
            accessTokens.update(token, now: now) { $0.revoked = true }
        }
    }

    /// Ends a user's authorization of a team's apps: grants and access tokens die, and the next sign-in
    /// is a first one again (name and e-mail are shared anew).
    private func revokeAuthorization(userID: UUID, teamID: String) {
        let key = Self.consentKey(userID, teamID)
        consents[key] = nil
        for token in grantsByAuthorization[key] ?? [] { grants[token]?.revoked = true }
        let now = self.now
        for token in accessTokensByAuthorization[key] ?? [] { accessTokens.update(token, now: now) { $0.revoked = true } }
    }

    // MARK: - /auth/usermigrationinfo

    /// When a transfer identifier stops working (and leaves ID tokens): `transferWindow` (60 days) after the latest
    /// transfer of an app from its sending team to its target team was accepted, or, while no app has moved between
    /// them, after the identifier was generated.
    private func windowEnd(of transfer: TransferRecord) -> Date {
        let accepted = appTransfers.last { $0.fromTeam == transfer.fromTeam && $0.toTeam == transfer.toTeam }?.acceptedAt
        return (accepted ?? transfer.createdAt).addingTimeInterval(configuration.transferWindow)
    }

    func userMigration(_ form: [String: String], bearer: String?) throws(AppleOAuthError) -> [String: Claim] {
        let clientID = try authenticateClient(form)
        let teamID = configuration.app(clientID)!.teamID
        guard let bearer, let access = accessTokens.record(bearer, now: now), access.userID == nil, !access.revoked, access.teamID == teamID,
            now < access.expiresAt
        else {
            throw AppleOAuthError(code: "invalid_request", detail: "a valid team access token (client_credentials, scope user.migration) is required as Bearer")
        }
        if let transferSubject = form["transfer_sub"] {
            guard let transfer = transfers[transferSubject], transfer.toTeam == teamID, now < windowEnd(of: transfer), let user = users[transfer.userID]
            else { throw AppleOAuthError(code: "invalid_request", detail: "unknown or expired transfer_sub") }
            var answer: [String: Claim] = ["sub": .string(subject(of: user, teamID: teamID))]
            if user.hideMyEmail {
                answer["email"] = .string(Identifiers.relayEmail(userID: user.id, teamID: teamID, domain: user.relayDomain))
                answer["is_private_email"] = .bool(true)
            }
            return answer
        }
        guard let sub = form["sub"], let target = form["target"], !target.isEmpty else {
            throw AppleOAuthError(code: "invalid_request", detail: "send sub and target, or transfer_sub")
        }
        // A widely used library once sent the sending team's own id as the target.
        guard target != teamID else { throw AppleOAuthError(code: "invalid_request", detail: "target is the recipient's Team ID, not the sending team's own") }
        guard let (user, userTeam) = user(bySubject: sub), userTeam == teamID else {
            throw AppleOAuthError(code: "invalid_request", detail: "sub is not a user of team \(teamID)")
        }
        // One identifier per user and recipient team, however often it is asked for (Apple: "remains stable").
        let key = Self.consentKey(user.id, target)
        if let existing = transfersByAuthorization[key]?.first(where: { transfers[$0]?.fromTeam == teamID }) {
            return ["transfer_sub": .string(existing)]
        }
        let transferSubject = Identifiers.transferSubject()
        transfers[transferSubject] = TransferRecord(transferSubject: transferSubject, userID: user.id, fromTeam: teamID, toTeam: target, createdAt: now)
        transfersByAuthorization[key, default: []].append(transferSubject)
        return ["transfer_sub": .string(transferSubject)]
    }

    // MARK: - App transfer

    /// What the recipient team needs after an app transfer to build the app's client secret.
    struct AppTransfer: Sendable {
        let teamID: String
        let keyID: String
        /// PKCS#8 PEM of a new P-256 Sign in with Apple key of the recipient team, as a `.p8` holds it.
        let privateKeyPEM: String
    }

    /// Moves app `clientID` to team `toTeamID`, as App Store Connect's app transfer does, accepted now. The recipient
    /// team is added when it is not configured, and is given a new key either way. From then on the app's ID tokens
    /// carry the user's subject under the recipient team (and, for 60 days, `transfer_sub`), only the recipient's
    /// client secret authenticates it, the sending team's refresh tokens no longer validate for it, and users who had
    /// signed in to it stay authorized: their consent is copied to the recipient team, so their next sign-in is not a
    /// first one (no name or e-mail shared again), as users who already use an app are not asked again when it changes
    /// hands.
    func transferApp(clientID: String, toTeamID: String) throws(ControlRefusal) -> AppTransfer {
        guard let index = configuration.apps.firstIndex(where: { $0.clientID == clientID }) else {
            throw ControlRefusal("no app \(clientID)", notFound: true)
        }
        guard Identifiers.isTeamID(toTeamID) else { throw ControlRefusal("toTeamId is a Team ID: 10 upper-case letters and digits") }
        let fromTeamID = configuration.apps[index].teamID
        guard toTeamID != fromTeamID else { throw ControlRefusal("app \(clientID) is already in team \(toTeamID)") }
        let key = P256.Signing.PrivateKey()
        let keyID = Identifiers.teamKeyID()
        let newTeam = configuration.team(toTeamID) == nil
        configuration.addTeam(teamID: toTeamID, keyID: keyID, publicKeyPEM: key.publicKey.pemRepresentation)
        if newTeam {
            for user in users.values { usersBySubject[subject(of: user, teamID: toTeamID)] = (user.id, toTeamID) }
        }
        configuration.apps[index].teamID = toTeamID
        appTransfers.append(AppTransferRecord(clientID: clientID, fromTeam: fromTeamID, toTeam: toTeamID, acceptedAt: now))
        for userID in users.keys {
            guard let consent = consents[Self.consentKey(userID, fromTeamID)], consent.clientIDs.contains(clientID) else { continue }
            let recipientKey = Self.consentKey(userID, toTeamID)
            if consents[recipientKey] == nil {
                consents[recipientKey] = ConsentRecord(scopes: consent.scopes, firstAuthorizedAt: consent.firstAuthorizedAt, clientIDs: [clientID])
            } else {
                consents[recipientKey]?.scopes.formUnion(consent.scopes)
                consents[recipientKey]?.clientIDs.insert(clientID)
            }
        }
        return AppTransfer(teamID: toTeamID, keyID: keyID, privateKeyPEM: key.pemRepresentation)
    }

    // MARK: - Account events and notifications

    /// The user revokes the app in Settings: authorizations of `teamID` end and the team's apps are told.
    func revokeConsent(subject: String) throws(AppleOAuthError) {
        guard let (user, teamID) = user(bySubject: subject) else { throw AppleOAuthError(code: "invalid_request", detail: "no such user") }
        revokeAuthorization(userID: user.id, teamID: teamID)
        notify(type: "consent-revoked", user: user, teams: [teamID])
    }

    /// The user deletes their Apple Account: every token dies, every team that knew them is told.
    func deleteUser(subject: String) throws(AppleOAuthError) {
        guard let (user, _) = user(bySubject: subject) else { throw AppleOAuthError(code: "invalid_request", detail: "no such user") }
        let teams = configuration.teams.map(\.teamID).filter { teamID in
            let key = Self.consentKey(user.id, teamID)
            return consents[key] != nil || grantsByAuthorization[key]?.isEmpty == false
        }
        for team in configuration.teams { revokeAuthorization(userID: user.id, teamID: team.teamID) }
        notify(type: configuration.accountDeletionEventType, user: user, teams: teams)
        removeUser(user.id)
    }

    func setEmailForwarding(subject: String, enabled: Bool) throws(AppleOAuthError) {
        guard let (user, teamID) = user(bySubject: subject) else { throw AppleOAuthError(code: "invalid_request", detail: "no such user") }
        users[user.id]?.emailForwardingEnabled = enabled
        notify(type: enabled ? "email-enabled" : "email-disabled", user: user, teams: [teamID], includeEmail: true)
    }

    private func notify(type: String, user: UserRecord, teams: [String], includeEmail: Bool = false) {
        for teamID in teams {
            for app in configuration.apps where app.teamID == teamID {
                guard let url = app.notificationURL else { continue }
                let time = now.timeIntervalSince1970
                var event: [String: Claim] = [
                    "type": .string(type), "sub": .string(subject(of: user, teamID: teamID)),
                    "event_time": .int(configuration.eventTimeUnit == .milliseconds ? Int(time * 1000) : Int(time)),
                ]
                if includeEmail {
                    event["email"] = .string(visibleEmail(of: user, teamID: teamID))
                    event["is_private_email"] = .string(user.hideMyEmail ? "true" : "false")
                }
                let eventsJSON = String(decoding: (try? JSONEncoder.sorted.encode(event)) ?? Data(), as: UTF8.self)
                let id = UUID().uuidString.lowercased()
                let claims = ClaimSet([
                    ("iss", .string(configuration.appleIssuer)), ("aud", .string(app.clientID)), ("iat", .int(Int(time))),
                    ("exp", .int(Int(time) + 3600)), ("jti", .string(id)), ("events", .string(eventsJSON)),
                ])
                deliveries[id] = NotificationRecord(id: id, url: url, type: type, sub: subject(of: user, teamID: teamID), clientId: app.clientID)
                outbox.yield(PendingNotification(id: id, url: url, claims: claims))
                // One URL serves all of a team's apps; Apple sends each event once per URL.
                break
            }
        }
    }

    func signNotification(_ claims: ClaimSet) async throws -> String { try await keys(.apple).sign(claims) }

    func recordDelivery(id: String, status: Int?, delivered: Bool) {
        deliveries[id]?.attempts += 1
        deliveries[id]?.lastStatus = status
        if delivered { deliveries[id]?.delivered = true }
    }

    var notificationRecords: [NotificationRecord] { deliveries.values.sorted { $0.createdAt < $1.createdAt } }

    // MARK: - Faults and the request log

    func addFault(_ fault: FaultSpec) { faults.append(fault) }
    func clearFaults() { faults.removeAll() }

    /// The fault to inject for a request to `endpoint`, consuming one use of it.
    func takeFault(for endpoint: String) -> FaultSpec? {
        guard let index = faults.firstIndex(where: { $0.endpoint == endpoint || $0.endpoint == "*" }) else { return nil }
        let fault = faults[index]
        if let remaining = fault.count {
            if remaining <= 1 { faults.remove(at: index) } else { faults[index].count = remaining - 1 }
        }
        return fault
    }

    func record(_ entry: RequestRecord) {
        let capacity = configuration.requestLogCapacity
        if log.count < capacity {
            log.append(entry)
        } else if capacity > 0 {
            log[logStart] = entry
            logStart = (logStart + 1) % capacity
        }
    }

    /// The request log, oldest first.
    var requestLog: [RequestRecord] { Array(log[logStart...] + log[..<logStart]) }

    func clearRequestLog() {
        log.removeAll()
        logStart = 0
    }

    // MARK: - Google

    /// Google's `tokeninfo`: checks an ID token it issued and returns its claims as strings.
    func googleTokenInfo(_ token: String) -> [String: String]? {
        let parts = token.split(separator: ".")
        guard parts.count == 3, let headerBytes = base64URLDecode(parts[0]), let payloadBytes = base64URLDecode(parts[1]),
            let signature = base64URLDecode(parts[2]),
            let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any], let kid = header["kid"] as? String,
            let key = keyRings[.google]?.keys.first(where: { $0.keyID == kid }),
            let claims = try? JSONSerialization.jsonObject(with: Data(payloadBytes)) as? [String: Any]
        else { return nil }
        guard key.verifies(signature: signature, input: Array("\(parts[0]).\(parts[1])".utf8)) else { return nil }
        guard let exp = claims["exp"] as? Int, Double(exp) > now.timeIntervalSince1970 else { return nil }
        var answer: [String: String] = [:]
        for (name, value) in claims { answer[name] = "\(value is Bool ? ((value as! Bool) ? "true" : "false") : "\(value)")" }
        answer["alg"] = "RS256"
        answer["kid"] = kid
        answer["typ"] = "JWT"
        return answer
    }
}

extension JSONEncoder {
    /// Sorted keys, and dates as Unix seconds, as every other time in the control API.
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .secondsSince1970
        return encoder
    }
}
