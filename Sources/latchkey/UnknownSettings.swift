import Configuration
import Foundation
import LatchkeyJOSE
import LatchkeyProviders
import Synchronization

/// Records every key a reader is asked for: the settings Latchkey reads, as this configuration makes them (the
/// `clients` it lists, the `oidc.providers` it names).
final class ReadKeys: AccessReporter, Sendable {
    private let keys = Mutex<Set<String>>([])

    func report(_ event: AccessEvent) {
        let key = event.metadata.key.components.joined(separator: ".")
        keys.withLock { _ = $0.insert(key) }
    }

    /// The keys read, with every provider module's settings, read or not (a module whose required settings are missing
    /// stops reading the rest, which are still settings).
    var known: Set<String> {
        var known = keys.withLock { $0 }
        for module in ProviderModules.all {
            for setting in module.settings {
                for key in setting.key.components(separatedBy: CharacterSet(charactersIn: "/,")) {
                    known.insert(module.name + "." + key.trimmingCharacters(in: .whitespaces))
                }
            }
        }
        return known
    }
}

/// Keys in the configuration file, and `LATCHKEY_*` variables, that name no setting: a misspelt setting is otherwise
/// ignored without a word (`apple.teamID` leaves `apple.teamId` unset).
enum UnknownSettings {
    /// `LATCHKEY_*` variables of the project's own tooling (test runs, benchmarks, scripts), which are not settings.
    static let toolingVariablePrefixes = [
        "LATCHKEY_BIN", "LATCHKEY_TEST", "LATCHKEY_LOAD_TESTS", "LATCHKEY_FUZZ_", "LATCHKEY_BENCH", "LATCHKEY_DOCS_", "LATCHKEY_APPLE_CHECK_",
    ]

    /// A key or variable that names no setting, and the real name nearest to it when one is close.
    struct Finding {
        let warning: String
        let hasSuggestion: Bool
    }

    /// One finding for each key of the file at `file` and each `LATCHKEY_*` variable of `environment` that names no
    /// setting in `known`.
    static func findings(file: String?, environment: [String: String], known: Set<String>) -> [Finding] {
        var findings: [Finding] = []
        let knownKeys = known.sorted()
        for key in file.map(fileKeys) ?? [] where !known.contains(key) {
            let nearest = nearest(key, among: knownKeys)
            findings.append(
                Finding(
                    warning: "\(file ?? "the file") has \(key), which is not a setting" + (nearest.map { "; did you mean \($0)?" } ?? ""),
                    hasSuggestion: nearest != nil))
        }
        let byVariable = Dictionary(knownKeys.map { (variableName($0), $0) }, uniquingKeysWith: { first, _ in first })
        for name in environment.keys.sorted() where name.hasPrefix("LATCHKEY_") && byVariable[name] == nil {
            guard !toolingVariablePrefixes.contains(where: { name.hasPrefix($0) }) else { continue }
            let nearest = nearest(name, among: Array(byVariable.keys))
            findings.append(
                Finding(
                    warning: "the variable \(name) is not a setting" + (nearest.map { "; did you mean \($0) (\(byVariable[$0]!))?" } ?? ""),
                    hasSuggestion: nearest != nil))
        }
        return findings
    }

    /// The dotted keys of a JSON configuration file, as the loader reads them: objects nest with `.`, and an array of
    /// objects (`clients`, `webhooks`) is indexed (`clients.0.clientId`). Nothing when the file does not parse.
    static func fileKeys(_ path: String) -> [String] {
        guard let data = FileManager.default.contents(atPath: path), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return [] }
        var keys: [String] = []
        func walk(_ value: Any, _ key: String) {
            if let object = value as? [String: Any] {
                for (name, child) in object { walk(child, key.isEmpty ? name : key + "." + name) }
            } else if let array = value as? [Any], array.contains(where: { $0 is [String: Any] }) {
                for (index, child) in array.enumerated() { walk(child, key + ".\(index)") }
            } else {
                keys.append(key)
            }
        }
        walk(object, "")
        return keys.sorted()
    }

    /// The environment variable that sets `key`, as swift-configuration's environment provider spells it:
    /// `apple.teamId` is `LATCHKEY_APPLE_TEAM_ID`.
    static func variableName(_ key: String) -> String {
        var name = "LATCHKEY"
        for component in key.split(separator: ".") {
            name += "_"
            var previous: Character?
            for character in component {
                if let previous, previous.isLowercase, character.isUppercase { name += "_" }
                name += character.uppercased()
                previous = character
            }
        }
        return name
    }

    /// The name of `candidates` nearest to `name` (case aside), when it is near enough to be a slip: at most two edits,
    /// or a quarter of the name's length for long names.
    static func nearest(_ name: String, among candidates: [String]) -> String? {
        let target = Array(name.lowercased())
        let allowed = max(2, target.count / 4)
        var best: (String, Int)?
        for candidate in candidates {
            let distance = editDistance(target, Array(candidate.lowercased()), bound: allowed)
            if distance <= allowed, distance < (best?.1 ?? .max) { best = (candidate, distance) }
        }
        return best?.0
    }

    /// Levenshtein distance, or a number above `bound` as soon as it must exceed it.
    private static func editDistance(_ first: [Character], _ second: [Character], bound: Int) -> Int {
        if abs(first.count - second.count) > bound { return bound + 1 }
        var previous = Array(0...second.count)
        for (index, character) in first.enumerated() {
            var current = [index + 1] + Array(repeating: 0, count: second.count)
            for (other, candidate) in second.enumerated() {
                current[other + 1] = min(previous[other + 1] + 1, current[other] + 1, previous[other] + (character == candidate ? 0 : 1))
            }
            if current.min()! > bound { return bound + 1 }
            previous = current
        }
        return previous[second.count]
    }
}
