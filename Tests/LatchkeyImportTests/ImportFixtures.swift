import Foundation
import LatchkeyImport
import Testing

/// The export files in Fixtures/ (SOURCES.md there says which format each follows).
enum ImportFixtures {
    static var directory: URL {
        get throws { try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil)) }
    }

    static func path(_ name: String) throws -> String { try directory.appendingPathComponent(name).path }

    static func data(_ name: String) throws -> Data { try Data(contentsOf: directory.appendingPathComponent(name)) }

    /// The thrown ImportSourceError's message, or a recorded issue when `body` does not throw one.
    static func refusal(_ body: () throws(ImportSourceError) -> SourceRead, sourceLocation: SourceLocation = #_sourceLocation) -> String {
        do {
            let read = try body()
            Issue.record("read \(read.users.count) users instead of refusing the source", sourceLocation: sourceLocation)
            return ""
        } catch {
            return error.description
        }
    }

    static func refusal(_ body: () async throws(ImportSourceError) -> SourceRead, sourceLocation: SourceLocation = #_sourceLocation) async -> String {
        do {
            let read = try await body()
            Issue.record("read \(read.users.count) users instead of refusing the source", sourceLocation: sourceLocation)
            return ""
        } catch {
            return error.description
        }
    }
}

extension SourceRead {
    func user(_ id: String) -> SourceUser? { users.first { $0.id == id } }
}
