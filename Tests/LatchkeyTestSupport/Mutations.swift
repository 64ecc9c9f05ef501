import Foundation

/// A seeded mutation runner for the parsers that read what strangers send. Each input must be accepted or refused;
/// a trap ends the test process, and the printed seed replays it. `LATCHKEY_FUZZ_ITERATIONS` runs longer (the
/// default keeps `swift test` quick), `LATCHKEY_FUZZ_SECONDS` bounds a run in time (what `.ci/run` does), and
/// `LATCHKEY_FUZZ_SEED` replays one run.
public enum Mutations {
    /// Bytes that tend to break parsers.
    public static let interesting: [[UInt8]] = [
        Array("{".utf8), Array("}".utf8), Array("[".utf8), Array("]".utf8), Array("\"".utf8), Array("\\".utf8), Array("\\u".utf8),
        Array("\\ud800".utf8), Array(":".utf8), Array(",".utf8), Array("-".utf8), Array("1e".utf8), Array("0.".utf8), [0], [0xFF], [0xC3], [0xED, 0xA0, 0x80],
        Array(".".utf8), Array("=".utf8), Array("%".utf8), Array("&".utf8), Array("+".utf8), Array("%zz".utf8), Array("%00".utf8), Array("null".utf8),
        Array(String(repeating: "[", count: 64).utf8),
    ]

    /// SplitMix64: the same seed gives the same run on every machine.
    public struct Generator: RandomNumberGenerator {
        var state: UInt64
        public init(state: UInt64) { self.state = state }
        public mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Iterations per target: `LATCHKEY_FUZZ_ITERATIONS`, else `standard`.
    public static func iterations(standard: Int = 4000) -> Int {
        ProcessInfo.processInfo.environment["LATCHKEY_FUZZ_ITERATIONS"].flatMap(Int.init) ?? standard
    }
    public static var seconds: Double? { ProcessInfo.processInfo.environment["LATCHKEY_FUZZ_SECONDS"].flatMap(Double.init) }
    public static var seed: UInt64 { ProcessInfo.processInfo.environment["LATCHKEY_FUZZ_SEED"].flatMap(UInt64.init) ?? 0x1A7C_4E11 }

    /// One to four mutations of `input`: flips, inserted interesting bytes, deletions, duplicated slices, splices.
    public static func mutate(_ input: [UInt8], with other: [UInt8], _ random: inout Generator) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0...bytes.count, using: &random)
            switch Int.random(in: 0..<6, using: &random) {
            case 0 where position < bytes.count: bytes[position] ^= UInt8(1 << Int.random(in: 0..<8, using: &random))
            case 1: bytes.insert(contentsOf: interesting.randomElement(using: &random)!, at: position)
            case 2 where position < bytes.count: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...8, using: &random)))
            case 3 where position < bytes.count:
                let end = min(bytes.count, position + Int.random(in: 1...32, using: &random))
                bytes.insert(contentsOf: bytes[position..<end], at: end)
            case 4 where !other.isEmpty:
                let cut = Int.random(in: 0..<other.count, using: &random)
                bytes = Array(bytes[..<position]) + Array(other[cut...])
            default: bytes = Array(bytes[..<position])
            }
        }
        return bytes
    }

    /// Runs `body` on the corpus, then on mutations of it until the iterations or the time are spent; returns how
    /// many inputs were accepted and how many were tried.
    public static func run(_ corpus: [[UInt8]], standard: Int = 4000, _ body: ([UInt8]) async throws -> Bool) async rethrows -> (accepted: Int, total: Int) {
        var random = Generator(state: seed)
        var (accepted, total) = (0, 0)
        let deadline = seconds.map { ContinuousClock.now + .milliseconds(Int64($0 * 1000)) }
        for input in corpus {
            if try await body(input) { accepted += 1 }
            total += 1
        }
        for _ in 0..<iterations(standard: standard) {
            if let deadline, ContinuousClock.now >= deadline { break }
            let input = mutate(corpus.randomElement(using: &random)!, with: corpus.randomElement(using: &random)!, &random)
            if try await body(input) { accepted += 1 }
            total += 1
        }
        return (accepted, total)
    }
}
