import Foundation
import LatchkeyTestSupport
import Logging
import SQLiteKit
import Synchronization
import Testing

/// `kill -9` of a server under refresh load from many clients: nothing a client was told is lost.
@Suite("Faults: kill -9 under refresh load", .serialized, .enabled(if: loadTestsEnabled, "a load suite: LATCHKEY_LOAD_TESTS=1"))
struct CrashTests {
    /// What one client holds: the last refresh token it received with a 200, and how many it received.
    final class Client: Sendable {
        let token: Mutex<String>
        let rotations = Mutex(0)
        init(_ token: String) { self.token = Mutex(token) }
    }

    final class Flag: Sendable {
        private let value = Mutex(false)
        var isSet: Bool { value.withLock { $0 } }
        func set() { value.withLock { $0 = true } }
    }

    /// Each client refreshes in a loop against `instances` until a request fails (the server died) or `stop` is set.
    static func load(_ fleet: Fleet, clients: [Client], instances: [Int], stop: Flag) async {
        await withTaskGroup(of: Void.self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    let instance = instances[index % instances.count]
                    while !stop.isSet {
                        guard let answer = try? await fleet.refresh(at: instance, client.token.withLock { $0 }), answer.status == 200,
                            let next = answer.json["refreshToken"] as? String
                        else { return }
                        client.token.withLock { $0 = next }
                        client.rotations.withLock { $0 += 1 }
                    }
                }
            }
        }
    }

    /// Signs in `count` clients at instance 0.
    static func clients(_ fleet: Fleet, count: Int) async throws -> [Client] {
        var clients: [Client] = []
        for _ in 0..<count { clients.append(Client(try await fleet.signIn(at: 0).refresh)) }
        return clients
    }

    @Test("SQLite: after kill -9 and a restart every client's last token works, and the file passes integrity_check")
    func sqlite() async throws {
        let fleet = try await Fleet(instances: 1, sqlite: true)
        defer { fleet.stop() }
        let clients = try await Self.clients(fleet, count: 48)
        let stop = Flag()
        async let loadDone: Void = Self.load(fleet, clients: clients, instances: [0], stop: stop)
        try await Task.sleep(for: .milliseconds(1500))
        fleet.kill(0)
        await loadDone
        let before = clients.reduce(0) { $0 + $1.rotations.withLock { $0 } }
        try await fleet.start(0)
        var statuses: [Int: Int] = [:]
        for client in clients {
            let answer = try await fleet.refresh(at: 0, client.token.withLock { $0 })
            statuses[answer.status, default: 0] += 1
        }
        print("crash: \(before) rotations before kill -9 (48 clients); after the restart the last tokens answered \(statuses)")
        #expect(before > 100)
        #expect(statuses == [200: clients.count])
        // A second kill -9, then SQLite's own check of the file as the crash left it.
        fleet.kill(0)
        #expect(try await Self.integrityCheck(fleet.database) == "ok")
    }

    @Test(
        "PostgreSQL: kill -9 of one instance of two under load; its clients carry on at the other with their last tokens",
        .enabled(if: Fleet.databaseURL != nil, "needs LATCHKEY_TEST_DATABASE_URL"))
    func postgres() async throws {
        let fleet = try await Fleet(instances: 2)
        defer { fleet.stop() }
        let clients = try await Self.clients(fleet, count: 48)
        let stop = Flag()
        async let loadDone: Void = Self.load(fleet, clients: clients, instances: [0, 1], stop: stop)
        try await Task.sleep(for: .milliseconds(1500))
        fleet.kill(1)
        try await Task.sleep(for: .milliseconds(300))
        stop.set()
        await loadDone
        let before = clients.reduce(0) { $0 + $1.rotations.withLock { $0 } }
        var statuses: [Int: Int] = [:]
        for client in clients {
            let answer = try await fleet.refresh(at: 0, client.token.withLock { $0 })
            statuses[answer.status, default: 0] += 1
        }
        print("crash: \(before) rotations on two instances, one killed; the last tokens then answered \(statuses) at the survivor")
        #expect(before > 100)
        #expect(statuses == [200: clients.count])
    }

    static func integrityCheck(_ path: String) async throws -> String {
        let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "latchkey.tests"))
        let rows = try await connection.query("PRAGMA integrity_check")
        try await connection.close()
        return rows.first?.columns.first?.data.string ?? ""
    }
}
