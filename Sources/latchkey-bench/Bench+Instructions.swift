import AsyncHTTPClient
import Foundation
import LatchkeyBenchReport
import LatchkeyEmulator
import NIOCore
import NIOHTTP1

/// `latchkey-bench --only instructions`: machine instructions per operation of a `latchkey serve` run under
/// `valgrind --tool=callgrind`. Unlike seconds, the count of one binary on one input does not move with what else the
/// machine is doing. Each path runs a warm-up, then N and then 2N operations, the counters dumped after each: the
/// difference of the two last dumps, divided by N, is the path's cost with what a batch costs once (its first
/// connections, say) taken out.
extension ServerBench {
    func instructionRows(operations: Int, profiles: String?) async throws -> [BenchRow] {
        try await withEmulator { directory, environment, emulator, http in
            try await instructionRows(
                operations: operations, profiles: profiles, directory: directory, environment: environment, emulator: emulator, http: http)
        }
    }

    private func instructionRows(
        operations n: Int, profiles: String?, directory: String, environment: [String: String], emulator: RunningEmulator, http: HTTPClient
    ) async throws -> [BenchRow] {
        let warmUp = max(8, n / 4)
        let counted = try Callgrind(directory: directory + "/plain")
        let server = try ChildServer(
            environment: environment.merging(counted.environment) { $1 }.merging(["LATCHKEY_DATABASE_URL": directory + "/plain.sqlite"]) { $1 },
            launcher: counted.launcher)
        defer { server.stop() }
        var costs: [String: Callgrind.Cost] = [:]

        costs["healthz"] = try await counted.cost(of: server, warmUp: { try await self.healthChecks(server, http, warmUp) }, operations: 4 * n) {
            try await self.healthChecks(server, http, $0)
        }
        // What the server does with no request at all (its timers), per second, once start-up is over: the rows below
        // include it for as long as their batches take.
        let idle = try await counted.idleCost(of: server, seconds: 10)

        let google = try await mintSignIns(emulator: emulator, http: http, count: warmUp + 3 * n, provider: "google")
        var googleSlices = Self.slices(google, warmUp, n)
        var sessions: [Session] = []
        costs["google_sign_in"] = try await counted.cost(
            of: server, warmUp: { sessions = try await self.signIn(googleSlices.removeFirst(), server: server, http: http).1 }, operations: n
        ) { _ in _ = try await self.signIn(googleSlices.removeFirst(), server: server, http: http) }

        let apple = try await mintSignIns(emulator: emulator, http: http, count: warmUp + 3 * n)
        var appleSlices = Self.slices(apple, warmUp, n)
        costs["apple_sign_in_with_code_exchange"] = try await counted.cost(
            of: server, warmUp: { _ = try await self.signIn(appleSlices.removeFirst(), server: server, http: http) }, operations: n
        ) { _ in _ = try await self.signIn(appleSlices.removeFirst(), server: server, http: http) }

        var tokens = sessions.prefix(concurrency).map(\.refreshToken)
        costs["rotation"] = try await counted.cost(
            of: server, warmUp: { tokens = try await self.rotations(server, http, tokens, count: warmUp) }, operations: 4 * n
        ) { tokens = try await self.rotations(server, http, tokens, count: $0) }

        let passkeys = try await registerPasskeys(server: server, http: http, sessions: Array(sessions.prefix(8)))
        costs["passkey_sign_in"] = try await counted.cost(
            of: server, warmUp: { try await self.passkeySignIns(server, http, passkeys, count: warmUp) }, operations: n
        ) { try await self.passkeySignIns(server, http, passkeys, count: $0) }
        server.stop()

        // A server with one webhook endpoint: Google sign-ins again, each batch counted once its deliveries arrived.
        let (receiver, settings, receiving) = try await Self.countingEndpoint()
        defer { receiving.cancel() }
        let hookedCount = try Callgrind(directory: directory + "/hooked")
        let hooked = try ChildServer(
            environment: environment.merging(hookedCount.environment) { $1 }.merging(settings) { $1 }
                .merging(["LATCHKEY_DATABASE_URL": directory + "/hooked.sqlite"]) { $1 }, launcher: hookedCount.launcher)
        defer { hooked.stop() }
        let hookedSignIns = try await mintSignIns(emulator: emulator, http: http, count: warmUp + 3 * n, provider: "google")
        var hookedSlices = Self.slices(hookedSignIns, warmUp, n)
        func delivered(_ batch: ArraySlice<MintedSignIn>) async throws {
            let expected = receiver.total + batch.count
            _ = try await signIn(batch, server: hooked, http: http)
            let deadline = ContinuousClock.now + .seconds(600)
            while receiver.total < expected {
                guard ContinuousClock.now < deadline else { throw BenchError("only \(receiver.total) of \(expected) webhook deliveries arrived") }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        costs["google_sign_in_with_one_webhook_endpoint"] = try await hookedCount.cost(
            of: hooked, warmUp: { try await delivered(hookedSlices.removeFirst()) }, operations: n
        ) { _ in try await delivered(hookedSlices.removeFirst()) }
        hooked.stop()

        if let profiles {
            try FileManager.default.createDirectory(atPath: profiles, withIntermediateDirectories: true)
            for (name, cost) in costs.sorted(by: { $0.key < $1.key }) {
                try FileManager.default.copyItem(atPath: cost.profile, toPath: profiles + "/\(name).callgrind.out")
                try Callgrind.profile(cost, name: name).write(toFile: profiles + "/\(name).md", atomically: true, encoding: .utf8)
            }
        }
        func per(_ name: String) -> Double { costs[name]!.perOperation }
        let healthz = per("healthz")
        var rows = [
            BenchRow(
                name: "instructions_per_idle_second", opsPerSecond: idle, baselineName: "instructions_per_healthz",
                baselineOpsPerSecond: healthz, unit: .instructions)
        ]
        for name in ["rotation", "google_sign_in", "apple_sign_in_with_code_exchange", "passkey_sign_in"] {
            rows.append(
                BenchRow(
                    name: "instructions_per_\(name)", opsPerSecond: per(name), baselineName: "instructions_per_healthz", baselineOpsPerSecond: healthz,
                    unit: .instructions))
        }
        let hookedSignIn = per("google_sign_in_with_one_webhook_endpoint")
        rows += [
            BenchRow(
                name: "instructions_per_webhook_delivery", opsPerSecond: hookedSignIn - per("google_sign_in"), baselineName: "instructions_per_google_sign_in",
                baselineOpsPerSecond: per("google_sign_in"), unit: .instructions),
            BenchRow(
                name: "instructions_per_passkey_sign_in", opsPerSecond: per("passkey_sign_in"), baselineName: "instructions_per_google_sign_in",
                baselineOpsPerSecond: per("google_sign_in"), unit: .instructions),
            BenchRow(
                name: "instructions_per_google_sign_in_with_one_webhook_endpoint", opsPerSecond: hookedSignIn,
                baselineName: "instructions_per_google_sign_in", baselineOpsPerSecond: per("google_sign_in"), unit: .instructions),
        ]
        return rows
    }

    /// `items` cut into a warm-up of `warmUp`, then `n`, then `2n`.
    private static func slices<T>(_ items: [T], _ warmUp: Int, _ n: Int) -> [ArraySlice<T>] {
        [items[0..<warmUp], items[warmUp..<warmUp + n], items[(warmUp + n)...]]
    }

    private func healthChecks(_ server: ChildServer, _ http: HTTPClient, _ count: Int) async throws {
        try await inParallel(count) { _ in
            let response = try await http.execute(HTTPClientRequest(url: server.url + "/healthz"), timeout: .seconds(60))
            _ = try await response.body.collect(upTo: 1 << 16)
            guard response.status == .ok else { throw BenchError("/healthz answered \(response.status.code)") }
        }
    }

    /// `count` rotations spread over the sessions of `tokens`, one after another per session; their last tokens.
    private func rotations(_ server: ChildServer, _ http: HTTPClient, _ tokens: [String], count: Int) async throws -> [String] {
        try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for (index, token) in tokens.enumerated() {
                let turns = count / tokens.count + (index < count % tokens.count ? 1 : 0)
                group.addTask {
                    var current = token
                    for _ in 0..<turns {
                        let answer = try await json(http, server.url + "/v1/token", ["grant_type": "refresh_token", "refresh_token": current])
                        guard let next = answer["refreshToken"] as? String else { throw BenchError("rotation failed: \(answer)") }
                        current = next
                    }
                    return (index, current)
                }
            }
            return try await group.reduce(into: [(Int, String)]()) { $0.append($1) }.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

}

/// Counts a child server's instructions with callgrind: its launcher, and its counters dumped on demand.
final class Callgrind {
    /// Where the dumps go: `callgrind.out.1`, `.2`, … in the order asked.
    let directory: String
    private var dumps = 0

    /// The server as callgrind runs it: a copy of ``BenchSetUp/serverExecutable()`` without its debug information.
    private let server: String
    /// A library preloaded into the server; see ``sigsuspendShim``.
    private let shim: String

    init(directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // valgrind 3.19 cannot read the DWARF 5 that Swift's toolchain writes ("ensure_valid failed"); the symbol table,
        // which names every function, is enough.
        server = directory + "/latchkey"
        try Self.run("/usr/bin/objcopy", ["--strip-debug", try BenchSetUp.serverExecutable().path, server])
        shim = directory + "/sigsuspend-shim.so"
        try Self.sigsuspendShim.write(toFile: directory + "/sigsuspend-shim.c", atomically: true, encoding: .utf8)
        try Self.run("/usr/bin/env", ["cc", "-O2", "-shared", "-fPIC", "-o", shim, directory + "/sigsuspend-shim.c"])
    }

    /// valgrind 3.19 writes into the signal mask a program passes to `rt_sigsuspend`, and libdispatch's `dispatch_main`
    /// (where a Swift async `main` parks its thread) passes one in read-only memory: valgrind then crashes at start-up.
    /// This `sigsuspend` hands the system call a copy on the stack instead.
    static let sigsuspendShim = """
        #define _GNU_SOURCE
        #include <signal.h>
        #include <sys/syscall.h>
        #include <unistd.h>
        int sigsuspend(const sigset_t *mask) {
            sigset_t copy = *mask;
            return (int)syscall(SYS_rt_sigsuspend, &copy, 8);
        }
        """

    /// The environment the server needs under callgrind, beside its own settings.
    var environment: [String: String] { ["LD_PRELOAD": shim] }

    var launcher: [String] {
        ["/usr/bin/valgrind", "--tool=callgrind", "--callgrind-out-file=\(directory)/callgrind.out", "--dump-line=no", "--compress-strings=no", server]
    }

    private static func run(_ executable: String, _ arguments: [String]) throws {
        let status = try runToEnd(URL(fileURLWithPath: executable), arguments).status
        guard status == 0 else {
            throw BenchError("\(([executable] + arguments).joined(separator: " ")) exited with \(status) (the instruction rows need valgrind, binutils and cc)")
        }
    }

    /// What one operation of a path costs, and the dump of its 2N batch.
    struct Cost {
        let perOperation: Double
        let profile: String
        let operations: Int
    }

    /// Instructions per second while the server waits for requests: its timers.
    func idleCost(of server: ChildServer, seconds: Int) async throws -> Double {
        _ = try await dump(server)
        try await Task.sleep(for: .seconds(seconds))
        return Double(try await dump(server).instructions) / Double(seconds)
    }

    /// Runs `warmUp`, then `body(operations)`, then `body(2 × operations)`, dumping the counters after each.
    func cost(
        of server: ChildServer, warmUp: () async throws -> Void, operations: Int, _ body: (Int) async throws -> Void
    ) async throws -> Cost {
        try await warmUp()
        _ = try await dump(server)
        try await body(operations)
        let once = try await dump(server)
        try await body(2 * operations)
        let twice = try await dump(server)
        return Cost(perOperation: Double(twice.instructions - once.instructions) / Double(operations), profile: twice.file, operations: 2 * operations)
    }

    /// Asks callgrind to write the counts since the last dump, and reads their total.
    private func dump(_ server: ChildServer) async throws -> (file: String, instructions: Int) {
        dumps += 1
        let file = "\(directory)/callgrind.out.\(dumps)"
        let control = Process()
        control.executableURL = URL(fileURLWithPath: "/usr/bin/callgrind_control")
        control.arguments = ["--dump", String(server.process.processIdentifier)]
        control.standardOutput = FileHandle.nullDevice
        control.standardError = FileHandle.nullDevice
        try control.run()
        control.waitUntilExit()
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            // The totals line is the dump's last: once it is there, the file is whole.
            if let text = try? String(contentsOfFile: file, encoding: .utf8),
                let line = text.split(separator: "\n").last(where: { $0.hasPrefix("totals:") }),
                let total = Int(line.dropFirst("totals:".count).trimmingCharacters(in: .whitespaces))
            {
                return (file, total)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BenchError("callgrind wrote no \(file): is valgrind installed, and the server running under it?")
    }

    /// A path's profile in Markdown: the 15 functions of Latchkey's own modules that cost most per operation, inclusive
    /// (what they and their callees ran), then the 15 that ran most instructions themselves, from any module.
    ///
    /// Inclusive costs of async code mislead callgrind: a task's resumption is counted as called from
    /// `swift_task_switch`, so the runtime's and Hummingbird's frames, and closures, thunks and recursion levels, carry
    /// the whole program's cost. The first table keeps to named functions of `Latchkey*` modules for that reason.
    static func profile(_ cost: Cost, name: String) throws -> String {
        let counts = try FunctionCosts(dump: cost.profile)
        func table(_ costs: [String: Int], keep: (String) -> Bool) throws -> [String] {
            let ranked = costs.filter { $0.value <= counts.total }.sorted { $0.value > $1.value }.prefix(4000)
            let full = try demangled(ranked.map(\.key), simplified: false)
            let short = try demangled(ranked.map(\.key), simplified: true)
            var rows: [String] = []
            for (index, entry) in ranked.enumerated() where rows.count < 15 && keep(full[index]) {
                let perOperation = Double(entry.value) / Double(cost.operations)
                let share = Double(entry.value) / Double(max(1, counts.total)) * 100
                let function = short[index].replacingOccurrences(of: "|", with: "\\|")
                rows.append("| \(Int(perOperation.rounded())) | \(String(format: "%.1f", share)) % | `\(function)` |")
            }
            return rows
        }
        let noise = ["closure #", "thunk", "partial apply", "protocol witness", "outlined", "merged ", "reabstraction"]
        let ours = try table(counts.inclusive) { symbol in
            (symbol.hasPrefix("Latchkey") || symbol.hasPrefix("(extension in Latchkey")) && !noise.contains { symbol.contains($0) }
        }
        let anyModule = try table(counts.exclusive) { _ in true }
        let header = ["| instructions per operation | share | function |", "| ---: | ---: | --- |"]
        let modules = counts.byModule.sorted { $0.value > $1.value }.prefix(12).map { module, instructions in
            "| \(Int((Double(instructions) / Double(cost.operations)).rounded())) | "
                + "\(String(format: "%.1f", Double(instructions) / Double(max(1, counts.total)) * 100)) % | \(module) |"
        }
        return
            ([
                "### `\(name)`", "", "By module, self:", "", "| instructions per operation | share | module |", "| ---: | ---: | --- |",
            ] + modules + ["", "Latchkey's functions, inclusive:", ""] + header + ours + ["", "Any function, self:", ""] + header + anyModule)
            .joined(separator: "\n") + "\n"
    }

    /// Each function's instructions in a callgrind dump (`--dump-line=no`, names uncompressed): its own, and with
    /// its callees'. A recursive function counts its inner calls again, as callgrind_annotate does; such totals above
    /// the dump's are left out.
    private struct FunctionCosts {
        var exclusive: [String: Int] = [:]
        var inclusive: [String: Int] = [:]
        /// Own instructions by the module a function is in (Swift's from its mangled name, C's by prefix or library).
        var byModule: [String: Int] = [:]
        var total = 0

        static func module(of symbol: String, object: String) -> String {
            if symbol.hasPrefix("$s") {
                let rest = symbol.dropFirst(2)
                let digits = rest.prefix { $0.isNumber }
                if let length = Int(digits), let name = Optional(rest.dropFirst(digits.count).prefix(length)), name.count == length {
                    return String(name)
                }
                return "Swift"
            }
            if symbol.hasPrefix("CCryptoBoringSSL") || symbol.hasPrefix("__ecp_nistz256") || symbol.hasPrefix("ecp_nistz256") { return "BoringSSL" }
            if symbol.hasPrefix("sqlite3") { return "SQLite" }
            if symbol.hasPrefix("swift") || symbol.hasPrefix("_swift") || symbol.contains("swift::") { return "Swift runtime" }
            let library = (object as NSString).lastPathComponent
            return library.hasPrefix("libc.so") ? "libc (malloc, memcpy, system calls)" : library
        }

        init(dump path: String) throws {
            let text = try String(contentsOfFile: path, encoding: .utf8)
            var function = ""
            var object = ""
            var module = ""
            var callCostNext = false
            for line in text.split(separator: "\n") {
                if line.hasPrefix("ob=") {
                    object = String(line.dropFirst(3))
                } else if line.hasPrefix("fn=") {
                    function = String(line.dropFirst(3))
                    module = Self.module(of: function, object: object)
                } else if line.hasPrefix("calls=") {
                    callCostNext = true
                } else if line.hasPrefix("summary:") || line.hasPrefix("totals:") {
                    total = Int(line.split(separator: " ").last ?? "") ?? total
                } else if let first = line.first, first.isNumber || first == "+" || first == "-" || first == "*" {
                    let cost = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
                    inclusive[function, default: 0] += cost
                    if callCostNext {
                        callCostNext = false
                    } else {
                        exclusive[function, default: 0] += cost
                        byModule[module, default: 0] += cost
                    }
                }
            }
        }
    }

    private static func demangled(_ symbols: [String], simplified: Bool) throws -> [String] {
        let text = try runToEnd(
            URL(fileURLWithPath: "/usr/bin/env"), ["swift-demangle"] + (simplified ? ["--simplified"] : []),
            input: Data((symbols.joined(separator: "\n") + "\n").utf8)
        ).output
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        return symbols.indices.map { $0 < lines.count ? lines[$0] : symbols[$0] }
    }
}
