import Foundation
import LatchkeyModels
import Testing

@testable import LatchkeyClient

/// The decisions of the platform passkey authenticator, made in platform-neutral code.
@Suite("Client: passkey options and answers for the platform")
struct PasskeyWireTests {
    static let creation = PublicKeyCredentialCreationOptionsJSON(
        rp: .init(id: "example.com", name: "Example"), user: .init(id: "dXNlci0x", name: "jane@example.com", displayName: "Jane"),
        challenge: "AAECAwQFBgcICQ", pubKeyCredParams: [.init(alg: -7)], timeout: 300_000, excludeCredentials: [.init(id: "3q2-7w")],
        authenticatorSelection: .init(userVerification: "required"))

    @Test("creation and request options decode to the bytes the platform takes")
    func decodesOptions() throws {
        let registration = try PasskeyWire.registration(Self.creation)
        #expect(registration.rpID == "example.com")
        #expect(registration.challenge == Data([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]))
        #expect(registration.userID == Data("user-1".utf8))
        #expect(registration.excludedCredentials == [Data([0xDE, 0xAD, 0xBE, 0xEF])])
        #expect(registration.userVerification == "required")
        let assertion = try PasskeyWire.assertion(.init(challenge: "AAECAwQFBgcICQ", timeout: 300_000, rpId: "example.com", userVerification: "preferred"))
        #expect(assertion.allowedCredentials.isEmpty && assertion.userVerification == "preferred")
    }

    @Test("options the platform cannot use are invalid_response", arguments: ["not base64url!", "", "AAEC+w"])
    func refusesOptions(challenge: String) {
        var options = Self.creation
        options.challenge = challenge
        #expect(throws: LatchkeyClientError.invalidResponse) { try PasskeyWire.registration(options) }
        #expect(throws: LatchkeyClientError.invalidResponse) {
            try PasskeyWire.assertion(.init(challenge: challenge, timeout: 1, rpId: "example.com", userVerification: "required"))
        }
        var long = Self.creation
        long.user.id = PasskeyWire.base64URL(Data(repeating: 7, count: 65))
        #expect(throws: LatchkeyClientError.invalidResponse) { try PasskeyWire.registration(long) }
    }

    @Test("the platform's answers become the JSON forms, unpadded base64url")
    func encodesAnswers() throws {
        let made = try PasskeyWire.registrationResponse(credentialID: Data([0xFB, 0xFF]), clientDataJSON: Data("{}".utf8), attestationObject: Data([1]))
        #expect(made.id == "-_8" && made.rawId == "-_8" && made.type == "public-key")
        #expect(made.response.clientDataJSON == "e30" && made.response.attestationObject == "AQ")
        #expect(throws: LatchkeyClientError.invalidResponse) {
            try PasskeyWire.registrationResponse(credentialID: Data([1]), clientDataJSON: Data(), attestationObject: nil)
        }
        let used = PasskeyWire.assertionResponse(
            credentialID: Data([1]), clientDataJSON: Data([2]), authenticatorData: Data([3]), signature: Data([4]), userHandle: nil)
        #expect(used.response.userHandle == nil && used.response.signature == "BA")
    }

    @Test("ASAuthorizationError codes: 1001 is cancelled; the rest say why no passkey came", arguments: [1000, 1004, 1005, 1006])
    func failures(code: Int) {
        let domain = "com.apple.AuthenticationServices.AuthorizationError"
        #expect(PasskeyWire.failure(NSError(domain: domain, code: 1001)) == .cancelled)
        let failure = PasskeyWire.failure(NSError(domain: domain, code: code))
        #expect(failure == .passkeyUnavailable)
        #expect(failure.reason?.contains("\(code)") == true)
        #expect(PasskeyWire.failure(NSError(domain: "other", code: 1001)) == .passkeyUnavailable)
    }
}
