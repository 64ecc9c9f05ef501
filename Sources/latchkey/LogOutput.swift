import Foundation
import LatchkeyServer
import Logging
import Synchronization

/// Where `serve` writes its log: standard error, as text for people or one JSON object per line for log shippers.
enum LogOutput {
    /// Installs the configured format and level for every logger of the process; call once, before any logging.
    static func bootstrap(format: ServerConfiguration.LogFormat, level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler =
                switch format {
                case .text: StreamLogHandler.standardError(label: label)
                case .json: JSONLogHandler(label: label)
                }
            handler.logLevel = level
            return handler
        }
    }
}

/// One JSON object per line on standard error: `time` (ISO 8601, UTC), `level`, `label`, `message`, then the metadata.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String) { self.label = label }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields: [String: Any] = [:]
        for (key, value) in metadata.merging(metadataProvider?.get() ?? [:], uniquingKeysWith: { $1 }).merging(event.metadata ?? [:], uniquingKeysWith: { $1 })
        {
            fields[key] = Self.json(value)
        }
        fields["time"] = Date().formatted(.iso8601)
        fields["level"] = event.level.rawValue
        fields["label"] = label
        fields["message"] = event.message.description
        guard var line = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        line.append(UInt8(ascii: "\n"))
        Self.output.withLock { _ in FileHandle.standardError.write(line) }
    }

    /// Serialises writes so lines from concurrent tasks never interleave.
    private static let output = Mutex(())

    private static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let string): string
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): values.map(json)
        case .dictionary(let dictionary): dictionary.mapValues(json)
        }
    }
}
