import Foundation

/// What a row's two figures count. JSON carries `code`; people read `symbol`.
public enum BenchUnit: String, Sendable, CaseIterable {
    case operationsPerSecond = "ops/s"
    case requestsPerSecond = "req/s"
    case bytesPerSecond = "bytes/s"
    case microseconds = "us"
    case milliseconds = "ms"
    case megabytes = "MB"
    case bytes
    case cores
    case calls
    case descriptors
    case requests
    /// Machine instructions, counted by callgrind.
    case instructions
    case threads

    /// The name in JSON output: ASCII, as in the rows' names (`us`, not `µs`).
    public var code: String { rawValue }

    /// The name in human-readable output.
    public var symbol: String { self == .microseconds ? "µs" : rawValue }

    /// Digits after the point in human-readable output: cores and short times are small numbers.
    var fractionDigits: Int {
        switch self {
        case .cores: 2
        case .milliseconds, .megabytes: 1
        default: 0
        }
    }

    /// `figure` rounded for people, thousands grouped: `12,790 ops/s`, `1.10 cores`, `58.3 MB`, `307 µs`.
    public func format(_ figure: Double) -> String {
        guard figure.isFinite else { return "\(figure) \(symbol)" }
        let digits = fractionDigits
        let text = String(format: "%.\(digits)f", abs(figure))
        let point = text.firstIndex(of: ".") ?? text.endIndex
        var whole = String(text[..<point])
        var index = whole.count - 3
        while index > 0 {
            whole.insert(",", at: whole.index(whole.startIndex, offsetBy: index))
            index -= 3
        }
        let sign = figure < 0 && text.contains(where: { $0 != "0" && $0 != "." }) ? "-" : ""
        return sign + whole + text[point...] + " " + symbol
    }
}

/// One row of `latchkey-bench`: Latchkey's figure against a baseline measured in the same run, both in `unit`.
public struct BenchRow: Encodable, Sendable {
    public let name: String
    /// Latchkey's figure. The JSON field keeps its historical name, `opsPerSecond`, whatever the unit.
    public let opsPerSecond: Double
    public let baselineName: String
    public let baselineOpsPerSecond: Double
    public let unit: BenchUnit
    public var ratio: Double { opsPerSecond / baselineOpsPerSecond }

    public init(name: String, opsPerSecond: Double, baselineName: String, baselineOpsPerSecond: Double, unit: BenchUnit) {
        self.name = name
        self.opsPerSecond = opsPerSecond
        self.baselineName = baselineName
        self.baselineOpsPerSecond = baselineOpsPerSecond
        self.unit = unit
    }

    enum CodingKeys: String, CodingKey { case name, opsPerSecond, baselineOpsPerSecond, baselineName, ratio, unit }

    /// Whole numbers for the figures, as before units were added, except where the unit needs its fraction (cores).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        let scale = pow(10, Double(unit.fractionDigits))
        try container.encode(name, forKey: .name)
        try container.encode((opsPerSecond * scale).rounded() / scale, forKey: .opsPerSecond)
        try container.encode((baselineOpsPerSecond * scale).rounded() / scale, forKey: .baselineOpsPerSecond)
        try container.encode(baselineName, forKey: .baselineName)
        try container.encode((ratio * 1000).rounded() / 1000, forKey: .ratio)
        try container.encode(unit.code, forKey: .unit)
    }

    /// One JSON object, keys sorted.
    public var jsonLine: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }

    /// `name  figure unit  vs  baseline  figure unit  ratio r`.
    public var humanLine: String { Self.humanLines([self])[0] }

    /// The rows' human-readable lines, in columns as wide as these rows need.
    public static func humanLines(_ rows: [BenchRow]) -> [String] {
        func pad(_ text: String, _ width: Int) -> String { text + String(repeating: " ", count: max(0, width - text.count)) }
        func padLeft(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }
        let figures = rows.map { ($0.unit.format($0.opsPerSecond), $0.unit.format($0.baselineOpsPerSecond)) }
        let nameWidth = rows.map(\.name.count).max() ?? 0
        let baselineWidth = rows.map(\.baselineName.count).max() ?? 0
        let figureWidth = figures.map { max($0.0.count, $0.1.count) }.max() ?? 0
        return zip(rows, figures).map { row, figure in
            pad(row.name, nameWidth) + "  " + padLeft(figure.0, figureWidth) + "  vs  " + pad(row.baselineName, baselineWidth) + "  "
                + padLeft(figure.1, figureWidth) + "  ratio " + String(format: "%.2f", row.ratio)
        }
    }
}
