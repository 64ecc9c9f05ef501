import AsyncHTTPClient
import Foundation
import LatchkeyCore
import LatchkeyImport
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders
import LatchkeyServer
import LatchkeyTestSupport
import NIOCore
import Testing

/// An App Store app transfer (Apple's TN3159) end to end against the emulator: the sending team prepares, the app
/// moves, users who sign in within the window move themselves, `complete` moves the rest.
@Suite("Server: Apple app transfer")
struct AppleTransferTests {
    static let recipient = "RECIPIENT1"

    /// The transfer run of `server`'s Apple provider, unpaced.
    static func run(_ server: LatchkeyServer) throws -> AppleTransferRun {
        let apple = try #require(server.providers["apple"] as? AppleIdentityProvider)
        return AppleTransferRun(client: apple.client, clientID: Fixtures.bundleID, store: server.store, transfers: server.sessions.transfers, pace: .zero)
    }

    /// Moves the fixtures' app to the recipient team at the emulator; the Apple settings of the recipient's server.
    static func transferApp(_ harness: ServerHarness) async throws -> [String: String] {
        let answer = try await harness.emulator.send(
            "POST", "/emulator/apple/transfers", json: ["clientId": Fixtures.bundleID, "toTeamId": Self.recipient])
        #expect(answer.status == 201, "\(answer.text)")
        let keyFile = NSTemporaryDirectory() + "recipient-\(UUID().uuidString).p8"
        try Data(try #require(answer.json["privateKey"] as? String).utf8).write(to: URL(fileURLWithPath: keyFile))
        return [
            "apple.teamId": try #require(answer.json["teamId"] as? String), "apple.keyId": try #require(answer.json["keyId"] as? String),
            "apple.privateKeyFile": keyFile,
        ]
    }

    /// `POST /v1/auth/apple` at `base` with a fresh native sign-in of the emulator user `sub`.
    static func signIn(_ harness: ServerHarness, at base: String, sub: String, withCode: Bool = false) async throws -> ServerHarness.Answer {
        let nonce = "nonce-\(UUID().uuidString)"
        let apple = try await harness.emulator.nativeSignIn(sub: sub, nonce: sha256Hex(nonce))
        // The harness's clock stands still unless moved; the emulator's tokens carry the real time (and its offset), so
        // a long test keeps the server's clock up with them.
        harness.clock.advance(max(0, Date().timeIntervalSince(harness.clock.now) - 30))
        var body: [String: any Sendable] = ["identityToken": apple.identityToken, "rawNonce": nonce]
        if withCode { body["authorizationCode"] = apple.code }
        var request = HTTPClientRequest(url: base + "/v1/auth/apple")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        let response = try await harness.http.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return ServerHarness.Answer(status: Int(response.status.code), headers: [:], body: Array(buffer: bytes))
    }

    @Test(
        "1,000 Apple users: half sign in within the window and move, complete moves the rest; none duplicated, each deletable; grants revoked under the recipient's secret"
    )
    func thousandUsers() async throws {
        try await ServerHarness.with { harness in
            // 1,000 users Latchkey knows from an import, and two who signed in with a code under the sending team.
            let batch = try await harness.emulator.send("POST", "/emulator/users/batch", json: ["count": 1000])
            let subs = try #require((batch.json["users"] as? [[String: Any]])?.compactMap { $0["sub"] as? String })
            #expect(subs.count == 1000)
            let source = subs.enumerated().map { SourceUser(id: "u\($0.offset)", identities: [SourceIdentity(provider: "apple", subject: $0.element)]) }
            #expect(try await UserImporter(store: harness.store).run(SourceRead(users: source), options: .init(source: .firebase)).summary.imported == 1000)
            let (codedSub, coded) = try await harness.signedIn(email: "coded@example.com")
            let (_, staying) = try await harness.signedIn(email: "staying@example.com")
            let codedIdentity = try #require(try await harness.store.identities(userID: coded.user.id).first?.id)
            #expect(try await harness.store.providerGrant(identityID: codedIdentity) != nil)

            // The sending team prepares: never with its own id as the target.
            let sending = try Self.run(harness.server)
            await #expect(throws: LatchkeyError.self) { _ = try await sending.prepare(targetTeam: Fixtures.teamID, dryRun: false) }
            #expect(try await sending.prepare(targetTeam: Self.recipient, dryRun: true).done == 1002)
            #expect(try await harness.store.appleTransferSummary().prepared == 0)
            let prepared = try await sending.prepare(targetTeam: Self.recipient, dryRun: false)
            #expect(prepared.done == 1002 && prepared.refused.isEmpty)
            // Resumable: a second run has nothing left to do.
            #expect(try await sending.prepare(targetTeam: Self.recipient, dryRun: false).done == 0)

            // The app moves; the server restarts with the recipient team's settings.
            let recipient = try await harness.secondServer(apple: try await Self.transferApp(harness))
            do {
                // Half the imported users sign in within the window, eight at a time: each lands on their own user.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for lane in 0..<8 {
                        group.addTask {
                            for index in stride(from: lane, to: 500, by: 8) {
                                let answer = try await Self.signIn(harness, at: recipient.baseURL, sub: subs[index])
                                #expect(answer.status == 200, "\(answer.text)")
                                let signedIn = try answer.decode(SignInResponse.self)
                                #expect(signedIn.user.id == "u\(index)" && !signedIn.isNewUser)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                // A user who signs in with a code under the new team brings a grant the recipient can revoke.
                let codedAgain = try await Self.signIn(harness, at: recipient.baseURL, sub: codedSub, withCode: true)
                #expect(try codedAgain.decode(SignInResponse.self).user.id == coded.user.id)
                var summary = try await harness.store.appleTransferSummary()
                #expect((summary.moved, summary.left) == (501, 501))
                #expect(summary.windowEndsAt != nil)

                // complete moves the rest: the sending team's grant could not move, so it is marked missing.
                let completed = try await Self.run(recipient.server).complete(dryRun: false)
                #expect(completed.done == 501 && completed.refused.isEmpty)
                #expect(try await Self.run(recipient.server).complete(dryRun: false).done == 0)
                summary = try await harness.store.appleTransferSummary()
                #expect((summary.moved, summary.left, summary.appleIdentities) == (1002, 0, 1002))
                let stayingIdentity = try #require(try await harness.store.identities(userID: staying.user.id).first?.id)
                #expect(try await harness.store.providerGrant(identityID: stayingIdentity) == nil)
                #expect(try await harness.store.appleIdentitiesWithoutGrant() == 1001)

                // None duplicated: each identity is now under the recipient team's subject, on its own user.
                #expect(try await harness.store.users(limit: 5000).count == 1002)
                for index in [0, 499, 500, 999] {
                    let answer = try await Self.signIn(harness, at: recipient.baseURL, sub: subs[index])
                    #expect(try answer.decode(SignInResponse.self).user.id == "u\(index)")
                }
                let transferred = try await harness.store.webhookDeliveries(status: nil, limit: 10).count
                #expect(transferred == 0)  // no endpoint configured: nothing owed

                // Each deletable: the coded user's grant is revoked at Apple under the recipient team's secret.
                let report = try #require(try await recipient.server.sessions.administration.deleteUser(id: coded.user.id, by: .cli))
                #expect((report.revoked, report.queued) == (1, 0))
                let revocations = try await harness.emulator.requestLog().filter { $0["endpoint"] as? String == "/auth/revoke" }
                #expect(revocations.last?["status"] as? Int == 200)
                for index in [0, 750] {
                    let deleted = try #require(try await recipient.server.sessions.administration.deleteUser(id: "u\(index)", by: .cli))
                    #expect((deleted.revoked, deleted.queued) == (0, 0))
                }
                #expect(try await harness.store.users(limit: 5000).count == 999)
            } catch {
                await recipient.stop()
                throw error
            }
            await recipient.stop()
        }
    }

    @Test("after the window, an Apple account Latchkey does not know is refused while users are left unmoved, naming the fix; close lets it sign up")
    func afterTheWindow() async throws {
        let endpoint = WebhookEndpoint(url: "https://backend.example/h", secret: Secret(WebhookEndpoint.generateSecret()))
        try await ServerHarness.with(configure: { $0.webhooks = [endpoint] }) { harness in
            let (movingSub, moving) = try await harness.signedIn(email: "moving@example.com")
            let (leftSub, left) = try await harness.signedIn(email: "left@example.com")
            #expect(try await Self.run(harness.server).prepare(targetTeam: Self.recipient, dryRun: false).done == 2)
            let recipient = try await harness.secondServer(apple: try await Self.transferApp(harness)) { $0.webhooks = [endpoint] }
            do {
                let moved = try await Self.signIn(harness, at: recipient.baseURL, sub: movingSub)
                #expect(try moved.decode(SignInResponse.self).user.id == moving.user.id)
                let events = try await harness.store.webhookDeliveries(status: nil, limit: 50).filter { $0.kind == "identity.transferred" }
                #expect(events.count == 1 && events.first?.userID == moving.user.id)
                #expect(events.first?.payload.contains("\"oldSubject\":\"\(movingSub)\"") == true)
                #expect(try await harness.store.auditEvents(userID: moving.user.id, limit: 20).contains { $0.kind == "apple_identity_transferred" })

                // 61 days on, at Apple and here: transfer_sub is gone, and the left user's new subject is unknown.
                _ = try await harness.emulator.send("POST", "/emulator/clock", json: ["offsetSeconds": 61 * 86_400])
                harness.clock.advance(61 * 86_400)
                let refused = try await Self.signIn(harness, at: recipient.baseURL, sub: leftSub)
                #expect((refused.status, refused.error) == (403, "apple_transfer_incomplete"))
                #expect(refused.json["error_description"].map { "\($0)" }?.contains("latchkey apple transfer") == true)
                // The moved user still signs in.
                #expect(try await Self.signIn(harness, at: recipient.baseURL, sub: movingSub).status == 200)
                #expect(try await harness.store.closeAppleTransfers(at: harness.clock.now) == 1)
                harness.clock.advance(120)
                let after = try await Self.signIn(harness, at: recipient.baseURL, sub: leftSub)
                #expect(after.status == 200, "\(after.text)")
                #expect(try after.decode(SignInResponse.self).user.id != left.user.id)
            } catch {
                await recipient.stop()
                throw error
            }
            await recipient.stop()
        }
    }
}
