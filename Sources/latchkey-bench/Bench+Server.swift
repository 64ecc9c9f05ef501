import AsyncHTTPClient
import CoreFoundation
import Crypto
import Foundation
import LatchkeyBenchReport
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import LatchkeyModels
import Logging
import NIOCore
import NIOHTTP1

/// What the server and emulator rows share: a silent logger, a temporary directory (the caller removes it), a
/// development team in it, and an emulator configuration for one app that sends no notifications.
enum BenchSetUp {
    static func quietEmulator(clientID: String) throws -> (Logger, String, (teamID: String, keyID: String, keyFile: String), EmulatorConfiguration) {
        var logger = Logger(label: "latchkey.bench")
        logger.logLevel = .critical
        let directory = NSTemporaryDirectory() + "latchkey-bench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A team of the bench's own: its key, written where `latchkey serve` reads it, signs the client secrets.
        let key = P256.Signing.PrivateKey()
        let team = (teamID: "BENCHTEAM1", keyID: "BENCHKEY01", keyFile: directory + "/AuthKey_BENCHKEY01.p8")
        try key.pemRepresentation.write(toFile: team.keyFile, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: team.keyFile)
        var configuration = EmulatorConfiguration()
        configuration.addTeam(teamID: team.teamID, keyID: team.keyID, publicKeyPEM: key.publicKey.pemRepresentation)
        configuration.addApp(clientID: clientID, teamID: team.teamID, redirectURIs: ["https://app.example.com/callback"])
        configuration.addClientEverywhere(clientID, redirectURIs: ["https://app.example.com/callback"])
        return (logger, directory, team, configuration)
    }

    /// The directory of this executable, where `swift build` also puts `latchkey` and `latchkey-sdk-probe`.
    static var binDirectory: URL { URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent() }

    /// The `latchkey` the server rows start: `LATCHKEY_BENCH_SERVER` (another build, to compare two builds under one
    /// bench), else the one beside this executable.
    static func serverExecutable() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["LATCHKEY_BENCH_SERVER"] { return URL(fileURLWithPath: path).resolvingSymlinksInPath() }
        let beside = binDirectory.appendingPathComponent("latchkey")
        guard FileManager.default.isExecutableFile(atPath: beside.path) else {
            throw BenchError(
                "no latchkey beside this binary (\(beside.path)): build it first (swift build -c release builds every product), or set LATCHKEY_BENCH_SERVER")
        }
        return beside
    }
}

/// The server rows of `latchkey-bench`: a real `latchkey serve` child process on loopback, the Apple emulator
/// in this process, and a load generator with 32 concurrent connections.
struct ServerBench {
    let seconds: Double
    let concurrency = 32
    /// Rows compared with a baseline measured alongside take this many turns each.
    static let rounds = 4
    /// Operations a path runs before its CPU is measured, so that a row is the server's steady cost, not its start's.
    static let warmUp = 128

    /// The `round`th of ``rounds`` nearly equal shares of `items`.
    static func share<T>(_ items: [T], _ round: Int) -> ArraySlice<T> {
        items[items.count * round / rounds..<items.count * (round + 1) / rounds]
    }

    func rows() async throws -> [BenchRow] {
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 96
        return try await withEmulator(client: clientConfiguration) { directory, environment, emulator, http in
            var rows: [BenchRow] = []
            let server = try ChildServer(environment: environment.merging(["LATCHKEY_DATABASE_URL": directory + "/batched.sqlite"]) { $1 })
            defer { server.stop() }
            let idleRSS = server.residentMegabytes
            let idleMap = MemoryMap(pid: server.processIdentifier)
            // The baseline of the ×-one-commit rows runs alongside, and the two take turns: measured minutes apart, the
            // machine's drift (CPU-bound batches slow down, fsync-bound single commits do not) decided the ratios.
            let unbatchedServer = try ChildServer(
                environment: environment.merging(["LATCHKEY_DATABASE_URL": directory + "/unbatched.sqlite", "LATCHKEY_DATABASE_MAX_WRITE_BATCH": "1"]) { $1 })
            defer { unbatchedServer.stop() }

            // A warm-up first, as every other row has one: measured on the fresh server, the first sign-ins paid for its
            // start (code paged in, caches filled, the first connections to the emulator, the database file growing).
            _ = try await signIn(try await mintSignIns(emulator: emulator, http: http, count: Self.warmUp), server: server, http: http)
            let signIns = try await mintSignIns(emulator: emulator, http: http, count: max(200, Int(300 * seconds)))
            let ((signInRate, sessions), signInCPU, _) = try await server.metered { try await signIn(signIns, server: server, http: http) }
            let paced = try await mintSignIns(emulator: emulator, http: http, count: signIns.count)
            let appleAtEqualRate = try await atEqualRate(
                "apple_sign_in", server: server, emulator: emulator, http: http, count: paced.count, pathRate: signInRate
            ) { _ = try await signIn(paced[$0], server: server, http: http) }
            let accessToken = sessions[0].accessToken
            let (_, unbatchedSessions) = try await signIn(try await mintSignIns(emulator: emulator, http: http, count: 64), server: unbatchedServer, http: http)

            // Enough that the turns' starts and ends (a few small commits each) weigh little.
            let googleSignIns = try await mintSignIns(emulator: emulator, http: http, count: max(1_600, Int(2_000 * seconds)), provider: "google")
            let unbatchedGoogleSignIns = try await mintSignIns(emulator: emulator, http: http, count: max(200, Int(100 * seconds)), provider: "google")
            var (googleSeconds, googleCPU, unbatchedGoogleSeconds) = (0.0, 0.0, 0.0)
            var (googleStorage, unbatchedGoogleStorage) = (StorageWrites(), StorageWrites())
            for round in 0..<Self.rounds {
                let (_, cpu, wall) = try await googleStorage.counting(server) {
                    try await server.metered { try await signIn(Self.share(googleSignIns, round), server: server, http: http) }
                }
                (googleSeconds, googleCPU) = (googleSeconds + wall, googleCPU + cpu)
                let (_, _, unbatchedWall) = try await unbatchedGoogleStorage.counting(unbatchedServer) {
                    try await unbatchedServer.metered { try await signIn(Self.share(unbatchedGoogleSignIns, round), server: unbatchedServer, http: http) }
                }
                unbatchedGoogleSeconds += unbatchedWall
            }
            let googleRate = Double(googleSignIns.count) / googleSeconds

            let ((healthz, healthzCount), healthzCPU, _) = try await server.metered {
                try await loadCounting(http, seconds: seconds) { _ in (server.url + "/healthz", "GET", nil, nil) }
            }
            let healthzMicroseconds = healthzCPU / Double(healthzCount) * 1e6
            let me = try await load(http, seconds: seconds) { _ in (server.url + "/v1/me", "GET", nil, accessToken) }
            rows.append(
                BenchRow(name: "get_v1_me_bearer", opsPerSecond: me, baselineName: "get_healthz", baselineOpsPerSecond: healthz, unit: .operationsPerSecond))
            rows.append(
                BenchRow(
                    name: "google_sign_in_sqlite_durable", opsPerSecond: googleRate, baselineName: "google_sign_in_sqlite_one_commit_each",
                    baselineOpsPerSecond: Double(unbatchedGoogleSignIns.count) / unbatchedGoogleSeconds, unit: .operationsPerSecond))
            rows.append(
                BenchRow(
                    name: "apple_sign_in_with_code_exchange", opsPerSecond: signInRate, baselineName: "get_healthz", baselineOpsPerSecond: healthz,
                    unit: .operationsPerSecond))
            rows.append(
                BenchRow(
                    name: "google_id_token_sign_in", opsPerSecond: googleRate, baselineName: "get_healthz", baselineOpsPerSecond: healthz,
                    unit: .operationsPerSecond))
            rows.append(
                BenchRow(
                    name: "server_cpu_us_per_apple_sign_in", opsPerSecond: signInCPU / Double(signIns.count) * 1e6, baselineName: "server_cpu_us_per_healthz",
                    baselineOpsPerSecond: healthzMicroseconds, unit: .microseconds))
            rows.append(appleAtEqualRate)
            rows.append(
                BenchRow(
                    name: "server_cpu_us_per_google_sign_in", opsPerSecond: googleCPU / Double(googleSignIns.count) * 1e6,
                    baselineName: "server_cpu_us_per_healthz", baselineOpsPerSecond: healthzMicroseconds, unit: .microseconds))

            rows += try await passkeyRows(
                server: server, emulator: emulator, http: http, sessions: Array(sessions.prefix(concurrency)),
                google: (googleRate, googleCPU / Double(googleSignIns.count) * 1e6))

            if let batched = googleStorage.perOperation(googleSignIns.count),
                let unbatched = unbatchedGoogleStorage.perOperation(unbatchedGoogleSignIns.count)
            {
                rows.append(
                    BenchRow(
                        name: "storage_bytes_written_per_google_sign_in", opsPerSecond: batched,
                        baselineName: "storage_bytes_written_per_google_sign_in_one_commit_each", baselineOpsPerSecond: unbatched, unit: .bytes))
            }

            rows += try await sdkRows(server: server, signIn: try await mintSignIns(emulator: emulator, http: http, count: 1)[0])
            rows += try await dpopRows(server: server, emulator: emulator, http: http)
            rows += try await tracingRows(environment: environment, directory: directory, emulator: emulator, http: http)
            rows += try await webhookRows(
                plain: server, environment: environment.merging(["LATCHKEY_DATABASE_URL": directory + "/hooked.sqlite"]) { $1 }, emulator: emulator,
                http: http)

            let (batched, unbatched) = try await rotationTurns(
                server, sessions.map(\.refreshToken), unbatchedServer, unbatchedSessions.map(\.refreshToken), http: http)
            unbatchedServer.stop()
            let (rotationCount, rotationCPU, rotationWall, benchCPU) = (batched.count, batched.cpu, batched.seconds, batched.benchCPU)
            rows.insert(
                BenchRow(
                    name: "refresh_rotation_sqlite_durable", opsPerSecond: batched.rate, baselineName: "refresh_rotation_sqlite_one_commit_each",
                    baselineOpsPerSecond: unbatched.rate, unit: .operationsPerSecond), at: 1)
            if let batchedBytes = batched.storage.perOperation(batched.count), let unbatchedBytes = unbatched.storage.perOperation(unbatched.count) {
                rows.append(
                    BenchRow(
                        name: "storage_bytes_written_per_durable_rotation", opsPerSecond: batchedBytes,
                        baselineName: "storage_bytes_written_per_rotation_one_commit_each", baselineOpsPerSecond: unbatchedBytes, unit: .bytes))
            }
            let busiestThread = batched.threadCPU.values.max() ?? 0
            rows.append(
                BenchRow(
                    name: "server_cpu_us_per_durable_rotation", opsPerSecond: rotationCPU / Double(rotationCount) * 1e6,
                    baselineName: "server_cpu_us_per_healthz",
                    baselineOpsPerSecond: healthzMicroseconds, unit: .microseconds))
            rows.append(
                BenchRow(
                    name: "server_cores_busy_during_rotations", opsPerSecond: rotationCPU / rotationWall, baselineName: "cores",
                    baselineOpsPerSecond: Double(ProcessInfo.processInfo.activeProcessorCount), unit: .cores))
            // The load generator shares the cores: together they show whether the machine was the limit.
            rows.append(
                BenchRow(
                    name: "machine_cores_busy_during_rotations", opsPerSecond: (rotationCPU + benchCPU) / rotationWall,
                    baselineName: "cores", baselineOpsPerSecond: Double(ProcessInfo.processInfo.activeProcessorCount), unit: .cores))
            // No one thread (the database's, an event loop) may carry the server: its share of the server's CPU.
            rows.append(
                BenchRow(
                    name: "server_busiest_thread_cpu_during_rotations", opsPerSecond: busiestThread / rotationWall,
                    baselineName: "server_cores_busy_during_rotations", baselineOpsPerSecond: rotationCPU / rotationWall, unit: .cores))
            rows.append(
                BenchRow(
                    name: "peak_rss_megabytes", opsPerSecond: server.peakMegabytes, baselineName: "idle_rss_megabytes", baselineOpsPerSecond: idleRSS,
                    unit: .megabytes))
            rows += try await memoryRows(server: server, idle: (idleRSS, idleMap), emulator: emulator, http: http)
            server.stop()
            rows += try await importRows(directory: directory, signInsPerSecond: googleRate)

            if let url = ProcessInfo.processInfo.environment["LATCHKEY_BENCH_DATABASE_URL"] {
                rows.insert(
                    contentsOf: try await postgresRows(url: url, directory: directory, environment: environment, emulator: emulator, http: http), at: 3)
            }
            return rows
        }
    }

    /// The settings of every bench server: Apple and Google at the emulator, passkeys, a fresh encryption key, and rate
    /// limits out of the way.
    static func environment(team: (teamID: String, keyID: String, keyFile: String), emulator: RunningEmulator) -> [String: String] {
        [
            "LATCHKEY_APPLE_TEAM_ID": team.teamID, "LATCHKEY_APPLE_KEY_ID": team.keyID, "LATCHKEY_APPLE_PRIVATE_KEY_FILE": team.keyFile,
            "LATCHKEY_APPLE_CLIENT_IDS": "com.example.app", "LATCHKEY_APPLE_BASE_URL": emulator.baseURL,
            "LATCHKEY_GOOGLE_CLIENT_IDS": "com.example.app", "LATCHKEY_GOOGLE_DISCOVERY_URL": emulator.baseURL + "/google/.well-known/openid-configuration",
            "LATCHKEY_ENCRYPTION_KEY": SecretBox.generateKey(), "LATCHKEY_RATE_LIMIT_PER_IP": "100000000", "LATCHKEY_RATE_LIMIT_PER_SUBJECT": "100000000",
        ].merging(passkeySettings) { $1 }
    }

    /// PostgreSQL at `url`: durable rotations with one instance against SQLite's, and with two instances on the same
    /// database against one. The SQLite server runs alongside and the two take turns, a quarter of the time each
    /// round: the machine's speed drifts over minutes, so measured apart the comparison mostly showed the drift.
    private func postgresRows(url: String, directory: String, environment: [String: String], emulator: RunningEmulator, http: HTTPClient) async throws
        -> [BenchRow]
    {
        // A bench database keeps its signing keys between runs, so its encryption key must stay the same:
        // derived from the URL (a bench-only key; never point the bench at a real database). The phrase is the one
        // `latchkey bench` used, so databases it made keep working.
        let stableKey = Data(SHA256.hash(data: Array(("latchkey bench " + url).utf8))).base64EncodedString()
        let postgresEnvironment = environment.merging(["LATCHKEY_DATABASE_URL": url, "LATCHKEY_ENCRYPTION_KEY": stableKey]) { $1 }
        let first = try ChildServer(environment: postgresEnvironment)
        defer { first.stop() }
        let sqlite = try ChildServer(environment: environment.merging(["LATCHKEY_DATABASE_URL": directory + "/alongside.sqlite"]) { $1 })
        defer { sqlite.stop() }
        let (_, sessions) = try await signIn(try await mintSignIns(emulator: emulator, http: http, count: 128), server: first, http: http)
        let (_, sqliteSessions) = try await signIn(try await mintSignIns(emulator: emulator, http: http, count: 64), server: sqlite, http: http)
        // Unmeasured first: the connection pool opens its connections (a PostgreSQL process each) on demand.
        let postgresTokens = try await rotations(server: first, http: http, tokens: Array(sessions.prefix(64)).map(\.refreshToken), seconds: 1).tokens
        let sqliteTokens = try await rotations(server: sqlite, http: http, tokens: sqliteSessions.map(\.refreshToken), seconds: 1).tokens
        let (sqliteTurns, postgres) = try await rotationTurns(sqlite, sqliteTokens, first, postgresTokens, http: http)
        sqlite.stop()
        let one = postgres.rate
        let second = try ChildServer(environment: postgresEnvironment)
        defer { second.stop() }
        // Each instance rotates its own 32 sessions, at the same time: half the clients each, as behind a balancer.
        async let left = rotations(server: first, http: http, tokens: Array(sessions[64..<96]).map(\.refreshToken))
        async let right = rotations(server: second, http: http, tokens: Array(sessions[96..<128]).map(\.refreshToken))
        let two = try await left.rate + right.rate
        return [
            BenchRow(
                name: "refresh_rotation_postgres_durable", opsPerSecond: one, baselineName: "refresh_rotation_sqlite_alongside",
                baselineOpsPerSecond: sqliteTurns.rate, unit: .operationsPerSecond),
            BenchRow(
                name: "refresh_rotation_postgres_two_instances", opsPerSecond: two, baselineName: "refresh_rotation_postgres_one_instance",
                baselineOpsPerSecond: one, unit: .operationsPerSecond),
            BenchRow(
                name: "server_cpu_us_per_postgres_rotation", opsPerSecond: postgres.cpu / Double(postgres.count) * 1e6, baselineName: "required_at_most",
                baselineOpsPerSecond: 300, unit: .microseconds),
        ] + postgresCostRows(postgres: postgres, sqlite: sqliteTurns)
    }

    /// Where the machine's CPU went per rotation, when PostgreSQL runs on this machine: the comparison with SQLite is
    /// one of the whole machine's CPU, since the server, the load generator and PostgreSQL share the cores.
    private func postgresCostRows(postgres: RotationTurns, sqlite: RotationTurns) -> [BenchRow] {
        guard postgres.postgresCPU > 0 else { return [] }
        return [
            BenchRow(
                name: "postgres_processes_cpu_us_per_rotation", opsPerSecond: postgres.postgresCPU / Double(postgres.count) * 1e6,
                baselineName: "server_cpu_us_per_postgres_rotation", baselineOpsPerSecond: postgres.cpu / Double(postgres.count) * 1e6, unit: .microseconds),
            BenchRow(
                name: "machine_cpu_us_per_postgres_rotation", opsPerSecond: postgres.machineMicroseconds,
                baselineName: "machine_cpu_us_per_sqlite_rotation_alongside", baselineOpsPerSecond: sqlite.machineMicroseconds, unit: .microseconds),
        ]
    }

    /// `--only memory`: a server of its own, idle, then after the load of ``heavyLoadRSS(server:emulator:http:)``. With
    /// `LATCHKEY_BENCH_LAUNCHER` (a command and its arguments, split at spaces), the server runs under it: a heap
    /// profiler, say (`heaptrack -o FILE`).
    func memoryRows() async throws -> [BenchRow] {
        try await withEmulator { directory, environment, emulator, http in
            let launcher = (ProcessInfo.processInfo.environment["LATCHKEY_BENCH_LAUNCHER"] ?? "").split(separator: " ").map(String.init)
            let server = try ChildServer(
                environment: environment.merging(["LATCHKEY_DATABASE_URL": directory + "/memory.sqlite"]) { $1 },
                launcher: launcher.isEmpty ? [] : launcher + [try BenchSetUp.serverExecutable().path])
            defer { server.stop() }
            return try await memoryRows(
                server: server, idle: (server.residentMegabytes, MemoryMap(pid: server.processIdentifier)), emulator: emulator, http: http)
        }
    }

    /// Runs `body` with a temporary directory, the settings of ``environment(team:emulator:)`` and a running emulator
    /// (stopped afterwards, whatever `body` does), and a client with `client`'s settings to drive them.
    func withEmulator<T>(
        client: HTTPClient.Configuration = HTTPClient.Configuration(), _ body: (String, [String: String], RunningEmulator, HTTPClient) async throws -> T
    ) async throws -> T {
        let (logger, directory, team, emulatorConfiguration) = try BenchSetUp.quietEmulator(clientID: "com.example.app")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let emulator = try await Emulator.start(configuration: emulatorConfiguration, logger: logger)
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: client)
        defer { _ = http.shutdown() }
        do {
            let result = try await body(directory, Self.environment(team: team, emulator: emulator), emulator, http)
            await emulator.stop()
            return result
        } catch {
            await emulator.stop()
            throw error
        }
    }

    /// The resident set after the heavy load against `idle`, in all and by kind of mapping, and the thread count.
    private func memoryRows(server: ChildServer, idle: (rss: Double, map: MemoryMap), emulator: RunningEmulator, http: HTTPClient) async throws -> [BenchRow] {
        var rows = [
            BenchRow(
                name: "rss_after_26000_sign_ins_and_refreshes", opsPerSecond: try await heavyLoadRSS(server: server, emulator: emulator, http: http),
                baselineName: "idle_rss_megabytes", baselineOpsPerSecond: idle.rss, unit: .megabytes)
        ]
        let loadedMap = MemoryMap(pid: server.processIdentifier)
        for kind in MemoryMap.Kind.allCases where loadedMap.megabytes[kind] != nil || idle.map.megabytes[kind] != nil {
            rows.append(
                BenchRow(
                    name: "rss_\(kind.rawValue)_after_26000", opsPerSecond: loadedMap.megabytes[kind] ?? 0, baselineName: "idle",
                    baselineOpsPerSecond: idle.map.megabytes[kind] ?? 0, unit: .megabytes))
        }
        rows.append(
            BenchRow(
                name: "server_threads_after_26000", opsPerSecond: Double(loadedMap.threads), baselineName: "idle",
                baselineOpsPerSecond: Double(idle.map.threads), unit: .threads))
        return rows
    }

    /// The server's resident memory after 26,000 sign-ins (each one a user) and a refresh of each of their sessions.
    private func heavyLoadRSS(server: ChildServer, emulator: RunningEmulator, http: HTTPClient) async throws -> Double {
        var remaining = 26_000
        while remaining > 0 {
            let minted = try await mintSignIns(emulator: emulator, http: http, count: min(2_000, remaining))
            let (_, sessions) = try await signIn(minted, server: server, http: http)
            try await inParallel(sessions.count) { index in
                let answer = try await json(
                    http, server.url + "/v1/token", ["grant_type": "refresh_token", "refresh_token": sessions[index].refreshToken])
                guard answer["refreshToken"] != nil else { throw BenchError("refresh failed: \(answer)") }
            }
            remaining -= minted.count
        }
        return server.residentMegabytes
    }

    /// 1,000 concurrent `data(for:)` calls through one `LatchkeyClient` whose access token has just expired: how many
    /// refreshes they cause (must be 1), and their rate against the same requests sent with a fixed bearer header.
    /// The client runs in `latchkey-sdk-probe`, built beside this binary; without it these rows are left out.
    private func sdkRows(server: ChildServer, signIn: MintedSignIn) async throws -> [BenchRow] {
        let probe = BenchSetUp.binDirectory.appendingPathComponent("latchkey-sdk-probe")
        guard FileManager.default.isExecutableFile(atPath: probe.path) else {
            FileHandle.standardError.write(
                Data("latchkey-bench: no latchkey-sdk-probe beside this binary, so no SDK rows (swift build -c release builds every product)\n".utf8))
            return []
        }
        let input = try JSONSerialization.data(withJSONObject: signIn.body.filter { ["identityToken", "authorizationCode", "rawNonce"].contains($0.key) })
        let (status, output) = try await runProcess(probe, arguments: ["burst", "--base-url", server.url], input: input)
        guard status == 0, let line = output.split(separator: "\n").last,
            let result = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Double],
            let fixed = result["fixedPerSecond"], let sdk = result["sdkPerSecond"], let refreshes = result["refreshCalls"]
        else { throw BenchError("latchkey-sdk-probe burst failed (exit \(status)): \(output)") }
        return [
            BenchRow(
                name: "sdk_data_for_1000_concurrent_across_expiry", opsPerSecond: sdk, baselineName: "fixed_bearer_1000_concurrent",
                baselineOpsPerSecond: fixed, unit: .operationsPerSecond),
            BenchRow(name: "sdk_refresh_calls_for_1000_concurrent", opsPerSecond: refreshes, baselineName: "required", baselineOpsPerSecond: 1, unit: .calls),
        ]
    }

    /// Runs `executable` to its end on a thread of its own, with `input` on its standard input; returns its exit
    /// status and standard output.
    private func runProcess(_ executable: URL, arguments: [String], input: Data) async throws -> (Int32, String) {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try runToEnd(executable, arguments, input: input) }) }
        }
    }

    /// `count` calls of `body`, ``concurrency`` at a time.
    func inParallel(_ count: Int, _ body: @escaping @Sendable (Int) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                if index >= concurrency { try await group.next() }
                group.addTask { try await body(index) }
            }
            try await group.waitForAll()
        }
    }

    /// The server's CPU per operation, in µs, for `count` operations started at `rate` a second (at most ``concurrency``
    /// at a time). A server near idle spends up to twice the CPU on each request that it spends when busy, and a path
    /// that waits on the emulator cannot keep it busy: so two paths are compared at one rate, on one schedule.
    func pacedCPUMicroseconds(
        server: ChildServer, count: Int, rate: Double, _ operation: @escaping @Sendable (Int) async throws -> Void
    ) async throws -> Double {
        let (_, cpu, _) = try await server.metered {
            let start = ContinuousClock.now
            try await inParallel(count) { index in
                try await Task.sleep(until: start + .seconds(Double(index) / rate), clock: .continuous)
                try await operation(index)
            }
        }
        return cpu / Double(count) * 1e6
    }

    /// A path's CPU per operation against a Google sign-in's, both paced at half the rate the path reached alone.
    func atEqualRate(
        _ name: String, server: ChildServer, emulator: RunningEmulator, http: HTTPClient, count: Int, pathRate: Double,
        _ operation: @escaping @Sendable (Int) async throws -> Void
    ) async throws -> BenchRow {
        let google = try await mintSignIns(emulator: emulator, http: http, count: count, provider: "google")
        let rate = pathRate / 2
        let path = try await pacedCPUMicroseconds(server: server, count: count, rate: rate, operation)
        let baseline = try await pacedCPUMicroseconds(server: server, count: count, rate: rate) {
            _ = try await signIn(google[$0], server: server, http: http)
        }
        return BenchRow(
            name: "server_cpu_us_per_\(name)_at_equal_rate", opsPerSecond: path, baselineName: "server_cpu_us_per_google_sign_in_at_equal_rate",
            baselineOpsPerSecond: baseline, unit: .microseconds)
    }

    struct Session: Sendable {
        let accessToken: String
        let refreshToken: String
    }

    /// Users and native sign-ins (Apple's, or an ID token of `provider`) made at the emulator before the clock starts.
    func mintSignIns(emulator: RunningEmulator, http: HTTPClient, count: Int, provider: String = "apple") async throws -> [MintedSignIn] {
        try await withThrowingTaskGroup(of: MintedSignIn.self) { group in
            var minted: [MintedSignIn] = []
            for index in 0..<count {
                if index >= 16 { minted.append(try await group.next()!) }
                group.addTask {
                    let user = try await json(http, emulator.baseURL + "/emulator/users", ["email": "bench-\(UUID().uuidString)@example.com"])
                    let nonce = UUID().uuidString
                    let signIn = try await json(
                        http, emulator.baseURL + "/emulator/authorizations",
                        ["provider": provider, "sub": user["sub"] as! String, "clientId": "com.example.app", "nonce": hashedNonce(nonce)]
                    )
                    if provider == "apple" {
                        return MintedSignIn(
                            path: "/v1/auth/apple",
                            body: [
                                "identityToken": signIn["identityToken"] as! String, "authorizationCode": signIn["authorizationCode"] as! String,
                                "rawNonce": nonce,
                            ])
                    }
                    return MintedSignIn(path: "/v1/auth/\(provider)", body: ["idToken": signIn["idToken"] as! String, "rawNonce": nonce])
                }
            }
            for try await item in group { minted.append(item) }
            return minted
        }
    }

    /// What an app sends to `POST /v1/auth/{provider}` after a native sign-in.
    struct MintedSignIn: Sendable {
        let path: String
        let body: [String: String]
    }

    /// One sign-in with `minted`: its session.
    func signIn(_ minted: MintedSignIn, server: ChildServer, http: HTTPClient) async throws -> Session {
        let answer = try await json(http, server.url + minted.path, minted.body)
        guard let access = answer["accessToken"] as? String, let refresh = answer["refreshToken"] as? String else {
            throw BenchError("sign-in failed: \(answer)")
        }
        return Session(accessToken: access, refreshToken: refresh)
    }

    /// Each minted sign-in sent to the server, `concurrency` at a time; returns the rate and the sessions.
    func signIn(_ minted: some Collection<MintedSignIn>, server: ChildServer, http: HTTPClient) async throws -> (Double, [Session]) {
        let start = ContinuousClock.now
        let sessions = try await withThrowingTaskGroup(of: Session.self) { group in
            var sessions: [Session] = []
            for (index, item) in minted.enumerated() {
                if index >= concurrency { sessions.append(try await group.next()!) }
                group.addTask { try await signIn(item, server: server, http: http) }
            }
            for try await session in group { sessions.append(session) }
            return sessions
        }
        return (Double(minted.count) / (ContinuousClock.now - start).seconds, sessions)
    }

    /// What ``rotations(server:http:tokens:seconds:)`` measured, and each worker's last token (to go on from).
    struct RotationRun {
        let rate: Double
        let count: Int
        let tokens: [String]
    }

    /// Each worker rotates its own session's refresh token as fast as the server answers; with `dpop`, each sends a new
    /// proof by its session's key (`dpop.keys`, one per token) with every rotation.
    func rotations(
        server: ChildServer, http: HTTPClient, tokens: [String], seconds: Double? = nil, dpop: (issuer: String, keys: [DPoPProofMaker])? = nil
    ) async throws -> RotationRun {
        let workers = Array(tokens.prefix(64).enumerated())
        let deadline = ContinuousClock.now.advanced(by: .nanoseconds(Int64((seconds ?? self.seconds) * 1e9)))
        let start = ContinuousClock.now
        // Each worker's last token in the workers' order: with `dpop`, the token at an index is the key's at that index.
        let (total, last) = try await withThrowingTaskGroup(of: (Int, Int, String).self) { group in
            for (index, token) in workers {
                group.addTask {
                    var current = token
                    var count = 0
                    let tokenURL = URL(string: (dpop?.issuer ?? server.url) + "/v1/token")!
                    while ContinuousClock.now < deadline {
                        let proof = try dpop.map { [("DPoP", try $0.keys[index].proof(method: "POST", url: tokenURL))] } ?? []
                        let answer = try await json(
                            http, server.url + "/v1/token", ["grant_type": "refresh_token", "refresh_token": current], headers: proof)
                        guard let next = answer["refreshToken"] as? String else { throw BenchError("rotation failed: \(answer)") }
                        current = next
                        count += 1
                    }
                    return (index, count, current)
                }
            }
            let finished = try await group.reduce(into: [(Int, Int, String)]()) { $0.append($1) }.sorted { $0.0 < $1.0 }
            return (finished.reduce(0) { $0 + $1.1 }, finished.map(\.2))
        }
        return RotationRun(rate: Double(total) / (ContinuousClock.now - start).seconds, count: total, tokens: last)
    }

    /// One server's share of ``rotationTurns(_:_:_:_:http:)``: totals over its turns, and its workers' last tokens.
    struct RotationTurns {
        var tokens: [String]
        var count = 0
        var seconds = 0.0
        /// CPU seconds of the server, of each of its threads (by id), and of this process (the load generator).
        var cpu = 0.0
        var threadCPU: [String: Double] = [:]
        var benchCPU = 0.0
        /// CPU seconds of the PostgreSQL processes on this machine (none when the database runs elsewhere).
        var postgresCPU = 0.0
        var storage = StorageWrites()
        var rate: Double { Double(count) / seconds }
        /// The machine's CPU per rotation: the server's, the load generator's and PostgreSQL's, in µs.
        var machineMicroseconds: Double { (cpu + benchCPU + postgresCPU) / Double(count) * 1e6 }
    }

    /// Rotations on `first` and `second` taking turns, ``rounds`` turns of `seconds / rounds` each, so that both see the
    /// machine in the same minutes.
    func rotationTurns(_ first: ChildServer, _ firstTokens: [String], _ second: ChildServer, _ secondTokens: [String], http: HTTPClient)
        async throws -> (RotationTurns, RotationTurns)
    {
        var turns = [RotationTurns(tokens: firstTokens), RotationTurns(tokens: secondTokens)]
        for _ in 0..<Self.rounds {
            for (index, server) in [first, second].enumerated() {
                // PostgreSQL's processes are read first: reading them (a pass over /proc) is not the load generator's work.
                let (postgresBefore, threadsBefore, benchBefore) = (
                    ChildServer.localPostgresCPUSeconds, server.threadCPUSeconds, ChildServer.cpuSeconds(statFile: "/proc/self/stat")
                )
                let tokens = turns[index].tokens
                let (run, cpu, wall) = try await turns[index].storage.counting(server) {
                    try await server.metered { try await rotations(server: server, http: http, tokens: tokens, seconds: seconds / Double(Self.rounds)) }
                }
                turns[index].benchCPU += ChildServer.cpuSeconds(statFile: "/proc/self/stat") - benchBefore
                turns[index].postgresCPU += ChildServer.localPostgresCPUSeconds - postgresBefore
                for (thread, used) in server.threadCPUSeconds { turns[index].threadCPU[thread, default: 0] += used - (threadsBefore[thread] ?? 0) }
                turns[index].tokens = run.tokens
                turns[index].count += run.count
                turns[index].seconds += wall
                turns[index].cpu += cpu
            }
        }
        return (turns[0], turns[1])
    }

    /// `concurrency` workers sending the same kind of request until the time is up; returns requests per second.
    private func load(_ http: HTTPClient, seconds: Double, _ make: @escaping @Sendable (Int) -> (url: String, method: String, body: [UInt8]?, bearer: String?))
        async throws -> Double
    {
        try await loadCounting(http, seconds: seconds, make).rate
    }

    private func loadCounting(
        _ http: HTTPClient, seconds: Double, _ make: @escaping @Sendable (Int) -> (url: String, method: String, body: [UInt8]?, bearer: String?)
    ) async throws -> (rate: Double, count: Int) {
        let deadline = ContinuousClock.now.advanced(by: .nanoseconds(Int64(seconds * 1e9)))
        let start = ContinuousClock.now
        let total = try await withThrowingTaskGroup(of: Int.self) { group in
            for worker in 0..<concurrency {
                group.addTask {
                    var count = 0
                    while ContinuousClock.now < deadline {
                        let spec = make(worker)
                        var request = HTTPClientRequest(url: spec.url)
                        request.method = HTTPMethod(rawValue: spec.method)
                        if let bearer = spec.bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
                        let response = try await http.execute(request, timeout: .seconds(10))
                        _ = try await response.body.collect(upTo: 1 << 16)
                        guard response.status == .ok else { throw BenchError("\(spec.url) answered \(response.status.code)") }
                        count += 1
                    }
                    return count
                }
            }
            return try await group.reduce(0, +)
        }
        return (Double(total) / (ContinuousClock.now - start).seconds, total)
    }
}

func json(_ http: HTTPClient, _ url: String, _ body: [String: String], headers: [(String, String)] = []) async throws -> [String: Any] {
    try await post(http, url, body, headers: headers)
}

/// `latchkey serve` as a child process, so its memory is measured alone.
final class ChildServer: @unchecked Sendable {  // `process` is only stopped once the bench is done with it
    let process = Process()
    let url: String
    /// The server's process id: the launcher's child where the launcher runs it as one (a script such as `heaptrack`),
    /// else the process started (valgrind runs the server in its own process). Read once it listens.
    let processIdentifier: Int32

    /// - Parameter launcher: a command that runs a server executable given last (`valgrind --tool=callgrind … latchkey`), in
    ///   place of the `latchkey` of ``BenchSetUp/serverExecutable()``.
    init(environment: [String: String], launcher: [String] = []) throws {
        let output = Pipe()
        if let first = launcher.first {
            process.executableURL = URL(fileURLWithPath: first)
            process.arguments = launcher.dropFirst() + ["serve", "--port", "0"]
        } else {
            process.executableURL = try BenchSetUp.serverExecutable()
            process.arguments = ["serve", "--port", "0"]
        }
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LATCHKEY_") }.merging(environment) { $1 }
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var collected = ""
        let handle = output.fileHandleForReading
        while !collected.contains("Latchkey listening on ") || !collected.contains("(") {
            let chunk = handle.availableData
            guard !chunk.isEmpty else { throw BenchError("the benchmark server exited early: \(collected)") }
            collected += String(decoding: chunk, as: UTF8.self)
        }
        guard let range = collected.range(of: #"http://127\.0\.0\.1:\d+"#, options: .regularExpression) else {
            throw BenchError("no server URL in: \(collected)")
        }
        url = String(collected[range])
        let pid = process.processIdentifier
        let children = launcher.isEmpty ? nil : try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)
        processIdentifier = children?.split(separator: " ").first.flatMap { Int32($0) } ?? pid
    }

    /// The number after `field:` on its line of the server's `/proc/<pid>/<file>`; nil when there is none.
    private func procValue(_ file: String, _ field: String) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(processIdentifier)/\(file)", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") })
        else { return nil }
        return Double(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    }

    /// A memory field of `/proc/<pid>/status`, in megabytes (0 when unknown).
    private func status(_ field: String) -> Double { (procValue("status", field) ?? 0) / 1024 }

    var residentMegabytes: Double { status("VmRSS") }

    /// Descriptors the server process has open.
    var openDescriptors: Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(processIdentifier)/fd").count) ?? 0 }

    /// CPU seconds (user and system) the server process has used so far, to the nanosecond: the kernel's CPU-time
    /// clock of the process (`/proc/<pid>/stat` counts 10 ms ticks, which moved a row of 1,000 sign-ins by up to
    /// 40 µs).
    var cpuSeconds: Double {
        Self.cpuClockSeconds(processIdentifier) ?? Self.cpuSeconds(statFile: "/proc/\(processIdentifier)/stat")
    }

    /// The kernel's CPU-time clock of process `pid`, in seconds; nil once it has ended.
    static func cpuClockSeconds(_ pid: Int32) -> Double? {
        var clock = clockid_t()
        var time = timespec()
        guard clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &time) == 0 else { return nil }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// CPU seconds of each of the server's threads so far, by thread id.
    var threadCPUSeconds: [String: Double] {
        let tasks = "/proc/\(processIdentifier)/task"
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []
        return Dictionary(uniqueKeysWithValues: ids.map { ($0, Self.cpuSeconds(statFile: "\(tasks)/\($0)/stat")) })
    }

    /// CPU seconds of every process named `postgres` that this user may read: a PostgreSQL server on this machine
    /// (every cluster on it counts; a backend that exits during a turn takes its seconds with it).
    static var localPostgresCPUSeconds: Double {
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return processes.filter { $0.allSatisfy(\.isNumber) }.reduce(0) { total, process in
            guard let name = try? String(contentsOfFile: "/proc/\(process)/comm", encoding: .utf8), name == "postgres\n" else { return total }
            return total + cpuSeconds(statFile: "/proc/\(process)/stat")
        }
    }

    /// CPU seconds (user and system) from a `stat` file of `/proc` (a process's or a thread's).
    static func cpuSeconds(statFile: String) -> Double {
        guard let text = try? String(contentsOfFile: statFile, encoding: .utf8), let end = text.lastIndex(of: ")") else { return 0 }
        // After the command name: state is field 3, utime and stime are fields 14 and 15.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Runs `body` and returns its result with the server's CPU seconds and the wall-clock seconds it took.
    func metered<T>(_ body: () async throws -> T) async rethrows -> (T, cpu: Double, wall: Double) {
        let (cpu, start) = (cpuSeconds, ContinuousClock.now)
        let value = try await body()
        return (value, cpuSeconds - cpu, (ContinuousClock.now - start).seconds)
    }
    var peakMegabytes: Double { status("VmHWM") }

    /// Bytes the server has sent to storage so far (`write_bytes` of `/proc/<pid>/io`: pages it dirtied, counted
    /// once each until written back); nil where the kernel does not account it.
    var storageBytesWritten: Double? { procValue("io", "write_bytes") }

    func stop() {
        guard process.isRunning else { return }
        // A launcher that runs the server as its child may not pass the signal on.
        if processIdentifier != process.processIdentifier { kill(processIdentifier, SIGTERM) }
        process.terminate()
        process.waitUntilExit()
    }
}

/// Storage writes of a server over the stretches of a bench that ran on it. A cost that does not depend on the
/// machine's speed: what group commit saves is pages written once for many requests, and with each frame SQLite
/// writes to its log, its checkpoint and the kernel's write-back all do work again.
struct StorageWrites {
    private var bytes = 0.0
    private var known = true

    /// Runs `body`, adding what `server` wrote to storage meanwhile.
    mutating func counting<T>(_ server: ChildServer, _ body: () async throws -> T) async rethrows -> T {
        let before = server.storageBytesWritten
        let value = try await body()
        if let before, let after = server.storageBytesWritten { bytes += after - before } else { known = false }
        return value
    }

    /// Bytes per operation over `count` operations; nil when the kernel did not tell.
    func perOperation(_ count: Int) -> Double? { known && count > 0 ? bytes / Double(count) : nil }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
