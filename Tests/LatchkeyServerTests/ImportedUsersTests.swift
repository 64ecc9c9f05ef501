import Foundation
import LatchkeyCore
import LatchkeyImport
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyServer
import LatchkeyTestSupport
import Logging
import Testing

/// Users brought in by `latchkey users import` sign in as themselves; disabled users cannot, until enabled.
@Suite("Server: imported and disabled users")
struct ImportedUsersTests {
    @Test("an imported user's Apple and Google sign-ins land on the imported id (isNewUser false); the admin API shows importedFrom and appleGrant")
    func importedSignIns() async throws {
        try await ServerHarness.with { harness in
            let made = try await harness.emulator.createUserAnswer(["email": "ann@example.com"])
            let appleSub = try #require(made["sub"] as? String)
            let googleSub = try #require((made["subjects"] as? [String: Any])?["google"] as? String)
            let source = SourceUser(
                id: "firebase-uid-1", email: "ann@example.com", emailVerified: true,
                identities: [SourceIdentity(provider: "apple", subject: appleSub), SourceIdentity(provider: "google", subject: googleSub)])
            let report = try await UserImporter(store: harness.store).run(SourceRead(users: [source]), options: .init(source: .firebase))
            #expect(report.summary.imported == 1)

            let (_, admin) = try await AdminKeys(store: harness.store).create(name: "backend", readOnly: true)
            var shown = try await harness.send("GET", "/admin/v1/users/firebase-uid-1", bearer: admin).decode(AdminUserResponse.self)
            #expect(shown.importedFrom?.source == "firebase" && shown.importedFrom?.id == "firebase-uid-1")
            #expect(shown.identities.first { $0.provider == "apple" }?.appleGrant == "missing")
            #expect(shown.identities.first { $0.provider == "google" }?.appleGrant == nil)

            let apple = try await harness.signIn(sub: appleSub)
            #expect(apple.status == 200, "\(apple.text)")
            let signedIn = try apple.decode(SignInResponse.self)
            #expect(signedIn.user.id == "firebase-uid-1" && !signedIn.isNewUser)
            #expect(try AdminAPITests.claims(signedIn.accessToken)["sub"] as? String == "firebase-uid-1")
            // The sign-in with a code brought the Apple grant the import could not.
            shown = try await harness.send("GET", "/admin/v1/users/firebase-uid-1", bearer: admin).decode(AdminUserResponse.self)
            #expect(shown.identities.first { $0.provider == "apple" }?.appleGrant == nil)

            let google = try await harness.googleSignIn(email: "ann@example.com")
            try await harness.expectReturningUser(google, signedIn)
        }
    }

    @Test("disable ends every session and refuses sign-in (403 account_disabled) with user.disabled; enable lets the user back with user.enabled")
    func disableAndEnable() async throws {
        let secret = WebhookEndpoint.generateSecret()
        try await ServerHarness.with(configure: { $0.webhooks = [WebhookEndpoint(url: "https://backend.example/hooks", secret: Secret(secret))] }) {
            harness in
            let (sub, tokens) = try await harness.signedIn()
            let userID = tokens.user.id
            let admin = AdminKeys(store: harness.store)
            let (_, writer) = try await admin.create(name: "backend", readOnly: false)
            let (_, reader) = try await admin.create(name: "support", readOnly: true)

            #expect(try await harness.send("POST", "/admin/v1/users/\(userID)/disable", bearer: reader).status == 403)
            #expect(try await harness.send("POST", "/admin/v1/users/nobody/disable", bearer: writer).status == 404)
            let disabled = try await harness.send("POST", "/admin/v1/users/\(userID)/disable", bearer: writer)
            #expect(disabled.status == 200, "\(disabled.text)")
            #expect(try disabled.decode(AdminUserDisable.self) == AdminUserDisable(userId: userID, disabled: true, changed: true, sessionsRevoked: 1))
            #expect(try await harness.refresh(tokens.refreshToken).status == 400)
            let refused = try await harness.signIn(sub: sub)
            #expect((refused.status, refused.error) == (403, "account_disabled"))
            #expect(try await harness.send("GET", "/admin/v1/users/\(userID)", bearer: reader).json["disabledAt"] != nil)
            let twice = try await harness.send("POST", "/admin/v1/users/\(userID)/disable", bearer: writer).decode(AdminUserDisable.self)
            #expect(!twice.changed)

            let enabled = try await harness.send("POST", "/admin/v1/users/\(userID)/enable", bearer: writer).decode(AdminUserDisable.self)
            #expect(enabled == AdminUserDisable(userId: userID, disabled: false, changed: true, sessionsRevoked: 0))
            let back = try await harness.signIn(sub: sub)
            try await harness.expectReturningUser(back, tokens)

            let kinds = try await harness.store.webhookDeliveries(status: nil, limit: 100).filter { $0.userID == userID }.map(\.kind)
            #expect(kinds.filter { $0 == "user.disabled" }.count == 1 && kinds.filter { $0 == "user.enabled" }.count == 1)
            let audits = try await harness.store.auditEvents(userID: userID, limit: 50).map(\.kind)
            #expect(audits.contains("admin_user_disabled") && audits.contains("admin_user_enabled"))
        }
    }
}

/// Each source's fixture, imported, then signed in to through the emulator with the subjects it holds.
@Suite("Server: users imported from each source sign in as themselves")
struct ImportedFixtureSignInTests {
    static func fixture(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("LatchkeyImportTests/Fixtures/\(name)").path
    }

    @Test(
        "an imported user's Apple and Google sign-ins land on the imported id with isNewUser false",
        arguments: [
            (ImportSource.firebase, ["firebase-users.json"]), (.auth0, ["auth0-users.ndjson.gz"]),
            (.cognito, ["cognito-users-page1.json", "cognito-users-page2.json"]),
        ])
    func signsIn(source: ImportSource, files: [String]) async throws {
        let read = try await SourceReader.read(source, paths: files.map(Self.fixture), logger: Logger(label: "test"))
        try await ServerHarness.with { harness in
            let report = try await UserImporter(store: harness.store).run(read, options: .init(source: source))
            #expect(report.summary.imported > 0)
            var checked = 0
            for provider in ["apple", "google"] {
                guard let entry = report.users.first(where: { $0.outcome == .imported && $0.identities.contains { $0.hasPrefix(provider + ":") } }),
                    let key = entry.identities.first(where: { $0.hasPrefix(provider + ":") })
                else { continue }
                let subject = String(key.dropFirst(provider.count + 1))
                let email = "\(provider)-\(UUID().uuidString.prefix(8))@example.com"
                let made = try await harness.emulator.createUserAnswer(["email": email, "subjects": [provider: subject]])
                #expect(made["sub"] != nil)
                let answer =
                    provider == "apple"
                    ? try await harness.signIn(sub: subject) : try await harness.googleSignIn(email: email)
                #expect(answer.status == 200, "\(answer.text)")
                let signedIn = try answer.decode(SignInResponse.self)
                #expect(signedIn.user.id == entry.latchkeyId && !signedIn.isNewUser, "\(source) \(provider)")
                checked += 1
            }
            #expect(checked == 2, "\(source)'s fixture has an imported Apple and an imported Google user")
        }
    }
}
