public import Foundation

/// The rule for presenting a refresh token, on token and session records in memory.
///
/// Every store applies it: the memory store to its dictionaries, the SQL store to the rows a group of rotations
/// loaded inside one transaction (so a token presented twice in one group is judged as if the two came one after
/// the other).
public enum RotationRule {
    /// Applies one presentation to `tokens` and `families` and says what happened. Needs the presented token,
    /// its family and, for a retry, the successor's record in the dictionaries.
    public static func apply(
        presentedHash: String, successor: RefreshTokenRecord, now: Date, graceWindow: TimeInterval,
        tokens: inout [String: RefreshTokenRecord], families: inout [String: SessionFamily]
    ) -> RotationResult {
        guard var record = tokens[presentedHash], var family = families[record.familyID] else { return .unknown }
        if family.isRevoked { return .revoked(family) }
        if let rotatedAt = record.rotatedAt {
            // A retry gets the same successor, but only while that successor is itself unused.
            if now.timeIntervalSince(rotatedAt) <= graceWindow, record.successorHash == successor.hash, let next = tokens[successor.hash], next.rotatedAt == nil
            {
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
        tokens[successor.hash] = successor
        family.lastUsedAt = now
        families[family.id] = family
        return .rotated(family)
    }

    /// The revocation reason of a family whose rotated token came back.
    public static let reuseReason = "refresh_token_reuse"
}
