import Foundation
import LatchkeyImport
import LatchkeyModels
import Testing

@Suite("Import: Cognito list-users output")
struct CognitoExportTests {
    static let native = "9b1c3f4e-0000-4000-8000-000000000001"

    func pages() throws -> SourceRead {
        try CognitoExport.read([ImportFixtures.data("cognito-users-page1.json"), ImportFixtures.data("cognito-users-page2.json")])
    }

    @Test("two pages: identities mapped, custom: attributes as claims, disabled, both date forms")
    func twoPages() throws {
        let read = try pages()
        #expect(read.problems.isEmpty)
        #expect(
            read.users.map(\.id) == [
                Self.native, "signinwithapple_001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456", "Facebook_1613644848950245",
                "loginwithamazon_amzn1.account.AF2EXAMPLE", "okta_00u1abcd", "bob",
            ])

        let ann = try #require(read.user(Self.native))
        #expect(ann.identities == [SourceIdentity(provider: "google", subject: "109876543210987654321")])
        #expect(ann.claims == ["plan": .string("pro"), "tenant": .string("acme")])
        #expect(ann.email == "ann@example.com")
        #expect(ann.emailVerified == true)
        #expect(ann.givenName == "Ann")
        #expect(ann.familyName == "Example")
        #expect(ann.otherMethods == ["password"])
        #expect(abs(try #require(ann.createdAt).timeIntervalSince1970 - 1_689_980_857.949) < 0.000_5)

        let apple = try #require(read.user("signinwithapple_001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456"))
        #expect(
            apple.identities == [
                SourceIdentity(provider: "apple", subject: "001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456", email: "k7qz2m4x9p@privaterelay.appleid.com")
            ])
        #expect(apple.otherMethods.isEmpty)
        #expect(apple.emailVerified == false)

        let facebook = try #require(read.user("Facebook_1613644848950245"))
        #expect(facebook.disabled)
        #expect(facebook.identities.map(\.provider) == ["facebook"])

        #expect(try #require(read.user("loginwithamazon_amzn1.account.AF2EXAMPLE")).otherMethods == ["LoginWithAmazon"])
        let okta = try #require(read.user("okta_00u1abcd"))
        #expect(okta.identities.isEmpty)
        #expect(okta.otherMethods == ["Okta"])
        #expect(okta.createdAt == Date(timeIntervalSince1970: 1_690_000_001))

        let bob = try #require(read.user("bob"))
        #expect(bob.claims == ["tier": .string("3")])
        #expect(bob.displayName == "Bob Builder")
        #expect(bob.otherMethods == ["password"])
    }

    @Test("a linked user listed twice (native and external) is one user; the external twin is folded with its reason")
    func linkedUserFolded() throws {
        let read = try pages()
        #expect(read.user("google_109876543210987654321") == nil)
        #expect(read.folded.map(\.sourceID) == ["google_109876543210987654321"])
        #expect(read.folded[0].reason.contains(Self.native))
        #expect(read.folded[0].reason.contains("Google"))
        #expect(read.users.filter { $0.identities.contains { $0.subject == "109876543210987654321" } }.count == 1)
    }

    @Test("the same pages in the other order fold the same way")
    func linkedUserFoldedEitherOrder() throws {
        let read = try CognitoExport.read([ImportFixtures.data("cognito-users-page2.json"), ImportFixtures.data("cognito-users-page1.json")])
        #expect(read.folded.map(\.sourceID) == ["google_109876543210987654321"])
        #expect(read.users.count == 6)
    }

    @Test("a user in two files is read once and the second is a problem")
    func listedTwice() throws {
        let page = try ImportFixtures.data("cognito-users-page2.json")
        let read = try CognitoExport.read([page, page])
        #expect(read.users.count == 4)
        #expect(read.problems.count == 4)
        #expect(read.problems.allSatisfy { $0.reason.contains("listed twice") })
    }

    @Test("records that are no user are problems and the rest is read")
    func malformedRecords() throws {
        let read = try CognitoExport.read([ImportFixtures.data("cognito-malformed.json")])
        #expect(read.users.map(\.id) == ["goodone"])
        #expect(read.problems.map(\.sourceID) == [nil, "badidentities", "badenabled", "baddate"])
        #expect(read.problems[0].reason.contains("Username"))
        #expect(read.problems[1].reason.contains("identities"))
        #expect(read.problems[2].reason.contains("Enabled"))
        #expect(read.problems[3].reason.contains("UserCreateDate"))
    }

    @Test("a file that is no list-users output is refused, naming the file and the command")
    func notAnExport() throws {
        let page = try ImportFixtures.data("cognito-users-page1.json")
        let other = try ImportFixtures.data("cognito-not-list-users.json")
        let message = ImportFixtures.refusal { () throws(ImportSourceError) in try CognitoExport.read([page, other]) }
        #expect(message.contains("file 2"))
        #expect(message.contains("aws cognito-idp list-users"))
        let broken = ImportFixtures.refusal { () throws(ImportSourceError) in try CognitoExport.read([Data("{\"Users\": [".utf8)]) }
        #expect(broken.contains("not valid JSON"))
    }
}
