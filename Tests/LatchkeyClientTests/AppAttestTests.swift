import Crypto
import Foundation
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyTestSupport
import Testing

@testable import LatchkeyClient

/// App Attest as DeviceCheck's service behaves, scripted: keys `key-1`, `key-2`, …, and the errors given, in order,
/// per operation.
final class FakeAppAttestService: AppAttestService, @unchecked Sendable {
    // @unchecked: every field is only used while holding `lock`.
    private let lock = NSLock()
    private var supported: Bool
    private var keys = 0
    private var scripted: [String: [any Error]] = [:]
    private var log: [String] = []
    private var hashes: [Data] = []

    init(supported: Bool = true) { self.supported = supported }

    /// The calls so far: `generateKey`, `attest key-1`, `assert key-1`.
    var calls: [String] { lock.withLock { log } }
    /// The client data hash of each attest and assert call.
    var clientDataHashes: [Data] { lock.withLock { hashes } }

    /// The next calls of `operation` (`generateKey`, `attest`, `assert`) throw `errors`, one each.
    func fail(_ operation: String, with errors: [any Error]) { lock.withLock { scripted[operation, default: []] += errors } }

    var isSupported: Bool { lock.withLock { supported } }

    private func call(_ operation: String, _ entry: String, hash: Data?) throws {
        let error = lock.withLock { () -> (any Error)? in
            log.append(entry)
            if let hash { hashes.append(hash) }
            guard var errors = scripted[operation], !errors.isEmpty else { return nil }
            let error = errors.removeFirst()
            scripted[operation] = errors
            return error
        }
        if let error { throw error }
    }

    func generateKey() async throws -> String {
        try call("generateKey", "generateKey", hash: nil)
        return lock.withLock {
            keys += 1
            return "key-\(keys)"
        }
    }

    func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try call("attest", "attest \(keyId)", hash: clientDataHash)
        return Data("attestation of \(keyId)".utf8)
    }

    func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try call("assert", "assert \(keyId)", hash: clientDataHash)
        return Data("assertion by \(keyId)".utf8)
    }
}

@Suite("Client: App Attest at sign-in")
struct AppAttestTests {
    /// A client with App Attest through `service` and a DPoP key (unless `dpop` is false), its items in memory.
    static func client(_ fixture: Fixture, _ service: FakeAppAttestService, dpop: Bool = true) throws -> (LatchkeyClient, thumbprint: String?) {
        let key = SoftwareDeviceKey(key: SoftwareSigningKey())
        let client = fixture.client(
            store: InMemoryTokenStore(), deviceBinding: dpop ? .dpop(key: key) : .none, appAttest: .enabled(service: service),
            installItems: MemoryInstallItems())
        return (client, dpop ? DPoPProofCheck.thumbprint(of: try P256.Signing.PublicKey(rawRepresentation: key.publicKey)) : nil)
    }

    /// Signs in with Apple as `user` and returns the body's `appAttest` member (nil when it has none), then signs out.
    static func signIn(_ client: LatchkeyClient, _ fixture: Fixture, user: String = "user-1") async throws -> [String: String]? {
        try await client.signInWithApple(identityToken: user, authorizationCode: nil, rawNonce: "n")
        let body = fields(await fixture.server.signInBodies["apple"])
        #expect(body["identityToken"] as? String == user, "the appAttest member goes beside the sign-in's own fields")
        await client.signOut()
        await client.background.finish()
        return body["appAttest"] as? [String: String]
    }

    static func sha256(_ text: String) -> Data { Data(SHA256.hash(data: Data(text.utf8))) }

    @Test("the install's first sign-in attests a new key over SHA-256(challenge.thumbprint); later sign-ins assert with it")
    func attestThenAssert() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService()
        let (client, thumbprint) = try Self.client(fixture, service)
        let first = try #require(try await Self.signIn(client, fixture))
        let challenge = try #require(first["challenge"])
        #expect(challenge.hasPrefix("attest-challenge-"))
        #expect(first == ["keyId": "key-1", "attestation": Data("attestation of key-1".utf8).base64EncodedString(), "challenge": challenge])
        #expect(service.clientDataHashes == [Self.sha256(challenge + "." + (thumbprint ?? "-"))])

        let second = try #require(try await Self.signIn(client, fixture, user: "user-2"))
        let next = try #require(second["challenge"])
        #expect(next != challenge)
        #expect(second == ["keyId": "key-1", "assertion": Data("assertion by key-1".utf8).base64EncodedString(), "challenge": next])
        #expect(service.calls == ["generateKey", "attest key-1", "assert key-1"])
        #expect(service.clientDataHashes.last == Self.sha256(next + "." + (thumbprint ?? "-")))
        // The challenge came from the server each time, with a DPoP proof like every request to it.
        #expect(await fixture.server.attestChallenges == 2)
        let challenges = await fixture.server.requests.filter { $0.url?.path == "/v1/attest/challenge" }
        #expect(challenges.count == 2 && challenges.allSatisfy { $0.value(forHTTPHeaderField: "DPoP") != nil && $0.httpMethod == "POST" })
    }

    @Test("without a DPoP key the client data is SHA-256 of the challenge alone")
    func withoutDPoP() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService()
        let (client, _) = try Self.client(fixture, service, dpop: false)
        let evidence = try #require(try await Self.signIn(client, fixture))
        #expect(service.clientDataHashes == [Self.sha256(try #require(evidence["challenge"]))])
    }

    @Test("where App Attest is unsupported, no challenge is asked and no appAttest is sent; .disabled does nothing either")
    func unsupported() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService(supported: false)
        let (client, _) = try Self.client(fixture, service)
        #expect(try await Self.signIn(client, fixture) == nil)
        let disabled = fixture.client(store: InMemoryTokenStore(), appAttest: .disabled)
        #expect(try await Self.signIn(disabled, fixture) == nil)
        #expect(service.calls.isEmpty)
        #expect(await fixture.server.attestChallenges == 0)
    }

    @Test("throttled (serverUnavailable): the sign-in goes without, the next ones wait out a back-off that doubles, then the same key is attested")
    func throttled() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService()
        service.fail("attest", with: [AppAttestServiceError.serverUnavailable, NSError(domain: "com.apple.devicecheck.error", code: 4)])
        let (client, _) = try Self.client(fixture, service)
        #expect(try await Self.signIn(client, fixture) == nil)
        #expect(service.calls == ["generateKey", "attest key-1"])
        // Within the first minute: no call at all.
        fixture.clock.advance(59)
        #expect(try await Self.signIn(client, fixture) == nil)
        #expect(service.calls.count == 2)
        fixture.clock.advance(2)
        #expect(try await Self.signIn(client, fixture) == nil)
        #expect(service.calls == ["generateKey", "attest key-1", "attest key-1"])
        // Two minutes after the second failure, not one.
        fixture.clock.advance(61)
        #expect(try await Self.signIn(client, fixture) == nil)
        #expect(service.calls.count == 3)
        fixture.clock.advance(60)
        let evidence = try #require(try await Self.signIn(client, fixture))
        #expect(evidence["keyId"] == "key-1" && evidence["attestation"] != nil)
        #expect(service.calls == ["generateKey", "attest key-1", "attest key-1", "attest key-1"])
        // Accepted: the failures are forgotten, and the next sign-in asserts at once.
        #expect(try await Self.signIn(client, fixture)?["assertion"] != nil)
    }

    @Test("the server refusing the attestation (invalid_attestation) fails the sign-in; the next sign-in attests a new key")
    func refusedByTheServer() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService()
        let (client, _) = try Self.client(fixture, service)
        await fixture.server.set(refusesAttestation: true)
        let error = await #expect(throws: LatchkeyClientError.rejected) {
            try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        }
        #expect(error?.statusCode == 401 && error?.serverError?.error == "invalid_attestation")
        #expect(client.currentAccessToken == nil)
        await fixture.server.set(refusesAttestation: false)
        let evidence = try #require(try await Self.signIn(client, fixture))
        #expect(evidence["keyId"] == "key-2" && evidence["attestation"] != nil)
        #expect(service.calls == ["generateKey", "attest key-1", "generateKey", "attest key-2"])
        // A refused assertion too.
        await fixture.server.set(refusesAttestation: true)
        await #expect(throws: LatchkeyClientError.rejected) {
            try await client.signInWithApple(identityToken: "user-1", authorizationCode: nil, rawNonce: "n")
        }
        await fixture.server.set(refusesAttestation: false)
        #expect(try await Self.signIn(client, fixture)?["keyId"] == "key-3")
    }

    @Test("an invalid key (DCError 3) is dropped: after the back-off a new key is made and attested")
    func invalidKey() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService()
        let (client, _) = try Self.client(fixture, service)
        #expect(try await Self.signIn(client, fixture)?["attestation"] != nil)
        service.fail("assert", with: [NSError(domain: "com.apple.devicecheck.error", code: 3)])
        #expect(try await Self.signIn(client, fixture) == nil)
        fixture.clock.advance(61)
        let evidence = try #require(try await Self.signIn(client, fixture))
        #expect(evidence["keyId"] == "key-2" && evidence["attestation"] != nil)
        #expect(service.calls == ["generateKey", "attest key-1", "assert key-1", "generateKey", "attest key-2"])
    }

    @Test("two sign-ins at once make one key")
    func concurrentSignIns() async throws {
        let fixture = Fixture()
        let service = FakeAppAttestService()
        let (client, _) = try Self.client(fixture, service)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for user in ["user-1", "user-2"] {
                group.addTask { try await client.signInWithApple(identityToken: user, authorizationCode: nil, rawNonce: "n") }
            }
            try await group.waitForAll()
        }
        #expect(service.calls.filter { $0 == "generateKey" }.count == 1)
        #expect(service.calls.count == 3)
    }

    @Test(
        "what to do before a sign-in",
        arguments: [
            (AppAttestState(), true, AppAttestDecisions.Step.generateKey), (AppAttestState(), false, .skip),
            (AppAttestState(keyID: "k"), true, .attest(keyID: "k")), (AppAttestState(keyID: "k", attested: true), true, .assert(keyID: "k")),
            (AppAttestState(keyID: "k", attested: true), false, .skip),
            (AppAttestState(keyID: "k", failures: 1, retryAfter: Date(timeIntervalSince1970: 1001)), true, .skip),
            (AppAttestState(keyID: "k", failures: 1, retryAfter: Date(timeIntervalSince1970: 1000)), true, .attest(keyID: "k")),
        ] as [(AppAttestState, Bool, AppAttestDecisions.Step)])
    func steps(state: AppAttestState, supported: Bool, expected: AppAttestDecisions.Step) {
        #expect(AppAttestDecisions.step(state, isSupported: supported, now: Date(timeIntervalSince1970: 1000)) == expected)
    }

    @Test("failures: serverUnavailable keeps the key, any other drops it; the wait doubles from a minute up to a day")
    func failures() {
        let now = Date(timeIntervalSince1970: 0)
        var state = AppAttestState(keyID: "k", attested: true)
        var waits: [TimeInterval] = []
        for _ in 0..<13 {
            state = AppAttestDecisions.failed(state, .serverUnavailable, now: now, policy: AppAttestPolicy())
            waits.append(state.retryAfter?.timeIntervalSince(now) ?? -1)
        }
        #expect(waits == [60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 30720, 61440, 86400, 86400])
        #expect(state.keyID == "k" && state.attested)
        for error in [AppAttestServiceError.invalidKey, .invalidInput, .unknownSystemFailure, .featureUnsupported] {
            let dropped = AppAttestDecisions.failed(AppAttestState(keyID: "k", attested: true), error, now: now, policy: AppAttestPolicy())
            #expect(dropped.keyID == nil && !dropped.attested && dropped.failures == 1)
        }
    }

    @Test("the server's answer: an accepted attestation makes later sign-ins assert; invalid_attestation forgets the key; others change nothing")
    func answers() {
        let attestation = AppAttestEvidence(keyId: "k", attestation: "a", challenge: "c")
        let assertion = AppAttestEvidence(keyId: "k", assertion: "s", challenge: "c")
        let fresh = AppAttestState(keyID: "k", failures: 2, retryAfter: Date(timeIntervalSince1970: 5))
        #expect(AppAttestDecisions.answered(fresh, evidence: attestation, status: 200, error: nil) == AppAttestState(keyID: "k", attested: true))
        #expect(
            AppAttestDecisions.answered(fresh, evidence: attestation, status: 401, error: "invalid_attestation")
                == AppAttestState(failures: 2, retryAfter: Date(timeIntervalSince1970: 5)))
        #expect(AppAttestDecisions.answered(fresh, evidence: attestation, status: 401, error: "invalid_token") == fresh)
        #expect(AppAttestDecisions.answered(fresh, evidence: attestation, status: 503, error: nil) == fresh)
        let attested = AppAttestState(keyID: "k", attested: true)
        #expect(AppAttestDecisions.answered(attested, evidence: assertion, status: 401, error: "invalid_attestation") == AppAttestState())
        // An answer about another key than the one kept now (made meanwhile) changes nothing.
        #expect(AppAttestDecisions.answered(AppAttestState(keyID: "other"), evidence: attestation, status: 200, error: nil) == AppAttestState(keyID: "other"))
    }

    @Test(
        "DeviceCheck's errors by their code; anything else is unknownSystemFailure",
        arguments: [
            (NSError(domain: "com.apple.devicecheck.error", code: 4), AppAttestServiceError.serverUnavailable),
            (NSError(domain: "com.apple.devicecheck.error", code: 3), .invalidKey), (NSError(domain: "com.apple.devicecheck.error", code: 2), .invalidInput),
            (NSError(domain: "com.apple.devicecheck.error", code: 1), .featureUnsupported),
            (NSError(domain: "com.apple.devicecheck.error", code: 99), .unknownSystemFailure),
            (NSError(domain: NSURLErrorDomain, code: 4), .unknownSystemFailure),
        ] as [(NSError, AppAttestServiceError)])
    func serviceErrors(error: NSError, expected: AppAttestServiceError) {
        #expect(AppAttestServiceError(error) == expected)
        #expect(AppAttestServiceError(AppAttestServiceError(error)) == expected)
    }

    @Test("the state survives the process in the install's items; one that does not decode starts afresh")
    func statePersists() async throws {
        let items = MemoryInstallItems()
        let clock = MutableClock(Date(timeIntervalSince1970: 1_750_000_000))
        let service = FakeAppAttestService()
        service.fail("attest", with: [AppAttestServiceError.serverUnavailable])
        let first = AppAttestor(service: service, items: items, clock: clock)
        #expect(await first.evidence(dpopThumbprint: nil) { "c-1" } == nil)
        // Another launch: the key and the back-off are remembered.
        let second = AppAttestor(service: service, items: items, clock: clock)
        #expect(try await second.load() == AppAttestState(keyID: "key-1", failures: 1, retryAfter: clock.now.addingTimeInterval(60)))
        #expect(await second.evidence(dpopThumbprint: nil) { "c-2" } == nil)
        clock.advance(60)
        #expect(await second.evidence(dpopThumbprint: nil) { "c-3" }?.keyId == "key-1")
        try items.replace(AppAttestor.itemName, with: Data("not json".utf8))
        #expect(try await second.load() == AppAttestState())
        #expect(service.calls == ["generateKey", "attest key-1", "attest key-1"])
    }
}
