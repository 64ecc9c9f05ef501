import Crypto
import Foundation
import LatchkeyModels
import LatchkeyTestSupport
import Testing
import _CryptoExtras

@testable import LatchkeyCore
@testable import LatchkeyJOSE
@testable import LatchkeyWebAuthn

@Suite("Passkeys: the WebAuthn relying party's checks")
struct WebAuthnRelyingPartyTests {
    let party = WebAuthnRelyingParty(rpID: "example.com", origins: ["https://example.com"])
    static func challenge() -> [UInt8] { (0..<32).map { _ in UInt8.random(in: 0...255) } }

    @Test(
        "register, then sign in with ES256, EdDSA and RS256 keys; the counter moves forward and the backup flags are kept",
        arguments: ["ES256", "EdDSA", "RS256"])
    func lifecycle(algorithm: String) throws {
        var authenticator = SoftwareAuthenticator(
            algorithm == "ES256"
                ? .p256(P256.Signing.PrivateKey())
                : algorithm == "EdDSA"
                    ? .ed25519(Curve25519.Signing.PrivateKey())
                    : .rsa(try _RSA.Signing.PrivateKey(keySize: .bits2048)))
        let challenge = Self.challenge()
        var passkey = try party.verifyRegistration(authenticator.register(challenge: challenge), challenge: challenge)
        #expect(passkey.algorithm.name == algorithm && passkey.credentialID == authenticator.credentialID)
        #expect(passkey.backupEligible && passkey.backedUp && passkey.signCount == 0 && passkey.transports == ["internal", "hybrid"])
        for _ in 1...2 {
            let login = Self.challenge()
            let used = try party.verifyAssertion(authenticator.assert(challenge: login), challenge: login, passkey: passkey)
            #expect(used.signCount == passkey.signCount + 1 && used.userHandle == [9, 9])
            passkey.signCount = used.signCount
        }
    }

    @Test("an authenticator without a counter (always 0, as Apple's passkeys) is accepted each time")
    func zeroCounter() throws {
        var authenticator = SoftwareAuthenticator()
        let challenge = Self.challenge()
        let passkey = try party.verifyRegistration(authenticator.register(challenge: challenge), challenge: challenge)
        for _ in 1...2 {
            let login = Self.challenge()
            #expect(try party.verifyAssertion(authenticator.assert(challenge: login, counting: false), challenge: login, passkey: passkey).signCount == 0)
        }
    }

    static func refused(_ expected: LatchkeyError.Code, _ mention: String, _ body: () throws -> Void) {
        #expect {
            try body()
        } throws: {
            ($0 as? LatchkeyError)?.code == expected && ($0 as? LatchkeyError)?.reason.contains(mention) == true
        }
    }

    @Test("registrations refused: another origin, another rpId, no UV while required, another challenge, a sign-in's type, a cross-origin frame, BS without BE")
    func registrationRefusals() throws {
        let authenticator = SoftwareAuthenticator()
        let challenge = Self.challenge()
        func refused(_ mention: String, _ ceremony: SoftwareAuthenticator.Ceremony, challenge sent: [UInt8]? = nil) {
            Self.refused(.invalidCredential, mention) {
                _ = try party.verifyRegistration(authenticator.register(challenge: sent ?? challenge, ceremony), challenge: challenge)
            }
        }
        refused("origin", .init(origin: "https://evil.example"))
        refused("rpId", .init(rpID: "evil.example"))
        refused("not verified", .init(flags: 0x01))
        refused("not present", .init(flags: 0x04))
        refused("challenge", .init(), challenge: Self.challenge())
        refused("type", .init(type: "webauthn.get"))
        refused("cross-origin", .init(crossOrigin: true))
        refused("BS is set without BE", .init(flags: 0x01 | 0x04 | 0x10))
        // Without UV when the party only prefers it: accepted.
        let lenient = WebAuthnRelyingParty(rpID: "example.com", origins: ["https://example.com"], requireUserVerification: false)
        #expect(try lenient.verifyRegistration(authenticator.register(challenge: challenge, .init(flags: 0x01)), challenge: challenge).signCount == 0)
        var mismatched = authenticator.register(challenge: challenge)
        mismatched.rawId = base64URL([1, 2, 3])
        Self.refused(.invalidCredential, "id and rawId differ") { _ = try party.verifyRegistration(mismatched, challenge: challenge) }
        var garbage = authenticator.register(challenge: challenge)
        garbage.response.attestationObject = base64URL([0x5F, 0x41, 0x00, 0xFF])
        Self.refused(.invalidCredential, "CBOR") { _ = try party.verifyRegistration(garbage, challenge: challenge) }
    }

    @Test(
        "assertions refused: a replay (the counter does not move), a counter going backwards, another credential, a forged signature, UV missing, a sign-up's type"
    )
    func assertionRefusals() throws {
        var authenticator = SoftwareAuthenticator()
        let challenge = Self.challenge()
        var passkey = try party.verifyRegistration(authenticator.register(challenge: challenge), challenge: challenge)
        let login = Self.challenge()
        let first = authenticator.assert(challenge: login)
        passkey.signCount = try party.verifyAssertion(first, challenge: login, passkey: passkey).signCount
        Self.refused(.credentialCloneSuspected, "went from 1 to 1") { _ = try party.verifyAssertion(first, challenge: login, passkey: passkey) }
        var clone = authenticator
        clone.signCount = 0
        let cloned = clone.assert(challenge: login)  // counter 1 again, while the stored one is 1
        passkey.signCount = 5
        Self.refused(.credentialCloneSuspected, "went from 5 to 1") { _ = try party.verifyAssertion(cloned, challenge: login, passkey: passkey) }
        passkey.signCount = 1

        var other = SoftwareAuthenticator()
        Self.refused(.invalidCredential, "not from this credential") {
            _ = try party.verifyAssertion(other.assert(challenge: login), challenge: login, passkey: passkey)
        }
        var forged = authenticator.assert(challenge: login)
        forged.response.signature = other.assert(challenge: login).response.signature
        Self.refused(.invalidCredential, "signature") { _ = try party.verifyAssertion(forged, challenge: login, passkey: passkey) }
        Self.refused(.invalidCredential, "not verified") {
            _ = try party.verifyAssertion(authenticator.assert(challenge: login, .init(flags: 0x01)), challenge: login, passkey: passkey)
        }
        Self.refused(.invalidCredential, "type") {
            _ = try party.verifyAssertion(authenticator.assert(challenge: login, .init(type: "webauthn.create")), challenge: login, passkey: passkey)
        }
        Self.refused(.invalidCredential, "challenge") {
            _ = try party.verifyAssertion(authenticator.assert(challenge: Self.challenge()), challenge: login, passkey: passkey)
        }
    }

    @Test("a credential id is 1 to 1023 bytes (WebAuthn Level 3): an empty one and a 1024-byte one are refused at registration and sign-in")
    func credentialIDBounds() throws {
        let challenge = Self.challenge()
        for (count, accepted) in [(0, false), (1, true), (1023, true), (1024, false)] {
            var authenticator = SoftwareAuthenticator()
            authenticator.credentialID = Array(repeating: 7, count: count)
            let registration = authenticator.register(challenge: challenge)
            if accepted {
                let passkey = try party.verifyRegistration(registration, challenge: challenge)
                #expect(passkey.credentialID.count == count)
            } else {
                Self.refused(.invalidCredential, "rawId") { _ = try party.verifyRegistration(registration, challenge: challenge) }
                var stored = try party.verifyRegistration(SoftwareAuthenticator().register(challenge: challenge), challenge: challenge)
                stored.credentialID = authenticator.credentialID
                Self.refused(.invalidCredential, "rawId") {
                    _ = try party.verifyAssertion(authenticator.assert(challenge: challenge), challenge: challenge, passkey: stored)
                }
            }
        }
    }

    @Test("clientDataJSON is read strictly: a second origin, two spellings of one name, UTF-16 and a byte that is not UTF-8 are refused")
    func clientDataStrict() throws {
        let authenticator = SoftwareAuthenticator()
        let challenge = Self.challenge()
        let good = #"{"type":"webauthn.create","challenge":"\#(base64URL(challenge))","origin":"https://example.com""#
        func registration(_ clientData: [UInt8]) -> RegistrationResponseJSON {
            var registration = authenticator.register(challenge: challenge)
            registration.response.clientDataJSON = base64URL(clientData)
            return registration
        }
        // The baseline the mutations start from is accepted.
        _ = try party.verifyRegistration(registration(Array((good + "}").utf8)), challenge: challenge)
        let repeatedOrigin = Array((good + #","origin":"https://evil.example"}"#).utf8)
        Self.refused(.invalidCredential, "origin") { _ = try party.verifyRegistration(registration(repeatedOrigin), challenge: challenge) }
        // "type" spelled a second time with U+0301 after the e (é): one Swift string key, two JSON members.
        let equivalent = Array((good + #","typ\#u{E9}":"x","type\#u{301}":"y"}"#).utf8)
        Self.refused(.invalidCredential, "twice") { _ = try party.verifyRegistration(registration(equivalent), challenge: challenge) }
        let utf16 = Array((good + "}").utf16).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        Self.refused(.invalidCredential, "clientDataJSON") { _ = try party.verifyRegistration(registration([0xFF, 0xFE] + utf16), challenge: challenge) }
        Self.refused(.invalidCredential, "clientDataJSON") { _ = try party.verifyRegistration(registration(utf16), challenge: challenge) }
        let notUTF8 = Array((good + #","x":"\#u{FF}"}"#).utf8).map { $0 == 0xC3 ? 0xFF : $0 }
        Self.refused(.invalidCredential, "clientDataJSON") { _ = try party.verifyRegistration(registration(notUTF8), challenge: challenge) }
    }
}
