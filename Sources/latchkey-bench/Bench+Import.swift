import Foundation
import LatchkeyBenchReport

extension ServerBench {
    /// `latchkey users import` of a 100,000-user Firebase export (JSON, each user with a Google identity) into a new
    /// SQLite database, beside the same run's Google sign-ins per second: users per second, and the importing
    /// process's CPU per user.
    func importRows(directory: String, signInsPerSecond: Double) async throws -> [BenchRow] {
        let count = 100_000
        let export = directory + "/firebase-export.json"
        var users: [String] = []
        users.reserveCapacity(count)
        for index in 0..<count {
            // A 21-digit Google subject, as Google issues them.
            let subject = String(format: "1%020d", index)
            users.append(
                #"{"localId":"uid\#(index)","email":"user\#(index)@example.com","emailVerified":true,"displayName":"User \#(index)","#
                    + #""createdAt":"1700000000000","lastSignedInAt":"1700000000000","providerUserInfo":[{"providerId":"google.com","rawId":"\#(subject)","#
                    + #""email":"user\#(index)@example.com","displayName":"User \#(index)"}]}"#)
        }
        try Data((#"{"users":["# + users.joined(separator: ",") + "]}").utf8).write(to: URL(fileURLWithPath: export))
        let executable = try BenchSetUp.serverExecutable()
        let started = ContinuousClock.now
        let (status, cpu) = try await Self.run(
            executable, ["users", "import", "--from", "firebase", export, "--json"], environment: ["LATCHKEY_DATABASE_URL": directory + "/imported.sqlite"])
        let elapsed = ContinuousClock.now - started
        guard status == 0 else { throw BenchError("latchkey users import exited \(status)") }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return [
            BenchRow(
                name: "users_imported_per_second_firebase_100000", opsPerSecond: Double(count) / seconds, baselineName: "google_sign_in_sqlite_durable",
                baselineOpsPerSecond: signInsPerSecond, unit: .operationsPerSecond),
            BenchRow(
                name: "import_cpu_us_per_user", opsPerSecond: cpu / Double(count) * 1e6, baselineName: "wall_us_per_user",
                baselineOpsPerSecond: seconds / Double(count) * 1e6, unit: .microseconds),
        ]
    }

    /// Runs `executable` to its end, its output discarded, with `environment` added to this process's; its exit status
    /// and the CPU seconds it used (its CPU clock read every 20 ms until it ends: off by at most one interval).
    static func run(_ executable: URL, _ arguments: [String], environment: [String: String]) async throws -> (Int32, Double) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        var cpu = 0.0
        while process.isRunning {
            if let reading = ChildServer.cpuClockSeconds(process.processIdentifier) { cpu = reading }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.waitUntilExit()
        return (process.terminationStatus, cpu)
    }
}
