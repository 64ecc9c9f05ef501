import Foundation
import LatchkeyImport
import LatchkeyModels
import Testing

@Suite("Import: Firebase auth:export files")
struct FirebaseExportTests {
    @Test("the JSON export: Apple, Google (a 21-digit subject kept as text), password, phone, disabled, Microsoft, custom claims")
    func json() throws {
        let read = try FirebaseExport.read(ImportFixtures.data("firebase-users.json"))
        #expect(read.problems.isEmpty)
        #expect(read.folded.isEmpty)
        #expect(read.users.map(\.id) == ["fbApple0001", "fbGoogle0002", "fbPassword0003", "fbDisabled0004", "fbPhone0005", "fbMicrosoft0006"])

        let apple = try #require(read.user("fbApple0001"))
        #expect(
            apple.identities == [
                SourceIdentity(
                    provider: "apple", subject: "001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456", email: "k7qz2m4x9p@privaterelay.appleid.com")
            ])
        #expect(apple.email == "k7qz2m4x9p@privaterelay.appleid.com")
        #expect(apple.emailVerified == true)
        #expect(apple.createdAt == Date(timeIntervalSince1970: 1_621_582_693.401))
        #expect(apple.otherMethods.isEmpty)
        #expect(!apple.disabled)

        let google = try #require(read.user("fbGoogle0002"))
        #expect(google.identities == [SourceIdentity(provider: "google", subject: "109876543210987654321", email: "ann@example.com")])
        #expect(google.displayName == "Ann Example")
        #expect(google.claims == ["role": .string("admin"), "tier": .integer(2), "beta": .bool(true)])

        let password = try #require(read.user("fbPassword0003"))
        #expect(password.identities.isEmpty)
        #expect(password.otherMethods == ["password"])
        #expect(password.emailVerified == false)

        let disabled = try #require(read.user("fbDisabled0004"))
        #expect(disabled.disabled)
        #expect(disabled.identities.map(\.provider) == ["x", "github"])
        #expect(disabled.identities.map(\.subject) == ["783214", "5550001"])

        let phone = try #require(read.user("fbPhone0005"))
        #expect(phone.otherMethods == ["phone"])
        #expect(phone.email == nil)
        #expect(phone.emailVerified == nil)

        let microsoft = try #require(read.user("fbMicrosoft0006"))
        #expect(microsoft.identities.map(\.provider) == ["microsoft"])
        #expect(microsoft.otherMethods == ["yahoo.com"])
    }

    @Test("the CSV export (52 columns, firebase-tools 15.19.0 on) reads as the JSON one: quoted names and claims, Apple from column 28")
    func csv() throws {
        let read = try FirebaseExport.read(ImportFixtures.data("firebase-users.csv"))
        #expect(read.problems.isEmpty)
        #expect(read.users.map(\.id) == ["fbApple0001", "fbGoogle0002", "fbPassword0003", "fbDisabled0004", "fbPhone0005", "fbMicrosoft0006"])
        let json = try FirebaseExport.read(ImportFixtures.data("firebase-users.json"))
        for id in ["fbApple0001", "fbDisabled0004", "fbPhone0005"] {
            let fromCSV = try #require(read.user(id))
            let fromJSON = try #require(json.user(id))
            #expect(fromCSV.identities.map(\.subject) == fromJSON.identities.map(\.subject), "\(id)")
            #expect(fromCSV.identities.map(\.provider) == fromJSON.identities.map(\.provider), "\(id)")
            #expect(fromCSV.disabled == fromJSON.disabled, "\(id)")
            #expect(fromCSV.createdAt == fromJSON.createdAt, "\(id)")
            #expect(fromCSV.otherMethods == fromJSON.otherMethods, "\(id)")
        }
        let google = try #require(read.user("fbGoogle0002"))
        #expect(google.displayName == "Example, Ann")
        #expect(google.claims == ["role": .string("admin"), "teams": .array([.string("a"), .string("b")])])
        #expect(google.identities == [SourceIdentity(provider: "google", subject: "109876543210987654321", email: "ann@example.com")])
        #expect(try #require(read.user("fbMicrosoft0006")).identities.map(\.provider) == ["microsoft"])
        #expect(try #require(read.user("fbMicrosoft0006")).otherMethods == ["yahoo.com"])
        #expect(try #require(read.user("fbPassword0003")).otherMethods == ["password"])
    }

    @Test("a CSV export of the 28 columns before 15.19.0, with no Apple-looking user, reads")
    func oldCSV() throws {
        let read = try FirebaseExport.read(ImportFixtures.data("firebase-old-users.csv"))
        #expect(read.problems.isEmpty)
        #expect(read.users.map(\.id) == ["fbGoogle0002", "fbPassword0003", "fbDisabled0004"])
        #expect(try #require(read.user("fbDisabled0004")).identities.map(\.provider) == ["x", "github"])
    }

    @Test("an export made before firebase-tools 15.19.0 with Apple users in it (relay address, no identity) is refused with how to export again")
    func oldExportWithAppleUsers() throws {
        for name in ["firebase-old-apple.json", "firebase-old-apple.csv"] {
            let data = try ImportFixtures.data(name)
            let message = ImportFixtures.refusal { () throws(ImportSourceError) in try FirebaseExport.read(data) }
            #expect(message.contains("older than 15.19.0"), "\(name)")
            #expect(message.contains("0YPO0atCUVaeP8gTIZVDn4oZxIZ2"), "\(name)")
            #expect(message.contains("npm install -g firebase-tools@latest"), "\(name)")
            #expect(message.contains("firebase auth:export users.json --format=json --project ID"), "\(name)")
            #expect(!message.contains("privaterelay"), "no address in the message: \(name)")
        }
    }

    @Test("a relay address without an Apple identity is no old export when the file has identities only new exports keep")
    func relayAddressInNewExport() throws {
        let json =
            #"{"users": [{"localId": "a", "email": "r@privaterelay.appleid.com", "passwordHash": "aGFzaA==", "providerUserInfo": []}, {"localId": "b", "providerUserInfo": [{"providerId": "apple.com", "rawId": "001.x.2"}]}]}"#
        let read = try FirebaseExport.read(Data(json.utf8))
        #expect(read.users.map(\.id) == ["a", "b"])
    }

    @Test("records that are no user are problems and the rest is read")
    func malformedRecords() throws {
        let read = try FirebaseExport.read(ImportFixtures.data("firebase-malformed.json"))
        #expect(read.users.map(\.id) == ["fbGood"])
        #expect(read.problems.map(\.sourceID) == [nil, "fbBadVerified", "fbBadClaims", "fbBadProvider", nil])
        #expect(read.problems[0].reason.contains("no localId"))
        #expect(read.problems[1].reason.contains("emailVerified"))
        #expect(read.problems[2].reason.contains("customAttributes"))
        #expect(read.problems[3].reason.contains("rawId"))
        #expect(read.problems[4].reason.contains("not an object"))
    }

    @Test("a CSV row firebase-tools wrote with an unescaped quote in the name is a problem; the other rows read")
    func quoteInName() throws {
        let read = try FirebaseExport.read(ImportFixtures.data("firebase-quote-in-name.csv"))
        #expect(read.users.map(\.id) == ["fbGoogle0002"])
        #expect(read.problems.map(\.sourceID) == ["fbQuoted0007"])
        #expect(read.problems.first?.reason.contains("row 2 is not CSV") == true)
        #expect(read.problems.first?.reason.contains("quotation") == false)
    }

    @Test("a name starting with a quote that never closes costs its own row only, not the rows after it")
    func openQuote() throws {
        let open = #"u0,a@example.com,true,,,"Ann,,,,,,,,,,,,,,,,,,1650000000000,,,false,,"#
        let next = "u1,b@example.com,true,,,Bob,,,,,,,,,,,,,,,,,,1650000000000,,,false,,"
        let read = try FirebaseExport.read(Data((open + "\n" + next + "\n").utf8))
        #expect(read.users.map(\.id) == ["u1"])
        #expect(read.problems.map(\.sourceID) == ["u0"])
    }

    @Test("CSV rows of the wrong width or values are problems")
    func badCSVRows() throws {
        let good = "u1,a@example.com,true,,,,,,,,,,,,,,,,,,,,,1650000000000,,,false,,"
        let narrow = "u2,b@example.com,true,,,"
        let badDate = "u3,c@example.com,true,,,,,,,,,,,,,,,,,,,,,yesterday,,,false,,"
        let badFlag = "u4,d@example.com,maybe,,,,,,,,,,,,,,,,,,,,,1650000000000,,,false,,"
        let read = try FirebaseExport.read(Data([good, narrow, badDate, badFlag, ""].joined(separator: "\n").utf8))
        #expect(read.users.map(\.id) == ["u1"])
        #expect(read.problems.map(\.sourceID) == ["u2", "u3", "u4"])
        #expect(read.problems[0].reason.contains("columns"))
    }

    @Test("a file that is no Firebase export is refused with how to make one")
    func notAnExport() throws {
        let cases: [(String, Data)] = [
            ("truncated JSON", try ImportFixtures.data("firebase-truncated.json")),
            ("JSON without users", Data(#"{"accounts": []}"#.utf8)),
            ("empty", Data("  \n".utf8)),
            ("other CSV", Data("name,email\nAnn,ann@example.com\n".utf8)),
            ("binary", Data([0xFF, 0xFE, 0x00, 0x41])),
        ]
        for (what, data) in cases {
            let message = ImportFixtures.refusal { () throws(ImportSourceError) in try FirebaseExport.read(data) }
            #expect(message.contains("firebase auth:export users.json --format=json --project ID"), "\(what): \(message)")
        }
    }
}
