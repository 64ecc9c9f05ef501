import Crypto
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Testing

@Suite("Record identifiers and random tokens")
struct IdentifierTests {
    @Test("an identifier is a lowercase version-7 UUID whose first 48 bits are the time in milliseconds")
    func layout() throws {
        let before = UInt64(Date().timeIntervalSince1970 * 1000)
        let id = newIdentifier()
        let after = UInt64(Date().timeIntervalSince1970 * 1000)
        #expect(id.utf8.count == 36)
        #expect(id == id.lowercased())
        let parsed = try #require(UUID(uuidString: id))
        #expect(id == parsed.uuidString.lowercased())
        let uuid = parsed.uuid
        let millis = [uuid.0, uuid.1, uuid.2, uuid.3, uuid.4, uuid.5].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect((before...after).contains(millis))
        #expect(uuid.6 >> 4 == 7)
        #expect(uuid.8 >> 6 == 0b10)
    }

    @Test("identifiers made later sort later, and 10,000 of them are distinct")
    func orderAndUniqueness() async throws {
        let first = newIdentifier()
        try await Task.sleep(for: .milliseconds(3))
        #expect(first < newIdentifier())
        let many = (0..<10_000).map { _ in newIdentifier() }
        #expect(Set(many).count == many.count)
        // The random part varies in every position it covers (a constant byte would show as a fixed column).
        let randomColumns = Set(many.map { Array($0.utf8)[24...] }.flatMap { $0.enumerated().map { "\($0.offset):\($0.element)" } })
        #expect(randomColumns.count > 12 * 15)
    }

    @Test("identifiers made on many threads at once are distinct: no random byte is handed out twice")
    func concurrentDraws() async {
        let batches = await withTaskGroup(of: [String].self) { group in
            for _ in 0..<8 { group.addTask { (0..<2_000).map { _ in newIdentifier() } } }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(batches.count == 16_000)
        #expect(Set(batches.map { $0.suffix(20) }).count == batches.count)
    }

    @Test("refresh tokens are well formed and distinct")
    func refreshTokens() {
        let tokens = RefreshTokens(rotationKey: .init(size: .bits256))
        let many = (0..<10_000).map { _ in tokens.generate() }
        #expect(many.allSatisfy(RefreshTokens.isWellFormed))
        #expect(Set(many).count == many.count)
    }
}
