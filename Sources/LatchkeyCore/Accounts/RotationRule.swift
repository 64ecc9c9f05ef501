public import Foundation
import LatchkeyJOSE

/// The rule for presenting a refresh token, on token and session records in memory.
///
/// The store applies it to the rows a group of rotations loaded inside one transaction (so a token presented twice in
/// one group is judged as if the two came one after the other), a pure function tested on its own.
public enum RotationRule {
    /// Applies one presentation to `tokens` and `families` and says what happened. Needs the presented token,
    /// its family and, for a retry, the successor's record in the dictionaries. The successor joins the presented
    /// token's family whatever its `familyID` says. A session `accepting` refuses is left as it is (`.declined`).
    public static func apply(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval,
        tokens: inout [String: RefreshTokenRecord], families: inout [String: SessionFamily], accepting: ((SessionFamily) -> Bool)? = nil
    ) -> RotationResult {
        guard var record = tokens[presentedHash], var family = families[record.familyID] else { return .unknown }
        if let accepting, !accepting(family) { return .declined(family) }
        if family.isRevoked { return .revoked(family) }
        if let rotatedAt = record.rotatedAt {
            // A retry gets the same successor, but only while that successor is itself unused.
            if now.timeIntervalSince(rotatedAt) <= graceWindow, record.successorHash == successor.hash, let next = tokens[successor.hash], next.rotatedAt == nil
            {
                // A retry answers with new tokens too: not once the session or the successor has expired.
                guard now < family.absoluteExpiresAt, now < next.idleExpiresAt else { return .expired }
                return .retried(family)
            }
            family.revokedAt = now
            family.revocationReason = reuseReason
            families[family.id] = family
            return .reuseDetected(family)
        }
        guard now < family.absoluteExpiresAt, now < record.idleExpiresAt else { return .expired }
        record.rotatedAt = now
        record.successorHash = successor.hash
        tokens[presentedHash] = record
        var successor = successor
        successor.familyID = family.id
        tokens[successor.hash] = successor
        family.lastUsedAt = now
        families[family.id] = family
        return .rotated(family)
    }

    /// The revocation reason of a family whose rotated token came back.
    public static let reuseReason = "refresh_token_reuse"
}
