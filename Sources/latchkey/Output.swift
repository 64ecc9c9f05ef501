import ArgumentParser
import Foundation

/// Exit codes every subcommand documents: 0 success, 1 a failed check or verification, 64 a usage error.
enum ExitStatus {
    static let failure = ExitCode(1)

    /// A configuration or database the command cannot work with: one line naming it, and exit 64. Argument
    /// parser's usage text would bury that line and says nothing about a configuration file or a database.
    static func configurationError(_ error: any Error) -> ExitCode {
        FileHandle.standardError.write(Data("Error: \(Runtime.describe(error))\n".utf8))
        return ExitCode(64)
    }
}

/// Human output by default (colour only on a terminal), JSON with `--json`.
struct Printer {
    let json: Bool
    private let colour = isatty(STDOUT_FILENO) == 1

    func paint(_ text: String, _ code: String) -> String { colour ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text }
    func bold(_ text: String) -> String { paint(text, "1") }
    func red(_ text: String) -> String { paint(text, "31") }
    func green(_ text: String) -> String { paint(text, "32") }
    func yellow(_ text: String) -> String { paint(text, "33") }

    /// Reports a failure (a JSON error object, or a red line on standard error) and exits 1.
    func fail(_ code: String, _ description: String) -> ExitCode {
        if json {
            emit(["error": code, "error_description": description])
        } else {
            FileHandle.standardError.write(Data((red("error: ") + description + "\n").utf8))
        }
        return ExitStatus.failure
    }

    /// Prints one JSON object (sorted keys).
    func emit(_ object: [String: Any]) {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        print(String(decoding: data, as: UTF8.self))
    }
}

/// Reads a token argument, or standard input when it is `-`.
func readTokenArgument(_ argument: String) throws -> String {
    if argument == "-" {
        let data = FileHandle.standardInput.readDataToEndOfFile()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
    return argument.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Parses durations such as `180d`, `6h`, `30m`, `45s` or plain seconds.
func parseDuration(_ text: String) throws -> TimeInterval {
    let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
    let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
    if let last = trimmed.last, let unit = units[last], let value = Double(trimmed.dropLast()) { return value * unit }
    if let value = Double(trimmed) { return value }
    throw ValidationError("\"\(text)\" is not a duration; write 180d, 6h, 30m, 45s or seconds")
}

/// Parses ISO-8601 or Unix seconds.
func parseInstant(_ text: String) throws -> Date {
    if let seconds = Double(text) { return Date(timeIntervalSince1970: seconds) }
    let formatter = ISO8601DateFormatter()
    if let date = formatter.date(from: text) { return date }
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    if let date = formatter.date(from: text) { return date }
    throw ValidationError("\"\(text)\" is neither ISO-8601 (2026-01-31T12:00:00Z) nor Unix seconds")
}

/// "2026-01-31 12:00:00 UTC (in 3 h)" / "(expired 3 h ago)".
func describeInstant(_ date: Date, now: Date = Date(), past: String = "ago", future: String = "in") -> String {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "UTC")
    formatter.dateFormat = "yyyy-MM-dd HH:mm:ss 'UTC'"
    let delta = date.timeIntervalSince(now)
    let relative = delta < 0 ? "\(humanDuration(-delta)) \(past)" : "\(future) \(humanDuration(delta))"
    return "\(formatter.string(from: date)) (\(relative))"
}

func humanDuration(_ seconds: TimeInterval) -> String {
    switch seconds {
    case ..<120: return "\(Int(seconds)) s"
    case ..<7200: return "\(Int(seconds / 60)) min"
    case ..<172_800: return "\(Int(seconds / 3600)) h"
    default: return "\(Int(seconds / 86_400)) days"
    }
}
