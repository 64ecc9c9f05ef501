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
