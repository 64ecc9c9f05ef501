import Foundation
import Logging
import Synchronization
import Testing

@testable import LatchkeyServer

@Suite("Server: the log lines serve writes")
struct LogOutputTests {
    struct Failure: Error, CustomStringConvertible {
        var description: String { "the disk is full" }
    }

    /// Events that exercise every part of a line: handler, provider and per-event metadata (each overriding the one
    /// before), nested values, an error, and an empty label.
    static let events: [(label: String, handlerMetadata: Logger.Metadata, event: LogEvent)] = [
        ("latchkey", [:], LogEvent(level: .info, message: "listening", metadata: nil, source: "LatchkeyServer", file: #file, function: #function, line: 1)),
        (
            "latchkey", ["request.id": "r-1", "hb.request.id": .stringConvertible(42)],
            LogEvent(
                level: .info, message: "request", metadata: ["http.status": .stringConvertible(200), "duration_ms": "0.25", "request.id": "r-2"],
                source: "LatchkeyServer", file: #file, function: #function, line: 2)
        ),
        (
            "", ["z": .array(["a", .dictionary(["k": "v", "b": .array([])])])],
            LogEvent(
                level: .error, message: "the database failed", error: Failure(), metadata: ["shared": "event"], source: "LatchkeyStore", file: #file,
                function: #function, line: 3)
        ),
    ]

    static let provider = Logger.MetadataProvider { ["trace.id": "t-9", "shared": "provider"] }

    @Test("text lines are StreamLogHandler's, byte for byte after the timestamp")
    func textMatchesStreamLogHandler() throws {
        for (label, handlerMetadata, event) in Self.events {
            for provider in [nil, Self.provider] {
                let ours = Lines()
                var lean = LineLogHandler(label: label, format: .text, metadataProvider: provider) { ours.append($0) }
                let theirs = Lines()
                var stream = StreamLogHandler(label: label, stream: theirs, metadataProvider: provider)
                for (key, value) in handlerMetadata {
                    lean[metadataKey: key] = value
                    stream[metadataKey: key] = value
                }
                lean.log(event: event)
                stream.log(event: event)
                let (leanLine, streamLine) = (try #require(ours.all.first), try #require(theirs.all.first))
                #expect(ours.all.count == 1 && leanLine.hasSuffix("\n"))
                #expect(leanLine.drop { $0 != " " } == streamLine.drop { $0 != " " }, "\(leanLine) vs \(streamLine)")
                #expect(leanLine.prefix(24).wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}/) != nil, "\(leanLine)")
            }
        }
    }

    @Test("JSON lines are one object each: time, level, label, message and the metadata, nested values kept")
    func jsonLines() throws {
        let (label, handlerMetadata, event) = Self.events[2]
        let lines = Lines()
        var handler = LineLogHandler(label: label, format: .json, metadataProvider: Self.provider) { lines.append($0) }
        for (key, value) in handlerMetadata { handler[metadataKey: key] = value }
        // Metadata named like a reserved field does not replace it.
        handler.log(
            event: LogEvent(
                level: .warning, message: "careful", metadata: ["message": "forged", "level": "trace"], source: "S", file: "", function: "", line: 0))
        handler.log(event: event)
        #expect(lines.all.count == 2 && lines.all.allSatisfy { $0.hasSuffix("\n") && $0.dropLast().allSatisfy { $0 != "\n" } })
        let objects = try lines.all.map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
        #expect(objects[0]["message"] as? String == "careful" && objects[0]["level"] as? String == "warning")
        let object = objects[1]
        #expect(object["level"] as? String == "error" && object["label"] as? String == "" && object["message"] as? String == "the database failed")
        #expect((object["time"] as? String)?.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/) != nil, "\(object)")
        #expect(object["shared"] as? String == "event" && object["trace.id"] as? String == "t-9")
        #expect(object["error.message"] as? String == "the disk is full")
        let nested = try #require(object["z"] as? [Any])
        #expect(nested.first as? String == "a" && (nested.last as? [String: Any])?["k"] as? String == "v")
    }

    /// What a handler wrote, line by line; also a stream for `StreamLogHandler`.
    final class Lines: TextOutputStream, Sendable {
        private let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        func append(_ bytes: [UInt8]) { lines.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) } }
        func write(_ string: String) { lines.withLock { $0.append(string) } }
    }
}
