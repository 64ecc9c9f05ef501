import Foundation
import LatchkeyTestSupport

/// Runs the built `latchkey` binary as a user would.
enum CLI {
    struct Result {
        let status: Int32
        let stdout: String
        let stderr: String
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(stdout.utf8))) as? [String: Any] ?? [:] }
    }

    /// The executable sits next to the test bundle in the build directory.
    static var executable: URL {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("latchkey").path), directory.path != "/" {
            directory.deleteLastPathComponent()
        }
        return directory.appendingPathComponent("latchkey")
    }

    /// Runs the binary on a thread of its own: waiting for a process must not hold one of the few threads that
    /// every other (async) test shares. `openFileLimit`: the process may open only that many files (soft and hard).
    static func run(
        _ arguments: [String], stdin: String? = nil, environment: [String: String] = [:], directory: String? = nil, openFileLimit: Int? = nil
    ) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(
                    with: Swift.Result {
                        try runBlocking(arguments, stdin: stdin, environment: environment, directory: directory, openFileLimit: openFileLimit)
                    })
            }
        }
    }

    private static func runBlocking(
        _ arguments: [String], stdin: String?, environment: [String: String], directory: String?, openFileLimit: Int?
    ) throws -> Result {
        let process = Process()
        (process.executableURL, process.arguments) = command(arguments, after: openFileLimit.map { ["ulimit -n \($0)"] } ?? [])
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LATCHKEY_") }.merging(environment) { $1 }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let output = Pipe()
        let errors = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }

    /// The binary with `arguments`, run after `prelude`: shell commands (`ulimit`, `trap`) whose effects stay across
    /// exec, which keeps the process id. Without a prelude, the binary itself.
    static func command(_ arguments: [String], after prelude: [String]) -> (URL, [String]) {
        guard !prelude.isEmpty else { return (executable, arguments) }
        return (URL(fileURLWithPath: "/bin/sh"), ["-c", prelude.joined(separator: "; ") + #"; exec "$0" "$@""#, executable.path] + arguments)
    }

    /// A fresh temporary directory.
    static func directory() -> String { ScratchDirectory.make("latchkey-cli") }

    static func write(_ object: [String: Any], to path: String) throws {
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
    }
}
