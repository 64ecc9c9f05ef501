import Foundation
import LatchkeyImport
import LatchkeyModels
import Testing

@Suite("Import: Auth0 user exports")
struct Auth0ExportTests {
    static let ids = [
        "google-oauth2|109876543210987654321", "apple|001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456", "auth0|5457edea1b8f22891a000004",
        "windowslive|4f0a2f5e1c2b3a49", "twitter|783214", "samlp|corp|dave@corp.example", "email|64a1b2c3d4e5f6a7b8c9d0e1",
    ]

    @Test("NDJSON: identities mapped, numeric user ids kept digit for digit, blocked, app_metadata, linked accounts")
    func ndjson() throws {
        let read = try Auth0Export.read(ImportFixtures.data("auth0-users.ndjson"))
        #expect(read.problems.isEmpty)
        #expect(read.users.map(\.id) == Self.ids)

        let google = try #require(read.user(Self.ids[0]))
        #expect(google.identities == [SourceIdentity(provider: "google", subject: "109876543210987654321", email: "ann@example.com", emailVerified: true)])
        #expect(google.givenName == "Ann")
        #expect(google.familyName == "Example")
        #expect(google.displayName == "Ann Example")
        #expect(google.claims == ["plan": .string("pro"), "roles": .array([.string("admin")])])
        #expect(google.createdAt == Date(timeIntervalSince1970: 1_680_350_400))

        let apple = try #require(read.user(Self.ids[1]))
        #expect(apple.identities.map(\.provider) == ["apple"])
        #expect(apple.identities.map(\.subject) == ["001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456"])

        let linked = try #require(read.user(Self.ids[2]))
        #expect(linked.disabled)
        #expect(linked.claims == ["tier": .integer(3)])
        #expect(linked.otherMethods == ["auth0"])
        #expect(linked.identities == [SourceIdentity(provider: "github", subject: "5550001", email: "bob@users.noreply.github.com", emailVerified: true)])
        #expect(linked.createdAt == Date(timeIntervalSince1970: 1_667_432_043.803))

        #expect(try #require(read.user(Self.ids[3])).identities.map(\.provider) == ["microsoft"])
        #expect(try #require(read.user(Self.ids[4])).identities == [SourceIdentity(provider: "x", subject: "783214")])
        let saml = try #require(read.user(Self.ids[5]))
        #expect(saml.identities.isEmpty)
        #expect(saml.otherMethods == ["samlp"])
        #expect(try #require(read.user(Self.ids[6])).otherMethods == ["email"])
    }

    @Test("the gzip file Auth0 hands out reads as the NDJSON in it; a JSON array of users reads too")
    func gzipAndArray() throws {
        let plain = try Auth0Export.read(ImportFixtures.data("auth0-users.ndjson"))
        #expect(try Auth0Export.read(ImportFixtures.data("auth0-users.ndjson.gz")) == plain)
        let array = try Auth0Export.read(ImportFixtures.data("auth0-users.json"))
        #expect(array.users == Array(plain.users.prefix(3)))
        #expect(array.problems.isEmpty)
    }

    @Test("an export job that asked for no identities: the identity comes from user_id")
    func identityFromUserID() throws {
        let read = try Auth0Export.read(Data(#"{"user_id":"google-oauth2|109876543210987654321","email":"a@example.com"}"#.utf8))
        #expect(read.users.first?.identities == [SourceIdentity(provider: "google", subject: "109876543210987654321", email: "a@example.com")])
    }

    @Test("lines that are no user are problems and the rest is read")
    func malformedLines() throws {
        let read = try Auth0Export.read(ImportFixtures.data("auth0-malformed.ndjson"))
        #expect(read.users.map(\.id) == ["auth0|good1"])
        #expect(read.problems.map(\.sourceID) == [nil, nil, "google-oauth2|1", "google-oauth2|2", "auth0|baddate", nil])
        #expect(read.problems[0].reason.contains("line 2 is not JSON"))
        #expect(read.problems[1].reason.contains("no user_id"))
        #expect(read.problems[2].reason.contains("identities"))
        #expect(read.problems[3].reason.contains("user_id"))
        #expect(read.problems[4].reason.contains("created_at"))
        #expect(read.problems[5].reason.contains("not a user object"))
    }

    @Test("a file that is no Auth0 export is refused: broken gzip, CSV, one JSON object, nothing but broken lines")
    func notAnExport() throws {
        let cases: [(String, Data, String)] = [
            ("truncated gzip", try ImportFixtures.data("auth0-truncated.ndjson.gz"), "cut short"),
            ("damaged gzip", Data([0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xFF, 0xFF, 0xFF, 0xFF]), "download it again"),
            ("CSV", Data("user_id,email\nauth0|1,a@example.com\n".utf8), "format"),
            ("pretty object", Data("{\n  \"users\": []\n}\n".utf8), "one JSON object"),
            ("broken lines", Data("{\"user_id\":\n{oops\n".utf8), "no line"),
            ("broken array", Data("[{\"user_id\": \"a\"}".utf8), "not valid JSON"),
        ]
        for (what, data, expected) in cases {
            let message = ImportFixtures.refusal { () throws(ImportSourceError) in try Auth0Export.read(data) }
            #expect(message.contains(expected), "\(what): \(message)")
        }
    }

    @Test("an empty export is no users")
    func empty() throws {
        #expect(try Auth0Export.read(Data()) == SourceRead())
    }
}
