import LatchkeyCore
import LatchkeyJOSE
public import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where `serve` writes its log: standard error, as text for people or one JSON object per line for log shippers.
public enum LogOutput {
    /// Installs the configured format and level for every logger of the process; call once, before any logging.
    /// With a `metadataProvider` (the tracing backend's), each line also carries its values, such as `trace_id` and `span_id`.
    public static func bootstrap(format: ServerConfiguration.LogFormat, level: Logger.Level, metadataProvider: Logger.MetadataProvider? = nil) {
        let factory: @Sendable (String, Logger.MetadataProvider?) -> any LogHandler = { label, provider in
            var handler = LineLogHandler(label: label, format: format, metadataProvider: provider) { StandardError.emit($0) }
            handler.logLevel = level
            return handler
        }
        if let metadataProvider {
            LoggingSystem.bootstrap(factory, metadataProvider: metadataProvider)
        } else {
            LoggingSystem.bootstrap { label in factory(label, LoggingSystem.metadataProvider) }
        }
    }
}

/// One line per event, written whole. Text lines are `StreamLogHandler`'s, byte for byte; JSON lines are an object
/// with `time` (ISO 8601, UTC), `level`, `label`, `message` and the metadata.
///
/// Every request logs a line, and `StreamLogHandler` re-renders all metadata each time a key is set (twice per
/// request) and formats the clock each line; `JSONSerialization` cost several times the request itself. This
/// keeps metadata as it is set, renders it once per line and formats the clock once a second.
struct LineLogHandler: LogHandler {
    let label: String
    let format: ServerConfiguration.LogFormat
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    /// Takes each finished line, newline included.
    let output: @Sendable ([UInt8]) -> Void

    init(
        label: String, format: ServerConfiguration.LogFormat, metadataProvider: Logger.MetadataProvider?,
        output: @escaping @Sendable ([UInt8]) -> Void
    ) {
        self.label = label
        self.format = format
        self.metadataProvider = metadataProvider
        self.output = output
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty { merged.merge(provided) { $1 } }
        if let explicit = event.metadata, !explicit.isEmpty { merged.merge(explicit) { $1 } }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        let now = time(nil)
        switch format {
        case .text: output(textLine(event, merged, at: now))
        case .json: output(jsonLine(event, merged, at: now))
        }
    }

    private func textLine(_ event: LogEvent, _ metadata: Logger.Metadata, at now: time_t) -> [UInt8] {
        // Appended piece by piece: string interpolation cost a visible share of every request.
        var line: [UInt8] = []
        line.reserveCapacity(256)
        line += Timestamps.text(for: now).utf8
        line.append(UInt8(ascii: " "))
        line += event.level.rawValue.utf8
        if !label.isEmpty {
            line.append(UInt8(ascii: " "))
            line += label.utf8
        }
        line.append(UInt8(ascii: ":"))
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line.append(UInt8(ascii: " "))
            line += key.utf8
            line.append(UInt8(ascii: "="))
            line += value.description.utf8
        }
        line += " [".utf8
        line += event.source.utf8
        line += "] ".utf8
        line += event.message.description.utf8
        line.append(UInt8(ascii: "\n"))
        return line
    }

    private func jsonLine(_ event: LogEvent, _ metadata: Logger.Metadata, at now: time_t) -> [UInt8] {
        var fields = metadata.mapValues(OpenAPIDocument.JSON.init)
        fields["time"] = .string(Timestamps.json(for: now))
        fields["level"] = .string(event.level.rawValue)
        fields["label"] = .string(label)
        fields["message"] = .string(event.message.description)
        var line = (try? LeanJSONEncoder().encode(fields)) ?? Array(#"{"message":"a log line could not be written"}"#.utf8)
        line.append(UInt8(ascii: "\n"))
        return line
    }
}

extension OpenAPIDocument.JSON {
    /// A log metadata value: strings, with arrays and objects kept as such.
    init(_ value: Logger.Metadata.Value) {
        switch value {
        case .string(let string): self = .string(string)
        case .stringConvertible(let convertible): self = .string(convertible.description)
        case .array(let values): self = .array(values.map(Self.init))
        case .dictionary(let dictionary): self = .object(dictionary.mapValues(Self.init))
        }
    }
}

/// The clock as log lines show it, formatted once per second.
private enum Timestamps {
    private struct Second {
        var time: time_t = -1
        var text = ""
        var json = ""
    }

    private static let current = Mutex(Second())

    /// Local time with its offset, as `StreamLogHandler` writes it: `2026-11-24T12:46:15+0000`.
    static func text(for now: time_t) -> String { second(now).text }

    /// UTC: `2026-11-24T12:46:15Z`.
    static func json(for now: time_t) -> String { second(now).json }

    private static func second(_ now: time_t) -> Second {
        current.withLock { second in
            if second.time != now {
                var clock = now
                var local = tm()
                var utc = tm()
                localtime_r(&clock, &local)
                gmtime_r(&clock, &utc)
                second = Second(time: now, text: format(&local, "%Y-%m-%dT%H:%M:%S%z"), json: format(&utc, "%Y-%m-%dT%H:%M:%SZ"))
            }
            return second
        }
    }

    private static func format(_ time: inout tm, _ pattern: String) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, pattern, &time)
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Standard error, one whole line per call: lines from concurrent tasks never interleave, and none waits in a buffer.
private enum StandardError {
    private static let lock = Mutex(())

    static func emit(_ bytes: [UInt8]) {
        lock.withLock { _ in
            bytes.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = write(STDERR_FILENO, buffer.baseAddress! + offset, buffer.count - offset)
                    if written > 0 {
                        offset += written
                    } else if written < 0 && errno == EINTR {
                        continue
                    } else {
                        return
                    }
                }
            }
        }
    }
}
