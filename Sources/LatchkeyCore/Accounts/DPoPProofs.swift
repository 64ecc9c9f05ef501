public import Crypto
public import Foundation
public import LatchkeyJOSE
import LatchkeyModels

/// Whether sessions must be bound to a DPoP key (RFC 9449).
public enum DPoPMode: String, Sendable, CaseIterable {
    /// A session is bound when its sign-in sends a proof, and is a bearer session otherwise.
    case allow
    /// A sign-in without a proof is refused.
    case require
}

/// The server's DPoP settings (`dpop.*`).
public struct DPoPPolicy: Sendable, Equatable {
    public var mode: DPoPMode = .allow
    /// How far a proof's `iat` may lie from the server's time, and how long its `jti` is remembered.
    public var maximumAge: TimeInterval = 60
    /// Proofs must carry a nonce of the server's (`DPoP-Nonce`, RFC 9449 §8).
    public var requireNonce = false

    public init() {}
}

/// Checks the DPoP proofs requests carry: the proof itself (``DPoPProofCheck``), its nonce when the server asks for
/// one, and its single use across a fleet, recorded in the store for as long as the proof could be accepted.
public struct DPoPProofs: Sendable {
    public let policy: DPoPPolicy
    public let nonces: DPoPNonces
    private let check: DPoPProofCheck
    private let store: any ReplayStore

    public init(policy: DPoPPolicy, store: any ReplayStore, nonceKey: SymmetricKey, timeSource: TimeSource) {
        self.policy = policy
        self.store = store
        self.check = DPoPProofCheck(maximumAge: policy.maximumAge, timeSource: timeSource)
        self.nonces = DPoPNonces(key: nonceKey, timeSource: timeSource)
    }

    /// The verified proof; `invalid_dpop_proof` for a bad or replayed one, `use_dpop_nonce` when a nonce is required
    /// and the proof has none or an old one.
    public func verify(_ proof: String, method: String, url: String, accessToken: String? = nil) async throws -> VerifiedDPoPProof {
        let verified = try check.verify(proof, method: method, url: url, accessToken: accessToken)
        if policy.requireNonce, !(verified.nonce.map(nonces.isCurrent) ?? false) {
            throw LatchkeyError(.useDPoPNonce, "send a DPoP proof with the nonce of this answer's DPoP-Nonce header")
        }
        // Kept until the proof's iat falls out of the window, when the proof would be refused anyway.
        let first = try await store.recordSignInToken(
            provider: "dpop", subject: verified.thumbprint, tokenHash: sha256Hex(verified.jti),
            expiresAt: verified.issuedAt.addingTimeInterval(policy.maximumAge + 1))
        guard first else { throw LatchkeyError(.invalidDPoPProof, "this DPoP proof was already used (its jti is spent); make a new proof per request") }
        return verified
    }
}

/// The server's DPoP nonces: an HMAC of the current five-minute window under a key every instance of a fleet derives
/// from the same secret, so any instance accepts another's nonce; the previous window's stays good.
public struct DPoPNonces: Sendable {
    public static let window: TimeInterval = 300
    private let key: SymmetricKey
    private let timeSource: TimeSource

    public init(key: SymmetricKey, timeSource: TimeSource) {
        self.key = key
        self.timeSource = timeSource
    }

    /// The nonce to hand out now.
    public var current: String { nonce(forWindow: windowIndex) }

    /// Whether `nonce` is this window's or the previous one's.
    public func isCurrent(_ nonce: String) -> Bool {
        let index = windowIndex
        let presented = Array(nonce.utf8)
        return [index, index - 1].contains { constantTimeEquals(Array(self.nonce(forWindow: $0).utf8), presented) }
    }

    private var windowIndex: Int64 { Int64((timeSource.now.timeIntervalSince1970 / Self.window).rounded(.down)) }

    private func nonce(forWindow index: Int64) -> String {
        let message = withUnsafeBytes(of: index.bigEndian) { Array($0) }
        return base64URL(Array(Array(HMAC<SHA256>.authenticationCode(for: message, using: key)).prefix(16)))
    }
}
