import Foundation
public import Logging

public enum SourceReader {
    public static func read(_ source: ImportSource, paths: [String], logger: Logger) async throws(ImportSourceError) -> SourceRead {
        throw ImportSourceError("not yet")
    }
}
