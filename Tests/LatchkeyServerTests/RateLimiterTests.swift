import Foundation
import Testing

@testable import LatchkeyServer

/// The per-key limiter behind every 429: its windows, and a table that holds about a minute's keys.
@Suite("Server: the rate limiter counts per key per minute and forgets finished windows")
struct RateLimiterTests {
    let start: TimeInterval = 1_800_000_000.25

    @Test("a key over its limit waits for its window's end; another key and the next window are allowed")
    func windows() {
        let limiter = RateLimiter(perMinute: 3)
        for offset in 0..<3 { #expect(limiter.check("a", now: start + Double(offset)) == nil) }
        #expect(limiter.check("a", now: start + 3) == 57)
        #expect(limiter.check("a", now: start + 59.5) == 1)
        #expect(limiter.check("b", now: start + 4) == nil)
        #expect(limiter.check("a", now: start + 60) == nil)
    }

    @Test("a limit of 0 turns it off")
    func off() {
        let limiter = RateLimiter(perMinute: 0)
        for _ in 0..<10 { #expect(limiter.check("a", now: start) == nil) }
        #expect(limiter.keysHeld == 0)
    }

    @Test("finished windows are dropped as new keys come, open ones keep their counts")
    func pruning() {
        let limiter = RateLimiter(perMinute: 2)
        #expect(limiter.check("kept", now: start + 30) == nil)
        #expect(limiter.check("kept", now: start + 30) == nil)
        for index in 0..<5_000 { _ = limiter.check("early \(index)", now: start) }
        #expect(limiter.keysHeld == 5_001)
        // A minute later the early keys' windows have ended: the next keys make the table drop them.
        for index in 0..<3_500 { _ = limiter.check("late \(index)", now: start + 61) }
        #expect(limiter.keysHeld == 3_501)
        // "kept" opened its window at +30: still open at +61, and still over its limit.
        #expect(limiter.check("kept", now: start + 61) != nil)
    }

    @Test("a clock that steps back does not reopen or break a window")
    func clockBack() {
        let limiter = RateLimiter(perMinute: 1)
        #expect(limiter.check("a", now: start) == nil)
        #expect(limiter.check("a", now: start - 10) == 60)
    }
}
