import Foundation
import LatchkeyImport
import Logging
import Testing

@Suite("Import: reading a source from the command's arguments")
struct SourceReaderTests {
    let logger = Logger(label: "latchkey.import.test")

    @Test("each source reads its files: Firebase and Auth0 one, Cognito several")
    func readsFiles() async throws {
        let firebase = try await SourceReader.read(.firebase, paths: [ImportFixtures.path("firebase-users.json")], logger: logger)
        #expect(firebase.users.count == 6)
        let auth0 = try await SourceReader.read(.auth0, paths: [ImportFixtures.path("auth0-users.ndjson.gz")], logger: logger)
        #expect(auth0.users.count == 7)
        let cognito = try await SourceReader.read(
            .cognito, paths: [ImportFixtures.path("cognito-users-page1.json"), ImportFixtures.path("cognito-users-page2.json")], logger: logger)
        #expect(cognito.users.count == 6)
        #expect(cognito.folded.count == 1)
    }

    @Test("a missing file, a directory, no path or too many paths: a message that says so")
    func badPaths() async throws {
        let missing = "/nonexistent/latchkey/users.json"
        let directory = try ImportFixtures.directory.path
        let json = try ImportFixtures.path("firebase-users.json")
        let cases: [(ImportSource, [String], String)] = [
            (.firebase, [missing], "No file at \(missing)"),
            (.auth0, [directory], "is a directory"),
            (.cognito, [json, missing], "No file at \(missing)"),
            (.firebase, [], "Name the file"),
            (.auth0, [json, json], "not 2"),
            (.cognito, [], "list-users"),
            (.supabase, [], "database URL"),
        ]
        for (source, paths, expected) in cases {
            let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
                try await SourceReader.read(source, paths: paths, logger: logger)
            }
            #expect(message.contains(expected), "\(source) \(paths): \(message)")
        }
    }

    @Test("a file of another source is refused, not read as nothing")
    func wrongSource() async throws {
        let auth0File = try ImportFixtures.path("auth0-users.ndjson")
        let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
            try await SourceReader.read(.cognito, paths: [auth0File], logger: logger)
        }
        #expect(message.contains("not valid JSON") || message.contains("list-users"), "\(message)")
        let cognitoFile = try ImportFixtures.path("cognito-users-page1.json")
        let firebase = await ImportFixtures.refusal { () async throws(ImportSourceError) in
            try await SourceReader.read(.firebase, paths: [cognitoFile], logger: logger)
        }
        #expect(firebase.contains("\"users\""), "\(firebase)")
    }

    @Test("a Supabase URL that is no PostgreSQL URL, or has an unknown sslmode, is refused without echoing it")
    func badDatabaseURLs() async throws {
        let cases: [(String, String)] = [
            ("https://secret-pass@example.com/db", "must be the database's URL"),
            ("postgres:///postgres", "needs a user and a host"),
            ("postgres://postgres:secret-pass@127.0.0.1:5432/postgres?sslmode=sometimes", "sslmode"),
        ]
        for (url, expected) in cases {
            let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
                try await SourceReader.read(.supabase, paths: [url], logger: logger)
            }
            #expect(message.contains(expected), "\(message)")
            #expect(!message.contains("secret-pass"), "\(message)")
        }
    }

    @Test("a database that cannot be reached: the message names it without its password")
    func unreachableDatabase() async throws {
        let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
            try await SupabaseDatabase.read(url: "postgres://postgres:secret-pass@127.0.0.1:1/postgres?sslmode=disable", logger: logger)
        }
        #expect(message.contains("Cannot connect"), "\(message)")
        #expect(message.contains("postgres://postgres@127.0.0.1:1/postgres"), "\(message)")
        #expect(!message.contains("secret-pass"), "\(message)")
        #expect(message.contains("refused"), "\(message)")
    }
}
