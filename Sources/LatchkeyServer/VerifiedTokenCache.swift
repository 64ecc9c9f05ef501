import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Synchronization

/// Access tokens already verified, by the SHA-256 of their exact text, until they expire.
///
/// Apps send the same access token with every call for its whole lifetime; checking its ES256 signature
/// once instead of on every request is most of the cost of an authenticated call. Session revocation is
/// still checked on every request, in the database. The key is the token's digest, not its text: 32 bytes
/// instead of about 700 for each of up to `capacity` tokens.
final class VerifiedTokenCache: Sendable {
    private let entries = Mutex<[SHA256Digest: VerifiedAccessToken]>([:])
    private let capacity: Int
    private let timeSource: TimeSource

    init(capacity: Int = 20_000, timeSource: TimeSource) {
        self.capacity = capacity
        self.timeSource = timeSource
    }

    func verify(_ token: String, using service: AccessTokenService) async throws(LatchkeyError) -> VerifiedAccessToken {
        let now = timeSource.now
        let key = SHA256.hash(data: Array(token.utf8))
        if let cached = entries.withLock({ $0[key] }) {
            if cached.expiresAt.addingTimeInterval(service.leeway) >= now { return cached }
            entries.withLock { _ = $0.removeValue(forKey: key) }
        }
        let verified = try await service.verify(token)
        entries.withLock { entries in
            if entries.count >= capacity {
                entries = entries.filter { $0.value.expiresAt > now }
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[key] = verified
        }
        return verified
    }
}

/// Allows an action at most once per interval (shared by concurrent requests).
final class Cooldown: Sendable {
    private let last = Mutex<Date>(.distantPast)
    private let interval: TimeInterval

    init(interval: TimeInterval) { self.interval = interval }

    func allow(now: Date = Date()) -> Bool {
        last.withLock { last in
            guard now.timeIntervalSince(last) >= interval else { return false }
            last = now
            return true
        }
    }
}
