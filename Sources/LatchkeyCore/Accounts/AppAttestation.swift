public import Crypto
import ExtrasBase64
public import Foundation
public import LatchkeyJOSE
public import LatchkeyModels
public import LatchkeyWebAuthn

/// What App Attest does at sign-in (`appAttest.mode`).
public enum AppAttestMode: String, Sendable, CaseIterable {
    /// The `appAttest` member of a sign-in is ignored.
    case off
    /// Verified and counted (`latchkey_app_attest_total`), never refused: a team measures before it enforces.
    case report
    /// A native sign-in without a valid attestation or assertion is refused (401 `invalid_attestation`).
    case require
}

/// The server's App Attest settings (`appAttest.*`).
public struct AppAttestPolicy: Sendable {
    public var mode: AppAttestMode = .off
    /// The apps' App IDs, `TEAMID.bundle.id`.
    public var appIDs: [String] = []
    public var environment: AppAttestEnvironment = .production
    /// The root the attestations chain to: Apple's App Attestation Root CA unless set (the emulator's, in development).
    public var rootCertificatePEM: String = AppAttestVerifier.appleRootCertificatePEM

    public init() {}
}

/// Each install's App Attest key: kept when its attestation is verified, its counter moved by each assertion, its user
/// set by the sign-in it came with.
public protocol AppAttestKeyStore: Sendable {
    func appAttestKey(id: String) async throws -> AttestedAppKey?
    /// Keeps a newly attested key; a key already kept (an attestation sent again) is left as it is.
    func saveAppAttestKey(_ key: AttestedAppKey, at: Date) async throws
    /// Moves the key's counter to `counter` only if it is below it: false when another assertion got there first.
    func advanceAppAttestCounter(keyID: String, to counter: UInt32, at: Date) async throws -> Bool
    /// The user who signed in with the key last.
    func assignAppAttestKey(keyID: String, userID: String) async throws
    /// The keys of the installs the user signed in from last, oldest first.
    func appAttestKeys(userID: String) async throws -> [AppAttestKeyRecord]
}

/// An install's App Attest key as a user's data export shows it: no key material beyond its id.
public struct AppAttestKeyRecord: Sendable, Equatable {
    public var keyID: String
    public var appID: String
    public var environment: String
    public var createdAt: Date
    public var lastUsedAt: Date

    public init(keyID: String, appID: String, environment: String, createdAt: Date, lastUsedAt: Date) {
        (self.keyID, self.appID, self.environment, self.createdAt, self.lastUsedAt) = (keyID, appID, environment, createdAt, lastUsedAt)
    }
}

/// App Attest at sign-in: single-use challenges, and the attestation or assertion that vouches for the app and for the
/// session's DPoP key. The client data hash is SHA-256 of `challenge + "." + thumbprint` (the DPoP key's RFC 7638
/// thumbprint), or of the challenge alone without a DPoP key.
public struct AppAttestation: Sendable {
    /// How long a challenge may be used.
    public static let challengeLifetime: TimeInterval = 300

    /// What a verified sign-in's evidence established.
    public struct Outcome: Sendable, Equatable {
        /// The install's key id (base64, as the app sends it).
        public var keyID: String
        /// An attestation (a new install) or an assertion.
        public var attested: Bool
    }

    public let policy: AppAttestPolicy
    private let verifier: AppAttestVerifier
    private let store: any AppAttestKeyStore & ReplayStore
    private let key: SymmetricKey
    private let timeSource: TimeSource

    public init(policy: AppAttestPolicy, store: any AppAttestKeyStore & ReplayStore, challengeKey: SymmetricKey, timeSource: TimeSource) throws(LatchkeyError) {
        do {
            verifier = try AppAttestVerifier(appIDs: policy.appIDs, environment: policy.environment, rootCertificatePEM: policy.rootCertificatePEM)
        } catch {
            throw LatchkeyError(.invalidConfiguration, "setting appAttest.rootCertificate: not a PEM certificate")
        }
        self.policy = policy
        self.store = store
        self.key = challengeKey
        self.timeSource = timeSource
    }

    /// A new challenge: 16 random bytes and its expiry, authenticated with the server's key, so that no challenge is
    /// stored until it is used.
    public func challenge() -> (challenge: String, expiresIn: Int) {
        let expiry = Int64(timeSource.now.addingTimeInterval(Self.challengeLifetime).timeIntervalSince1970)
        let body = systemRandomBytes(16) + withUnsafeBytes(of: expiry.bigEndian) { Array($0) }
        return (base64URL(body + mac(body)), Int(Self.challengeLifetime))
    }

    /// Verifies `evidence` for a sign-in whose session takes the DPoP key `dpopThumbprint`; spends its challenge and,
    /// for an assertion, moves the key's counter. Every refusal is `invalid_attestation` naming the check.
    public func verify(_ evidence: AppAttestEvidence, dpopThumbprint: String?) async throws -> Outcome {
        try await spend(evidence.challenge)
        guard let keyID = Self.bytes(evidence.keyId), keyID.count == 32 else { throw Self.refused("keyId is not 32 bytes of base64") }
        let clientDataHash = Array(AppAttestClientData.hash(challenge: evidence.challenge, dpopThumbprint: dpopThumbprint))
        let now = timeSource.now
        switch (evidence.attestation, evidence.assertion) {
        case (let attestation?, nil):
            guard let object = Self.bytes(attestation) else { throw Self.refused("attestation is not base64") }
            let key: AttestedAppKey
            do {
                key = try verifier.verifyAttestation(object, keyID: keyID, clientDataHash: clientDataHash, at: now)
            } catch {
                throw Self.refused(error)
            }
            try await store.saveAppAttestKey(key, at: now)
            return Outcome(keyID: evidence.keyId, attested: true)
        case (nil, let assertion?):
            guard let object = Self.bytes(assertion) else { throw Self.refused("assertion is not base64") }
            guard let key = try await store.appAttestKey(id: evidence.keyId) else {
                throw Self.refused("this install's key was never attested here; attest a new key")
            }
            let counter: UInt32
            do {
                counter = try verifier.verifyAssertion(object, clientDataHash: clientDataHash, key: key)
            } catch {
                throw Self.refused(error)
            }
            guard try await store.advanceAppAttestCounter(keyID: evidence.keyId, to: counter, at: now) else {
                throw Self.refused(AppAttestFailure(check: .counter, reason: "another assertion with this counter was used first"))
            }
            return Outcome(keyID: evidence.keyId, attested: false)
        default:
            throw Self.refused("appAttest carries an attestation or an assertion, exactly one")
        }
    }

    private func spend(_ challenge: String) async throws {
        guard let bytes = try? Base64.decode(string: challenge, options: [.base64UrlAlphabet, .omitPaddingCharacter]), bytes.count == 40,
            constantTimeEquals(Array(bytes.suffix(16)), mac(Array(bytes.prefix(24))))
        else { throw Self.refused("the challenge is not one of this server's (get one from POST /v1/attest/challenge)") }
        let expiry = bytes[16..<24].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        let expiresAt = Date(timeIntervalSince1970: TimeInterval(expiry))
        guard timeSource.now < expiresAt else { throw Self.refused("the challenge expired; get a new one") }
        guard try await store.recordSignInToken(provider: "appattest", subject: "challenge", tokenHash: sha256Hex(challenge), expiresAt: expiresAt) else {
            throw Self.refused("the challenge was already used; get a new one for each sign-in")
        }
    }

    private func mac(_ bytes: [UInt8]) -> [UInt8] { Array(Array(HMAC<SHA256>.authenticationCode(for: bytes, using: key)).prefix(16)) }

    private static func bytes(_ base64: String) -> [UInt8]? { Data(base64Encoded: base64).map { Array($0) } }

    static func refused(_ reason: String) -> LatchkeyError { LatchkeyError(.invalidAttestation, reason) }

    static func refused(_ failure: AppAttestFailure) -> LatchkeyError {
        LatchkeyError(.invalidAttestation, "App Attest check \(failure.check.rawValue) failed: \(failure.reason)")
    }
}
