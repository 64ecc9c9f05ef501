import Crypto
public import Foundation
import LatchkeyJOSE
public import LatchkeyModels
import LatchkeyWebAuthn

/// The `passkeys.*` settings.
public struct PasskeySettings: Sendable, Equatable {
    /// Whether an assertion or registration must carry UV: WebAuthn's `userVerification` option.
    public enum UserVerification: String, Sendable, CaseIterable {
        case required, preferred, discouraged
    }

    /// The registrable domain passkeys are bound to (`example.com`; `localhost` in development).
    public var rpID: String
    /// The name authenticators show for the relying party.
    public var rpName: String
    /// The web origins (and `android:apk-key-hash:` facets) whose ceremonies are accepted.
    public var origins: [String]
    public var userVerification: UserVerification = .required
    /// A passkey may create an account (still under `signup.mode`); otherwise it is added to an account that exists.
    public var allowSignUp = false

    public init(rpID: String, rpName: String? = nil, origins: [String], userVerification: UserVerification = .required, allowSignUp: Bool = false) {
        self.rpID = rpID
        self.rpName = rpName ?? rpID
        self.origins = origins
        self.userVerification = userVerification
        self.allowSignUp = allowSignUp
    }
}

/// Passkeys as a way into an account: each registered credential is one of the user's identities, provider
/// ``provider`` with the credential id (base64url) as its subject, so it is listed, unlinked (never the last) and deleted
/// with the account like any other. Its public key, counter and flags live in the identity's claims.
///
/// Every ceremony starts with options holding a fresh challenge that carries what it was made for (adding a passkey to
/// one user, signing in, or one sign-up) and its expiry, sealed under a key of its own: nothing is written when it is
/// issued. Its single use is recorded when it is answered: a sign-in's in the store step that starts the session, so a
/// passkey sign-in is one durable write; adding a passkey's and a sign-up's on their own, before anything else.
public struct PasskeyService: Sendable {
    /// The provider name of passkey identities, and the `idp` of the sessions they start.
    public static let provider = "passkey"
    /// How long a challenge may be answered.
    public static let challengeLifetime: TimeInterval = 300

    public let settings: PasskeySettings
    let relyingParty: WebAuthnRelyingParty
    let signIns: SignInService
    let store: any ReplayStore & UserStore & TransactionalStore
    /// Seals challenges, under a key derived for them alone.
    let challengeBox: SecretBox

    /// - Parameters:
    ///   - store: the record of each answered challenge, users and their passkey identities (written with their audits).
    ///   - box: the server's secret box; challenges are sealed under a key derived from it.
    public init(settings: PasskeySettings, signIns: SignInService, store: any ReplayStore & UserStore & TransactionalStore, box: SecretBox) {
        self.settings = settings
        relyingParty = WebAuthnRelyingParty(
            rpID: settings.rpID, origins: Set(settings.origins), requireUserVerification: settings.userVerification == .required)
        self.signIns = signIns
        self.store = store
        challengeBox = SecretBox(key: box.derivedKey(purpose: "latchkey passkey challenges"))
    }

    private var now: Date { signIns.timeSource.now }

    // MARK: - Adding a passkey to an account

    /// Creation options for a passkey of `userID`, excluding the passkeys the user has.
    public func registrationOptions(userID: String) async throws -> PublicKeyCredentialCreationOptionsJSON {
        guard let user = try await store.user(id: userID) else { throw LatchkeyError(.invalidToken, "the user of this access token is gone") }
        let passkeys = try await store.identities(userID: userID).filter { $0.provider == Self.provider }
        let handle = passkeys.lazy.compactMap { $0.claims[Claim.userHandle] }.first ?? base64URL(Array(userID.utf8))
        let label = user.email ?? [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
        let challenge = try issueChallenge(Challenge(purpose: .register, userID: userID, userHandle: handle))
        return creationOptions(
            challenge: challenge, userHandle: handle, name: label.isEmpty ? userID : label,
            excluding: passkeys.map { PublicKeyCredentialDescriptorJSON(id: $0.subject, transports: Self.transports($0)) })
    }

    /// Adds the credential made for one of `userID`'s registration challenges.
    public func register(userID: String, credential: RegistrationResponseJSON, name: String?) async throws -> PasskeyResponse {
        let challengeID = try WebAuthnRelyingParty.challenge(in: credential.response.clientDataJSON)
        let challenge = try openChallenge(named: challengeID, for: .register)
        guard challenge.userID == userID else { throw Self.refusal("the challenge was issued to another user") }
        let registered = try relyingParty.verifyRegistration(credential, challenge: try Self.bytes(challengeID))
        try await spend(challengeID, challenge)
        let at = now
        let identity = LinkedIdentity(
            id: newIdentifier(), userID: userID, provider: Self.provider, subject: base64URL(registered.credentialID),
            claims: Self.claims(registered, name: try Self.name(name), userHandle: challenge.userHandle), firstSeenAt: at, lastSignInAt: at)
        let linked = signIns.policy.webhooks.deliveries(.identity(.identityLinked, identity, at: at))
        // A guest's first passkey upgrades them in place, as any linked identity does.
        let guest = try await store.user(id: userID)?.isAnonymous == true
        if guest, signIns.policy.requireInvite {
            throw LatchkeyError(
                .signupClosed, "sign-up needs an invitation on this server: link a provider or an e-mail address with the inviteCode first")
        }
        let upgraded = guest ? signIns.policy.webhooks.deliveries(.userUpgraded(userID, provider: Self.provider, at: at)) : []
        do {
            try await store.write { tx in
                try await tx.addIdentity(identity)
                try await tx.enqueue(linked)
                try await tx.audit(at: at, userID, "passkey.added", "credential=\(identity.subject.prefix(16))")
                if guest { try await tx.upgradeGuest(userID: userID, provider: Self.provider, at: at, deliveries: upgraded) }
            }
        } catch AuthStoreError.duplicate {
            throw LatchkeyError(.identityInUse, "this passkey is registered already")
        }
        return Self.response(identity)
    }

    /// The user's passkeys, oldest first.
    public func passkeys(userID: String) async throws -> [PasskeyResponse] {
        try await store.identities(userID: userID).filter { $0.provider == Self.provider }.sorted { $0.firstSeenAt < $1.firstSeenAt }.map(Self.response)
    }

    /// Deletes one of the user's passkeys; never the account's last way in (`last_identity`).
    public func delete(userID: String, id: String) async throws {
        _ = try await signIns.unlink(userID: userID, provider: Self.provider, subject: id)
    }

    // MARK: - Signing in

    /// Request options for a discoverable passkey (usable with conditional mediation), with the `challengeId` to send back.
    public func signInOptions() async throws -> PublicKeyCredentialRequestOptionsJSON {
        let challenge = try issueChallenge(Challenge(purpose: .signIn))
        return PublicKeyCredentialRequestOptionsJSON(
            challenge: challenge, timeout: Int(Self.challengeLifetime * 1000), rpId: settings.rpID, userVerification: settings.userVerification.rawValue,
            challengeId: challenge)
    }

    /// Signs in with an assertion for the sign-in challenge `challengeID`: the same outcome as any provider's sign-in,
    /// with `idp` `passkey`. A counter that went backwards blocks the passkey (`credential_clone_suspected`).
    public func signIn(challengeID: String, credential: AuthenticationResponseJSON, userAgent: String?) async throws -> SignInService.SignInOutcome {
        let (identity, claims, spent) = try await verifiedAssertion(challengeID: challengeID, credential: credential)
        return try await Self.spending {
            try await signIns.signIn(
                identity: identity, provider: Self.provider, userAgent: userAgent, spending: spent, identityClaims: claims, accounts: .existingOnly)
        }
    }

    /// For the browser flow: the account of an assertion for the sign-in challenge `challengeID`, with the sign-in
    /// recorded (its counter, its time) but no session started; the app's code starts it.
    public func authenticate(challengeID: String, credential: AuthenticationResponseJSON) async throws -> SignInService.ResolvedAccount {
        let (identity, claims, spent) = try await verifiedAssertion(challengeID: challengeID, credential: credential)
        return try await Self.spending {
            try await signIns.resolveAccount(identity: identity, provider: Self.provider, spending: spent, identityClaims: claims, accounts: .existingOnly)
        }
    }

    /// Checks an assertion against its challenge and stored passkey: who it vouches for, what it changes in the
    /// passkey's claims, and the record that spends the challenge (written with the sign-in).
    private func verifiedAssertion(challengeID: String, credential: AuthenticationResponseJSON) async throws -> (
        VerifiedIdentity, [String: String], SignInTokenClaim
    ) {
        let challenge = try openChallenge(named: challengeID, for: .signIn)
        let subject = base64URL(try WebAuthnRelyingParty.credentialID(credential.rawId))
        guard let identity = try await store.identity(provider: Self.provider, subject: subject), let passkey = Self.registered(identity) else {
            throw Self.refusal("this passkey is not registered here: it was deleted, or was made for another server")
        }
        guard identity.claims[Claim.cloneSuspectedAt] == nil else {
            throw LatchkeyError(
                .credentialCloneSuspected, "this passkey is blocked: its signature counter once went backwards; sign in otherwise and delete it")
        }
        let issued = try Self.bytes(challengeID)
        let checked = Result { () throws(LatchkeyError) -> PasskeyAssertion in try relyingParty.verifyAssertion(credential, challenge: issued, passkey: passkey)
        }
        if case .failure(let error) = checked, error.code == .credentialCloneSuspected {
            // A replayed assertion repeats a counter already seen: only one answering an unspent challenge blocks.
            try await spend(challengeID, challenge)
            try await block(identity)
        }
        let assertion = try checked.get()
        if let sent = assertion.userHandle, let handle = identity.claims[Claim.userHandle], !constantTimeEquals(base64URL(sent), handle) {
            throw Self.refusal("the passkey's user handle is not the one it was registered with")
        }
        return (
            VerifiedIdentity(issuer: settings.rpID, subject: subject, audience: settings.rpID, checkedAt: now), Self.used(assertion, at: now),
            challenge.spent(challengeID)
        )
    }

    /// Marks a passkey whose counter went backwards: no sign-in with it succeeds again.
    private func block(_ identity: LinkedIdentity) async throws {
        let now = now
        var changed = identity
        changed.claims[Claim.cloneSuspectedAt] = Self.timestamp(now)
        let blocked = changed
        try await store.write { tx in
            guard try await tx.updateIdentity(blocked) else { return }
            try await tx.audit(at: now, identity.userID, "passkey.clone_suspected", "credential=\(identity.subject.prefix(16))")
        }
    }

    // MARK: - Signing up

    /// Creation options for a passkey that makes a new account (`passkeys.allowSignUp`), with the `challengeId` to send back.
    public func signUpOptions(displayName: String?, inviteCode: String?) async throws -> PublicKeyCredentialCreationOptionsJSON {
        guard settings.allowSignUp else {
            throw LatchkeyError(.signupClosed, "passkey sign-up is off on this server (passkeys.allowSignUp): sign in another way, then add a passkey")
        }
        if signIns.policy.requireInvite, inviteCode?.isEmpty ?? true {
            throw LatchkeyError(.signupClosed, "sign-up needs an invitation on this server: send the inviteCode you were given")
        }
        let displayName = try Self.name(displayName)
        let handle = base64URL(systemRandomBytes(16))
        let challenge = try issueChallenge(Challenge(purpose: .signUp, userHandle: handle, displayName: displayName, inviteCode: inviteCode))
        var options = creationOptions(challenge: challenge, userHandle: handle, name: displayName ?? "Passkey", excluding: [])
        options.challengeId = challenge
        return options
    }

    /// Creates an account with the credential made for the sign-up challenge `challengeID`, and signs it in.
    public func signUp(challengeID: String, credential: RegistrationResponseJSON, name: String?, userAgent: String?) async throws
        -> SignInService.SignInOutcome
    {
        guard settings.allowSignUp else { throw LatchkeyError(.signupClosed, "passkey sign-up is off on this server (passkeys.allowSignUp)") }
        let challenge = try openChallenge(named: challengeID, for: .signUp)
        let registered = try relyingParty.verifyRegistration(credential, challenge: try Self.bytes(challengeID))
        // Spent on its own, before the checks below: a sign-up answered twice is a used challenge, whatever else it is.
        try await spend(challengeID, challenge)
        let subject = base64URL(registered.credentialID)
        // The sign-in step refuses it too; this says why when sign-up also needs an invite.
        guard try await store.identity(provider: Self.provider, subject: subject) == nil else { throw Self.refusal("this passkey is registered already") }
        var claims = Self.claims(registered, name: try Self.name(name) ?? challenge.displayName, userHandle: challenge.userHandle)
        claims[Claim.lastUsedAt] = Self.timestamp(now)
        return try await signIns.signIn(
            identity: VerifiedIdentity(issuer: settings.rpID, subject: subject, audience: settings.rpID, checkedAt: now),
            provider: Self.provider, givenName: challenge.displayName, userAgent: userAgent, inviteCode: challenge.inviteCode, identityClaims: claims,
            accounts: .newOnly)
    }

    // MARK: - Challenges

    /// What a challenge was issued for: sealed, it is the challenge.
    struct Challenge: Codable {
        enum Purpose: String, Codable {
            case register, signIn = "sign_in", signUp = "sign_up"

            var ceremony: String {
                switch self {
                case .register: "adding a passkey"
                case .signIn: "signing in"
                case .signUp: "signing up"
                }
            }
        }

        var purpose: Purpose
        /// 16 fresh random bytes (base64url): no two challenges are alike, whatever else they carry.
        var nonce = ""
        /// Seconds since 1970 after which it is refused; filled in when issued.
        var expiresAt = 0
        var userID: String?
        var userHandle: String?
        var displayName: String?
        var inviteCode: String?

        enum CodingKeys: String, CodingKey {
            case purpose = "p", nonce = "n", expiresAt = "e", userID = "u", userHandle = "h", displayName = "d", inviteCode = "i"
        }

        /// The record that spends challenge `name`, kept until it expires (after that it is refused as expired).
        func spent(_ name: String) -> SignInTokenClaim {
            SignInTokenClaim(
                provider: PasskeyService.provider, subject: "challenge", tokenHash: sha256Hex(name),
                expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt)))
        }
    }

    /// A fresh challenge for ``challengeLifetime``: `challenge` with its nonce and expiry, sealed, in base64url. It
    /// also names itself (`challengeId`).
    private func issueChallenge(_ challenge: Challenge) throws -> String {
        var challenge = challenge
        challenge.nonce = base64URL(systemRandomBytes(16))
        challenge.expiresAt = Int(now.addingTimeInterval(Self.challengeLifetime).timeIntervalSince1970.rounded(.up))
        let sealed = try challengeBox.seal(String(decoding: try LeanJSONEncoder().encode(challenge), as: UTF8.self))
        return String(sealed.dropFirst(Self.sealVersion.count))
    }

    /// Opens the challenge `name`: one this server did not seal, or that has expired, is `challenge_expired`; one
    /// issued for another ceremony is `invalid_credential`. Whether it was answered before is the store's to tell,
    /// when the answer is recorded.
    private func openChallenge(named name: String, for purpose: Challenge.Purpose) throws(LatchkeyError) -> Challenge {
        guard name.utf8.count <= Self.maximumChallengeLength, let opened = try? challengeBox.open(Self.sealVersion + name),
            let challenge = try? LeanJSONDecoder().decode(Challenge.self, from: Array(opened.utf8))
        else {
            throw LatchkeyError(.challengeExpired, "the challenge is unknown: ask for new options")
        }
        guard Double(challenge.expiresAt) > now.timeIntervalSince1970 else {
            throw LatchkeyError(.challengeExpired, "the challenge has expired (it may be answered for \(Int(Self.challengeLifetime)) s): ask for new options")
        }
        guard challenge.purpose == purpose else {
            throw Self.refusal("the challenge was issued for \(challenge.purpose.ceremony), not for \(purpose.ceremony)")
        }
        return challenge
    }

    /// Records the answer to challenge `name` on its own (adding a passkey, signing up, or blocking one): a second
    /// answer is `challenge_expired`.
    private func spend(_ name: String, _ challenge: Challenge) async throws {
        let record = challenge.spent(name)
        guard try await store.recordSignInToken(provider: record.provider, subject: record.subject, tokenHash: record.tokenHash, expiresAt: record.expiresAt)
        else { throw Self.challengeUsed }
    }

    /// Runs a sign-in that spends a challenge in its own store step: a challenge answered before is `challenge_expired`.
    private static func spending<T>(_ signIn: () async throws -> T) async throws -> T {
        do {
            return try await signIn()
        } catch let error as LatchkeyError where error.code == .tokenAlreadyUsed {
            throw challengeUsed
        }
    }

    static let challengeUsed = LatchkeyError(.challengeExpired, "the challenge was used already: ask for new options")

    /// The challenge's bytes, which the client signs.
    private static func bytes(_ name: String) throws(LatchkeyError) -> [UInt8] { try WebAuthnRelyingParty.decoded(name, "challenge") }

    /// ``SecretBox``'s prefix, which challenges leave out.
    private static let sealVersion = "v1."
    /// A sign-up's challenge carries its display name and invite code: longer than this, it was not made here.
    private static let maximumChallengeLength = 4096

    // MARK: - Identity claims

    /// The names of a passkey identity's claims.
    enum Claim {
        static let publicKey = "publicKey"
        static let algorithm = "alg"
        static let signCount = "signCount"
        static let backupEligible = "backupEligible"
        static let backedUp = "backedUp"
        static let aaguid = "aaguid"
        static let transports = "transports"
        static let name = "name"
        static let userHandle = "userHandle"
        static let lastUsedAt = "lastUsedAt"
        static let cloneSuspectedAt = "cloneSuspectedAt"
    }

    static func claims(_ passkey: RegisteredPasskey, name: String?, userHandle: String?) -> [String: String] {
        var claims: [String: String] = [:]
        claims[Claim.publicKey] = base64URL(passkey.publicKey)
        claims[Claim.algorithm] = String(passkey.algorithm.rawValue)
        claims[Claim.signCount] = String(passkey.signCount)
        claims[Claim.backupEligible] = String(passkey.backupEligible)
        claims[Claim.backedUp] = String(passkey.backedUp)
        claims[Claim.aaguid] = lowercaseHex(passkey.aaguid)
        let transports: [String] = passkey.transports.prefix(8).map { String($0.prefix(32)) }
        claims[Claim.transports] = transports.joined(separator: ",")
        claims[Claim.name] = name ?? defaultName(passkey)
        claims[Claim.userHandle] = userHandle
        return claims
    }

    /// What a sign-in changes in the claims.
    private static func used(_ assertion: PasskeyAssertion, at date: Date) -> [String: String] {
        var claims: [String: String] = [:]
        claims[Claim.signCount] = String(assertion.signCount)
        claims[Claim.backedUp] = String(assertion.backedUp)
        claims[Claim.lastUsedAt] = timestamp(date)
        return claims
    }

    /// What a passkey identity's claims say of its credential; nil when they are not a passkey's.
    static func registered(_ identity: LinkedIdentity) -> RegisteredPasskey? {
        let claims = identity.claims
        guard let credentialID = try? WebAuthnRelyingParty.decoded(identity.subject, "id"), let keyText = claims[Claim.publicKey],
            let publicKey = try? WebAuthnRelyingParty.decoded(keyText, "publicKey"), let algorithmText = claims[Claim.algorithm],
            let algorithmNumber = Int(algorithmText), let algorithm = COSEKey.Algorithm(rawValue: algorithmNumber), let countText = claims[Claim.signCount],
            let signCount = UInt32(countText)
        else { return nil }
        let backupEligible = claims[Claim.backupEligible] == "true"
        let backedUp = claims[Claim.backedUp] == "true"
        return RegisteredPasskey(
            credentialID: credentialID, publicKey: publicKey, algorithm: algorithm, signCount: signCount, backupEligible: backupEligible, backedUp: backedUp,
            aaguid: [], transports: transports(identity) ?? [])
    }

    /// A passkey identity as the API shows it: its public details.
    public static func response(_ identity: LinkedIdentity) -> PasskeyResponse {
        let claims = identity.claims
        let lastUsed: Date? = claims[Claim.lastUsedAt].flatMap { (text: String) -> Date? in try? Date(text, strategy: .iso8601) }
        return PasskeyResponse(
            id: identity.subject, name: claims[Claim.name] ?? "Passkey", createdAt: identity.firstSeenAt, lastUsedAt: lastUsed,
            backedUp: claims[Claim.backedUp] == "true", cloneSuspected: claims[Claim.cloneSuspectedAt] != nil)
    }

    private static func transports(_ identity: LinkedIdentity) -> [String]? {
        identity.claims[Claim.transports].flatMap { $0.isEmpty ? nil : $0.split(separator: ",").map(String.init) }
    }

    private static func defaultName(_ passkey: RegisteredPasskey) -> String {
        passkey.backupEligible ? "Synced passkey" : "Device-bound passkey"
    }

    /// A name a person typed: trimmed, up to 64 characters, no control characters; empty means none.
    private static func name(_ name: String?) throws(LatchkeyError) -> String? {
        guard let trimmed = name?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        guard !containsControlCharacter(trimmed) else {
            throw LatchkeyError(.malformedRequest, "the name holds a control character")
        }
        return String(trimmed.prefix(64))
    }

    private static func timestamp(_ date: Date) -> String { date.formatted(.iso8601) }

    private func creationOptions(challenge: String, userHandle: String, name: String, excluding: [PublicKeyCredentialDescriptorJSON])
        -> PublicKeyCredentialCreationOptionsJSON
    {
        PublicKeyCredentialCreationOptionsJSON(
            rp: .init(id: settings.rpID, name: settings.rpName), user: .init(id: userHandle, name: name, displayName: name), challenge: challenge,
            pubKeyCredParams: WebAuthnRelyingParty.algorithms.map { .init(alg: $0.rawValue) }, timeout: Int(Self.challengeLifetime * 1000),
            excludeCredentials: excluding, authenticatorSelection: .init(userVerification: settings.userVerification.rawValue))
    }

    private static func refusal(_ reason: String) -> LatchkeyError { WebAuthnRelyingParty.refusal(reason) }
}
