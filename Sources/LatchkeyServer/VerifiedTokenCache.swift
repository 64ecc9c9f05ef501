import Foundation
import LatchkeyCore
import Synchronization

/// Access tokens already verified, by their exact text, until they expire.
///
/// Apps send the same access token with every call for its whole lifetime; checking its ES256 signature
/// once instead of on every request is most of the cost of an authenticated call. Session revocation is
/// still checked on every request, in the database.
final class VerifiedTokenCache: Sendable {
    private let entries = Mutex<[String: VerifiedAccessToken]>([:])
    private let capacity: Int
    private let timeSource: TimeSource

    init(capacity: Int = 20_000, timeSource: TimeSource) {
        self.capacity = capacity
        self.timeSource = timeSource
    }

    func verify(_ token: String, using service: AccessTokenService) async throws(LatchkeyError) -> VerifiedAccessToken {
        let now = timeSource.now
        if let cached = entries.withLock({ $0[token] }) {
            if cached.expiresAt.addingTimeInterval(service.leeway) >= now { return cached }
            entries.withLock { _ = $0.removeValue(forKey: token) }
        }
        let verified = try await service.verify(token)
        entries.withLock { entries in
            if entries.count >= capacity {
                entries = entries.filter { $0.value.expiresAt > now }
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[token] = verified
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
