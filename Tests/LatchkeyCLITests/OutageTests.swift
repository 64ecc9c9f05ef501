import Foundation
import LatchkeyTestSupport
import Synchronization
import Testing

/// The database going away under load: PostgreSQL restarted, SQLite's disk full.
@Suite("Faults: database outages under load", .serialized, .enabled(if: loadTestsEnabled, "a load suite: LATCHKEY_LOAD_TESTS=1"))
struct OutageTests {
    /// What a client saw: its last good refresh token and every answer's status and time.
    final class Client: Sendable {
        let token: Mutex<String>
        let access: Mutex<String>
        init(refresh: String, access: String) {
            token = Mutex(refresh)
            self.access = Mutex(access)
        }
    }

    final class Tally: Sendable {
        private let counts = Mutex<[String: Int]>([:])
        private let slowest = Mutex<Duration>(.zero)
        func record(_ what: String, _ status: Int, _ took: Duration) {
            counts.withLock { $0["\(what) \(status)", default: 0] += 1 }
            slowest.withLock { $0 = max($0, took) }
        }
        var snapshot: [String: Int] { counts.withLock { $0 } }
        var longest: Duration { slowest.withLock { $0 } }
        private let notes = Mutex<[String]>([])
        func note(_ text: String) { notes.withLock { $0.append(text) } }
        var failures: [String] { notes.withLock { $0 } }
        func reset() {
            counts.withLock { $0 = [:] }
            slowest.withLock { $0 = .zero }
        }
    }

    /// Each client alternates a refresh and a `GET /v1/me` until `stop` is set. A 503 keeps the token it was sent
    /// with (the rotation did not happen, or will be answered with the same successor), and waits a little.
    static func load(_ fleet: Fleet, clients: [Client], tally: Tally, stop: CrashTests.Flag) async {
        let clock = ContinuousClock()
        await withTaskGroup(of: Void.self) { group in
            for client in clients {
                group.addTask {
                    // A failed test cancels the load: stop then too, or the loop would spin on cancelled requests.
                    while !stop.isSet, !Task.isCancelled {
                        var started = clock.now
                        var refreshed: Fleet.Answer?
                        do {
                            refreshed = try await fleet.refresh(at: 0, client.token.withLock { $0 })
                        } catch {
                            tally.note("a refresh failed after \(clock.now - started): \(error)")
                        }
                        tally.record("refresh", refreshed?.status ?? 0, clock.now - started)
                        if refreshed?.status == 200, let next = refreshed?.json["refreshToken"] as? String,
                            let access = refreshed?.json["accessToken"] as? String
                        {
                            client.token.withLock { $0 = next }
                            client.access.withLock { $0 = access }
                        }
                        started = clock.now
                        let me = try? await fleet.get(0, "/v1/me", bearer: client.access.withLock { $0 })
                        tally.record("me", me?.status ?? 0, clock.now - started)
                        if refreshed?.status != 200 || me?.status != 200 { try? await Task.sleep(for: .milliseconds(100)) }
                    }
                }
            }
        }
    }

    /// What the clients saw in the second before `body` ran (`before`) and from the tally's last reset in `body`
    /// until the load stopped (`after`); then how each client's last token answered one more refresh (`last`).
    struct LoadRun {
        let clients: Int
        let before: [String: Int]
        let after: [String: Int]
        let last: [Int: Int]
        /// Requests that failed without an answer, over the whole run.
        let failures: [String]
    }

    /// Signs in `count` clients and keeps them under ``load(_:clients:tally:stop:)`` while `body` runs, from one second
    /// before it until two seconds after it returned (or until it threw).
    static func underLoad(_ fleet: Fleet, clients count: Int = 16, _ body: (Tally) async throws -> Void) async throws -> LoadRun {
        let clients = try await signIn(fleet, count: count)
        let tally = Tally()
        let stop = CrashTests.Flag()
        async let loadDone: Void = load(fleet, clients: clients, tally: tally, stop: stop)
        do {
            try await Task.sleep(for: .seconds(1))
            let before = tally.snapshot
            tally.reset()
            try await body(tally)
            try await Task.sleep(for: .seconds(2))
            stop.set()
            await loadDone
            let after = tally.snapshot
            return LoadRun(clients: clients.count, before: before, after: after, last: try await lastTokens(fleet, clients), failures: tally.failures)
        } catch {
            stop.set()
            await loadDone
            throw error
        }
    }

    static func signIn(_ fleet: Fleet, count: Int) async throws -> [Client] {
        var clients: [Client] = []
        for _ in 0..<count {
            let signedIn = try await fleet.signIn(at: 0)
            clients.append(Client(refresh: signedIn.refresh, access: signedIn.access))
        }
        return clients
    }

    /// Every client's last token, refreshed once more: how many answered what.
    static func lastTokens(_ fleet: Fleet, _ clients: [Client]) async throws -> [Int: Int] {
        var statuses: [Int: Int] = [:]
        for client in clients { statuses[try await fleet.refresh(at: 0, client.token.withLock { $0 }).status, default: 0] += 1 }
        return statuses
    }

    @Test(
        "PostgreSQL stopped for 20 s under load, then started: 503 temporarily_unavailable meanwhile (never 500, never a hang), /readyz fails and recovers, no session lost",
        .enabled(if: Fleet.databaseURL != nil, "needs PostgreSQL (LATCHKEY_TEST_DATABASE_URL)"))
    func postgresRestart() async throws {
        let postgres = try await ThrowawayPostgres.start()
        defer { postgres.destroy() }
        let fleet = try await Fleet(instances: 1, server: postgres.url)
        defer { fleet.stop() }
        var during: [String: Int] = [:]
        var longestDuring = Duration.zero
        var readyDuring: Set<Int> = []
        var recoveredAfter: Duration?
        let run = try await Self.underLoad(fleet) { tally in
            try await postgres.stop()
            let outage = ContinuousClock().now
            while ContinuousClock().now - outage < .seconds(20) {
                readyDuring.insert((try? await fleet.get(0, "/readyz").status) ?? 0)
                try await Task.sleep(for: .seconds(2))
            }
            during = tally.snapshot
            longestDuring = tally.longest
            tally.reset()
            try await postgres.start()
            let restarted = ContinuousClock().now
            while ContinuousClock().now - restarted < .seconds(90) {
                if (try? await fleet.get(0, "/readyz").status) == 200 {
                    recoveredAfter = ContinuousClock().now - restarted
                    break
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        let (before, after, last) = (run.before, run.after, run.last)
        print("postgres restart: before \(before); during a 20 s outage \(during), slowest \(longestDuring), /readyz \(readyDuring.sorted());")
        print("postgres restart: ready again \(recoveredAfter.map { "\($0)" } ?? "never") after the start; then \(after); last tokens \(last)")

        print("postgres restart: failed requests \(run.failures)")
        #expect(before["refresh 200", default: 0] > 0)
        // Requests that had their connection before the stop may still answer 200.
        #expect(during.keys.allSatisfy { $0.hasSuffix(" 200") || $0.hasSuffix(" 503") }, "during the outage: \(during)")
        #expect(during["refresh 503", default: 0] > 0)
        #expect(longestDuring < .seconds(31), "a request waited \(longestDuring)")
        #expect(readyDuring == [503])
        #expect(recoveredAfter != nil)
        #expect(after["refresh 200", default: 0] > 0)
        #expect(after.keys.allSatisfy { $0.hasSuffix(" 200") || $0.hasSuffix(" 503") }, "after the restart: \(after)")
        #expect(last == [200: run.clients])
        #expect(try await fleet.count("SELECT count(*) FROM sessions WHERE revoked_at IS NULL") == run.clients)
    }

    @Test("SQLite with its files capped (as on a full disk): writes answer 503, reads go on, nothing is lost or corrupted")
    func sqliteDiskFull() async throws {
        let fleet = try await Fleet(instances: 1, start: false, sqlite: true)
        defer { fleet.stop() }
        try await fleet.start(0, ignoringFileSizeSignal: true)
        let pid = try #require(fleet.processID(0))
        var size = 0
        var during: [String: Int] = [:]
        var signInDuring: (sub: String, access: String, refresh: String)?
        var ready = 0
        let run = try await Self.underLoad(fleet) { tally in
            // No file may grow past the size the database has now: the next pages have nowhere to go. Only the soft
            // limit, which a process without CAP_SYS_RESOURCE can raise again.
            size = try FileManager.default.attributesOfItem(atPath: fleet.database)[.size] as? Int ?? 0
            try await ThrowawayPostgres.shell("prlimit --pid \(pid) --fsize=\(size):unlimited")
            try await Task.sleep(for: .seconds(3))
            during = tally.snapshot
            signInDuring = try? await fleet.signIn(at: 0)
            ready = try await fleet.get(0, "/readyz").status
            try await ThrowawayPostgres.shell("prlimit --pid \(pid) --fsize=unlimited:unlimited")
            tally.reset()
        }
        let (before, after, last) = (run.before, run.after, run.last)
        print("disk full: before \(before); capped at \(size) bytes \(during), /readyz \(ready); lifted \(after); last tokens \(last)")

        #expect(before["refresh 200", default: 0] > 0)
        #expect(during["refresh 503", default: 0] > 0, "\(during)")
        #expect(during.keys.allSatisfy { $0.hasSuffix(" 200") || $0.hasSuffix(" 503") }, "while capped: \(during)")
        #expect(during["me 200", default: 0] > 0 && during["me 503"] == nil, "reads must go on: \(during)")
        #expect(signInDuring == nil)
        #expect(ready == 200)
        #expect(after["refresh 200", default: 0] > 0)
        #expect(last == [200: run.clients])
        fleet.kill(0)
        #expect(try await CrashTests.integrityCheck(fleet.database) == "ok")
    }
}

/// A PostgreSQL cluster of this test's own (scripts/postgres-for-tests.sh in a directory of its own), so stopping
/// it disturbs no other suite.
struct ThrowawayPostgres {
    let directory: String
    let url: String
    let port: Int

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/postgres-for-tests.sh").path

    static func start() async throws -> ThrowawayPostgres {
        let directory = try await shell("mktemp -d /tmp/latchkey-pg-outage.XXXXXX").trimmingCharacters(in: .whitespacesAndNewlines)
        let url = try await shell(
            "LATCHKEY_TEST_PG_PORT=\(Fleet.freePort()) LATCHKEY_TEST_PG_DIR=\(directory) bash \(script)"
        ).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let port = URLComponents(string: url)?.port else { throw HarnessError("the script printed \(url)") }
        return ThrowawayPostgres(directory: directory, url: url, port: port)
    }

    private var pgctl: String { "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl -D \(directory)/data" }

    /// As a crash would: no checkpoint, every connection cut.
    func stop() async throws { try await Self.asPostgres("\(pgctl) -m immediate stop >/dev/null 2>&1 </dev/null") }

    func start() async throws {
        try await Self.asPostgres(
            "\(pgctl) -o '-c listen_addresses=127.0.0.1 -p \(port) -k \(directory)' -l \(directory)/log -w start >/dev/null 2>&1 </dev/null")
    }

    func destroy() {
        let command = "\(pgctl) -m immediate stop; rm -rf \(directory)"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", getuid() == 0 ? "su postgres -s /bin/bash -c \"\(command)\"; rm -rf \(directory)" : command]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        if (try? process.run()) != nil { _ = Self.exitStatus(process) }
    }

    private static func asPostgres(_ command: String) async throws {
        _ = try await shell(getuid() == 0 ? "su postgres -s /bin/bash -c \"\(command)\"" : command)
    }

    /// Waits for the process with waitpid: Foundation's `waitUntilExit` was seen to miss the exit of a script that
    /// starts a daemon through su, and hang.
    private static func exitStatus(_ process: Process) -> Int32 {
        var status: Int32 = 0
        if waitpid(process.processIdentifier, &status, 0) == process.processIdentifier { return (status >> 8) & 0xff }
        process.waitUntilExit()  // Foundation reaped it first
        return process.terminationStatus
    }

    /// Runs `command` with bash on a thread of its own and returns its standard output; throws when it fails.
    @discardableResult
    static func shell(_ command: String) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/bin/bash")
                process.arguments = ["-c", command]
                let output = Pipe()
                process.standardOutput = output
                process.standardError = FileHandle.nullDevice
                do {
                    try process.run()
                    let data = output.fileHandleForReading.readDataToEndOfFile()
                    let status = Self.exitStatus(process)
                    guard status == 0 else { throw HarnessError("`\(command)` exited with \(status)") }
                    continuation.resume(returning: String(decoding: data, as: UTF8.self))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}
