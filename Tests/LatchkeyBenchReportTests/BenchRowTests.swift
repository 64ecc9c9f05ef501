import Foundation
import LatchkeyBenchReport
import Testing

@Suite("Benchmark rows")
struct BenchRowTests {
    static let cpu = BenchRow(
        name: "server_cpu_us_per_google_sign_in", opsPerSecond: 307.4, baselineName: "server_cpu_us_per_healthz", baselineOpsPerSecond: 55.2,
        unit: .microseconds)

    @Test("each row reads in its own unit, not ops/s")
    func humanUnits() {
        #expect(Self.cpu.humanLine.contains("307 µs"))
        #expect(Self.cpu.humanLine.contains("55 µs"))
        #expect(!Self.cpu.humanLine.contains("ops/s"))
        let memory = BenchRow(
            name: "rss_after_26000_sign_ins_and_refreshes", opsPerSecond: 58.34, baselineName: "idle_rss_megabytes", baselineOpsPerSecond: 46,
            unit: .megabytes)
        #expect(memory.humanLine.contains("58.3 MB"))
        #expect(memory.humanLine.contains("46.0 MB"))
        let cores = BenchRow(
            name: "server_cores_busy_during_rotations", opsPerSecond: 1.104, baselineName: "cores", baselineOpsPerSecond: 2, unit: .cores)
        #expect(cores.humanLine.contains("1.10 cores"))
        #expect(cores.humanLine.hasSuffix("ratio 0.55"))
    }

    @Test(
        "figures are rounded to the unit's precision and grouped by thousands",
        arguments: [
            (BenchUnit.operationsPerSecond, 2_497_412.4, "2,497,412 ops/s"), (.operationsPerSecond, 999.6, "1,000 ops/s"),
            (.bytes, 23_088, "23,088 bytes"), (.microseconds, 0.4, "0 µs"), (.milliseconds, 19.96, "20.0 ms"), (.cores, 0.346, "0.35 cores"),
            (.calls, 1, "1 calls"), (.bytesPerSecond, 47_712_345, "47,712,345 bytes/s"), (.requestsPerSecond, 2_889, "2,889 req/s"),
        ])
    func formatting(unit: BenchUnit, figure: Double, expected: String) {
        #expect(unit.format(figure) == expected)
    }

    @Test("JSON keeps its fields and adds the unit in ASCII")
    func json() throws {
        let object = try #require(JSONSerialization.jsonObject(with: Data(Self.cpu.jsonLine.utf8)) as? [String: Any])
        #expect(Set(object.keys) == ["name", "opsPerSecond", "baselineOpsPerSecond", "baselineName", "ratio", "unit"])
        #expect(object["name"] as? String == "server_cpu_us_per_google_sign_in")
        #expect(object["opsPerSecond"] as? Double == 307)
        #expect(object["baselineOpsPerSecond"] as? Double == 55)
        #expect(object["baselineName"] as? String == "server_cpu_us_per_healthz")
        #expect(object["ratio"] as? Double == 5.569)
        #expect(object["unit"] as? String == "us")
        let rate = BenchRow(
            name: "get_v1_me_bearer", opsPerSecond: 12_790.4, baselineName: "get_healthz", baselineOpsPerSecond: 17_628, unit: .operationsPerSecond)
        #expect(rate.jsonLine.contains(#""unit":"ops/s""#))
    }

    @Test("rows printed together share their columns")
    func columns() {
        let rate = BenchRow(
            name: "get_v1_me_bearer", opsPerSecond: 12_790, baselineName: "get_healthz", baselineOpsPerSecond: 17_628, unit: .operationsPerSecond)
        let lines = BenchRow.humanLines([rate, Self.cpu])
        func column(_ marker: String, _ line: String) -> Int? { line.range(of: marker).map { line.distance(from: line.startIndex, to: $0.lowerBound) } }
        #expect(lines.count == 2)
        #expect(column("  vs  ", lines[0]) == column("  vs  ", lines[1]))
        #expect(column("ratio", lines[0]) == column("ratio", lines[1]))
    }
}
