import Foundation

/// A failed benchmark step, with a message for people.
struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Soak samples go out as they are taken, also through a pipe, where standard output is block-buffered.
func flushStandardOutput() {
    fflush(nil)
}

/// Runs `executable` to its end with `input` on its standard input; returns its exit status and standard output. The
/// input is written from a thread of its own: a large one would fill the pipe while the output waits to be read.
func runToEnd(_ executable: URL, _ arguments: [String], input: Data = Data()) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    let (stdin, stdout) = (Pipe(), Pipe())
    process.standardInput = stdin
    process.standardOutput = stdout
    try process.run()
    let writer = Thread {
        stdin.fileHandleForWriting.write(input)
        try? stdin.fileHandleForWriting.close()
    }
    writer.start()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
}
