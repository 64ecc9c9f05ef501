import Foundation
public import Logging

/// `latchkey users import --from SOURCE PATH…`: the source's users, read from its files or database.
public enum SourceReader {
    /// Reads `paths` as `source` has them: Firebase and Auth0 one export file, Cognito one or more `list-users` pages,
    /// Supabase the database's URL.
    public static func read(_ source: ImportSource, paths: [String], logger: Logger) async throws(ImportSourceError) -> SourceRead {
        switch source {
        case .firebase:
            return try FirebaseExport.read(try file(one(paths, "the file of `firebase auth:export`"), source))
        case .auth0:
            return try Auth0Export.read(try file(one(paths, "the file of the Auth0 user export job"), source))
        case .cognito:
            guard !paths.isEmpty else { throw ImportSourceError("Name the file(s) of `aws cognito-idp list-users` to import from.") }
            var pages: [Data] = []
            for path in paths { pages.append(try file(path, source)) }
            return try CognitoExport.read(pages)
        case .supabase:
            return try await SupabaseDatabase.read(url: try one(paths, "the database URL, \(DatabaseURL.usage)"), logger: logger)
        }
    }

    private static func one(_ paths: [String], _ what: String) throws(ImportSourceError) -> String {
        guard paths.count == 1, let path = paths.first else {
            throw ImportSourceError(paths.isEmpty ? "Name \(what) to import from." : "Name one source, \(what), not \(paths.count).")
        }
        return path
    }

    /// The bytes of an export file, or why there are none.
    static func file(_ path: String, _ source: ImportSource) throws(ImportSourceError) -> Data {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { throw ImportSourceError("No file at \(path).") }
        guard !isDirectory.boolValue else { throw ImportSourceError("\(path) is a directory, not the \(source.rawValue) export file.") }
        guard FileManager.default.isReadableFile(atPath: path) else { throw ImportSourceError("\(path) cannot be read: permission denied.") }
        do {
            return try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ImportSourceError("\(path) cannot be read: \(error.localizedDescription)")
        }
    }
}
