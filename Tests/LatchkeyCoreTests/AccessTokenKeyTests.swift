import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyTestSupport
import Synchronization
import Testing

@Suite("Access-token keys: a new key is accepted at once and signs only after its propagation delay")
struct AccessTokenKeyTests {
    let box = try! SecretBox(base64Key: SecretBox.generateKey())
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// The key id in a token's header.
    func keyID(_ token: String) throws -> String? {
        let header = try #require(token.split(separator: ".").first)
        return (try JSONSerialization.jsonObject(with: base64URLDecoded(header)) as? [String: Any])?["kid"] as? String
    }

    @Test("a lone first key signs at once; after a rotation the old key signs until the new one's delay has passed")
    func propagation() async throws {
        let clock = Mutex(Self.start)
        let keys = AccessTokenKeys(propagationDelay: 65)
        let service = AccessTokenService(issuer: "https://id.example.com", audience: "api", keys: keys, timeSource: TimeSource { clock.withLock { $0 } })
        var first = try AccessTokenKeys.generateRecord(box: box, now: Self.start)
        try await keys.load([first], box: box)
        #expect(try keyID(service.issue(userID: "u", sessionID: "s", clientID: "c").token) == first.keyID)

        let rotatedAt = Self.start.addingTimeInterval(3600)
        first.state = .retiring
        let second = try AccessTokenKeys.generateRecord(box: box, now: rotatedAt)
        try await keys.load([second, first], box: box)
        // Published and accepted at once: a token another instance signs with it verifies here.
        #expect(keys.jwks["keys"]?.map { $0["kid"] } == [first.keyID, second.keyID])
        clock.withLock { $0 = rotatedAt.addingTimeInterval(64) }
        let before = try service.issue(userID: "u", sessionID: "s", clientID: "c").token
        #expect(try keyID(before) == first.keyID)
        clock.withLock { $0 = rotatedAt.addingTimeInterval(65) }
        let after = try service.issue(userID: "u", sessionID: "s", clientID: "c").token
        #expect(try keyID(after) == second.keyID)
        #expect(try await service.verify(before).userID == "u")
        #expect(try await service.verify(after).userID == "u")
    }
}
