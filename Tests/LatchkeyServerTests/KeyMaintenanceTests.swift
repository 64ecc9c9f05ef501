import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyServer
import LatchkeyTestSupport
import Testing

@Suite("Signing-key upkeep: a retiring key stays published as long as this server's own settings need it")
struct KeyMaintenanceTests {
    let box = try! SecretBox(base64Key: SecretBox.generateKey())
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("a key rotated by `latchkey keys rotate` under shorter settings is retired only after this server's tokens signed with it have expired")
    func retirementFollowsServerSettings() async throws {
        try await withTemporaryStore { store in
            var server = ServerConfiguration()
            server.accessTokenLifetime = 3600
            server.maintenanceInterval = 120
            try await KeyMaintenance.ensureActiveKey(store: store, box: box, now: Self.start, overlap: server.signingKeyOverlap)
            let old = try #require(try await store.signingKeys().first)

            // The admin's machine: development defaults (10-minute tokens, 30 s interval).
            let admin = ServerConfiguration()
            let fresh = try await KeyMaintenance.rotate(store: store, box: box, now: Self.start, overlap: admin.signingKeyOverlap)
            let states = Dictionary(uniqueKeysWithValues: try await store.signingKeys().map { ($0.keyID, $0.state) })
            #expect(states == [old.keyID: .retiring, fresh.keyID: .active])

            // The server signs with the old key until the new one's delay (245 s) has passed, so tokens it signed live until
            // about 3,845 s after the rotation; the stored retirement (965 s) comes long before.
            let lastOldToken = Self.start.addingTimeInterval(server.keyPropagationDelay + server.accessTokenLifetime)
            try await KeyMaintenance.ensureActiveKey(store: store, box: box, now: lastOldToken, overlap: server.signingKeyOverlap)
            #expect(try await store.signingKeys().first { $0.keyID == old.keyID }?.state == .retiring)

            try await KeyMaintenance.ensureActiveKey(
                store: store, box: box, now: Self.start.addingTimeInterval(server.signingKeyOverlap), overlap: server.signingKeyOverlap)
            #expect(try await store.signingKeys().first { $0.keyID == old.keyID }?.state == .retired)
            #expect(try await store.signingKeys().filter { $0.state == .active }.map(\.keyID) == [fresh.keyID])
        }
    }

    @Test("a stored retirement later than this server's overlap is kept")
    func storedRetirementKept() async throws {
        try await withTemporaryStore { store in
            try await KeyMaintenance.ensureActiveKey(store: store, box: box, now: Self.start)
            let old = try #require(try await store.signingKeys().first)
            _ = try await KeyMaintenance.rotate(store: store, box: box, now: Self.start, overlap: 7265)
            try await KeyMaintenance.ensureActiveKey(store: store, box: box, now: Self.start.addingTimeInterval(7000), overlap: 900)
            #expect(try await store.signingKeys().first { $0.keyID == old.keyID }?.state == .retiring)
            try await KeyMaintenance.ensureActiveKey(store: store, box: box, now: Self.start.addingTimeInterval(7265), overlap: 900)
            #expect(try await store.signingKeys().first { $0.keyID == old.keyID }?.state == .retired)
        }
    }
}
