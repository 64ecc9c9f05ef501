import Crypto
import ExtrasBase64
import Foundation
public import LatchkeyJOSE
public import LatchkeyModels

/// A passkey as registered: what the store keeps to check its assertions.
public struct RegisteredPasskey: Sendable, Equatable {
    public var credentialID: [UInt8]
    /// The COSE_Key, as the authenticator encoded it.
    public var publicKey: [UInt8]
    public var algorithm: COSEKey.Algorithm
    public var signCount: UInt32
    /// BE: the credential may be synced (a passkey in iCloud Keychain or Google Password Manager).
    public var backupEligible: Bool
    /// BS: it is backed up now.
    public var backedUp: Bool
    /// The authenticator model (all zeroes with attestation `none` on most platforms).
    public var aaguid: [UInt8]
    public var transports: [String]

    package init(
        credentialID: [UInt8], publicKey: [UInt8], algorithm: COSEKey.Algorithm, signCount: UInt32, backupEligible: Bool, backedUp: Bool,
        aaguid: [UInt8], transports: [String]
    ) {
        (self.credentialID, self.publicKey, self.algorithm, self.signCount) = (credentialID, publicKey, algorithm, signCount)
        (self.backupEligible, self.backedUp, self.aaguid, self.transports) = (backupEligible, backedUp, aaguid, transports)
    }
}

/// A passkey assertion that passed: what changes in the stored credential.
public struct PasskeyAssertion: Sendable, Equatable {
    public var signCount: UInt32
    public var backedUp: Bool
    /// The user handle the authenticator returned (base64url-decoded), when it sent one.
    public var userHandle: [UInt8]?
}

/// A WebAuthn Level 3 relying party, strict by default: it checks a registration or an assertion against the
/// challenge it issued, its `rpId` and origins, the user-presence and (by default) user-verification flags, the
/// signature (through swift-crypto) and the signature counter. Attestation statements are not verified: Latchkey asks
/// for `none`, and a statement in another format is ignored (the key is trusted as the platform's, which is what
/// `none` means too). Every refusal is a ``LatchkeyError`` with code `invalid_credential` (or
/// `credential_clone_suspected` for a counter that went backwards) and a reason naming the check.
public struct WebAuthnRelyingParty: Sendable {
    /// The registrable domain passkeys are bound to, such as `example.com`.
    public var rpID: String
    /// The origins allowed in `clientDataJSON`, such as `https://example.com`; an app's are its associated domains'.
    public var origins: Set<String>
    public var requireUserVerification: Bool
    /// The algorithms offered in `pubKeyCredParams`, in order of preference.
    public static let algorithms: [COSEKey.Algorithm] = [.es256, .edDSA, .rs256]

    public init(rpID: String, origins: Set<String>, requireUserVerification: Bool = true) {
        self.rpID = rpID
        self.origins = origins
        self.requireUserVerification = requireUserVerification
    }

    /// Checks a new credential made for `challenge` (§7.1, steps that apply to attestation `none`).
    public func verifyRegistration(_ credential: RegistrationResponseJSON, challenge: [UInt8]) throws(LatchkeyError) -> RegisteredPasskey {
        let rawID = try Self.credentialID(credential.rawId)
        guard credential.type == "public-key" else { throw Self.refusal("type is \(credential.type.prefix(40)), not public-key") }
        guard try Self.decoded(credential.id, "id") == rawID else { throw Self.refusal("id and rawId differ") }
        try checkClientData(try Self.decoded(credential.response.clientDataJSON, "clientDataJSON"), type: "webauthn.create", challenge: challenge)
        let attestation: CBORValue
        do {
            attestation = try CBORReader.value(try Self.decoded(credential.response.attestationObject, "attestationObject"))
        } catch {
            throw Self.refusal("the attestation object is not valid CBOR (\(error.reason))")
        }
        guard attestation["fmt"]?.text != nil, case .map = attestation["attStmt"], let authenticatorData = attestation["authData"]?.bytes else {
            throw Self.refusal("the attestation object needs fmt, attStmt and authData")
        }
        let data = try AuthenticatorData(authenticatorData)
        try checkFlags(data)
        guard let attested = data.attestedCredential else { throw Self.refusal("the authenticator data has no attested credential (AT)") }
        guard attested.credentialID == rawID else { throw Self.refusal("the attested credential id is not rawId") }
        return RegisteredPasskey(
            credentialID: rawID, publicKey: attested.publicKeyBytes, algorithm: attested.publicKey.algorithm, signCount: data.signCount,
            backupEligible: data.backupEligible, backedUp: data.backedUp, aaguid: attested.aaguid, transports: credential.response.transports ?? [])
    }

    /// Checks an assertion by `passkey` for `challenge` (§7.2): the signature over the authenticator data and the
    /// client data's hash, and a counter that moves forward (both zero means the authenticator keeps none).
    public func verifyAssertion(_ assertion: AuthenticationResponseJSON, challenge: [UInt8], passkey: RegisteredPasskey) throws(LatchkeyError)
        -> PasskeyAssertion
    {
        let rawID = try Self.credentialID(assertion.rawId)
        guard assertion.type == "public-key" else { throw Self.refusal("type is \(assertion.type.prefix(40)), not public-key") }
        guard try Self.decoded(assertion.id, "id") == rawID, constantTimeEquals(rawID, passkey.credentialID) else {
            throw Self.refusal("the assertion is not from this credential")
        }
        let clientData = try Self.decoded(assertion.response.clientDataJSON, "clientDataJSON")
        try checkClientData(clientData, type: "webauthn.get", challenge: challenge)
        let authenticatorData = try Self.decoded(assertion.response.authenticatorData, "authenticatorData")
        let data = try AuthenticatorData(authenticatorData)
        try checkFlags(data)
        let key: COSEKey
        do {
            key = try COSEKey(try CBORReader.value(passkey.publicKey))
        } catch {
            throw Self.refusal("the stored public key cannot be read")
        }
        let signature = try Self.decoded(assertion.response.signature, "signature")
        guard key.isValidSignature(signature, for: authenticatorData + Array(SHA256.hash(data: clientData))) else {
            throw Self.refusal("the signature does not verify with the credential's public key")
        }
        if data.signCount != 0 || passkey.signCount != 0, data.signCount <= passkey.signCount {
            throw LatchkeyError(
                .credentialCloneSuspected,
                "the signature counter went from \(passkey.signCount) to \(data.signCount): a copy of this authenticator may exist; the passkey is blocked")
        }
        let userHandle = try assertion.response.userHandle.map { (handle) throws(LatchkeyError) in try Self.decoded(handle, "userHandle") }
        return PasskeyAssertion(signCount: data.signCount, backedUp: data.backedUp, userHandle: userHandle)
    }

    /// `clientDataJSON` (§5.8.1): its type, the challenge issued, an allowed origin, not from a cross-origin frame.
    private func checkClientData(_ bytes: [UInt8], type: String, challenge: [UInt8]) throws(LatchkeyError) {
        struct ClientData: Decodable {
            let type: String
            let challenge: String
            let origin: String
            let crossOrigin: Bool?
        }
        let clientData = try Self.clientData(ClientData.self, bytes)
        guard clientData.type == type else { throw Self.refusal("clientDataJSON's type is \(clientData.type.prefix(40)), not \(type)") }
        guard let sent = try? Self.decoded(clientData.challenge, "challenge"), constantTimeEquals(sent, challenge) else {
            throw Self.refusal("clientDataJSON's challenge is not the one issued")
        }
        guard origins.contains(clientData.origin) else {
            throw Self.refusal("the origin \(clientData.origin.prefix(200)) is not one of passkeys.origins")
        }
        guard clientData.crossOrigin != true else { throw Self.refusal("the ceremony ran in a cross-origin frame") }
    }

    /// The rpId hash, user presence, user verification when required, and BS only with BE.
    private func checkFlags(_ data: AuthenticatorData) throws(LatchkeyError) {
        guard constantTimeEquals(data.rpIDHash, Array(SHA256.hash(data: Array(rpID.utf8)))) else {
            throw Self.refusal("the credential is for another rpId than \(rpID)")
        }
        guard data.userPresent else { throw Self.refusal("the user was not present (UP is not set)") }
        guard data.userVerified || !requireUserVerification else {
            throw Self.refusal("the user was not verified (UV is not set) and passkeys.userVerification is required")
        }
        guard data.backupEligible || !data.backedUp else { throw Self.refusal("BS is set without BE") }
    }

    /// The challenge (base64url, as sent) that a response's `clientDataJSON` answers, to find what it was issued for.
    public static func challenge(in clientDataJSON: String) throws(LatchkeyError) -> String {
        struct ClientData: Decodable { let challenge: String }
        return try clientData(ClientData.self, try decoded(clientDataJSON, "clientDataJSON")).challenge
    }

    /// `clientDataJSON` read strictly (WebAuthn §5.8.1: UTF-8 JSON): a member named twice (a second `origin`), names
    /// that differ only as Unicode spellings of one name, and any other encoding are refused, not read leniently.
    private static func clientData<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws(LatchkeyError) -> T {
        guard bytes.count <= 8192 else { throw refusal("clientDataJSON is longer than 8192 bytes") }
        do {
            return try LeanJSONDecoder().decode(type, from: bytes)
        } catch LeanJSONError.duplicateKey(let name) {
            throw refusal("clientDataJSON names \(name.debugDescription.prefix(40)) twice")
        } catch {
            throw refusal("clientDataJSON is not the client data JSON (UTF-8 JSON with type, challenge and origin)")
        }
    }

    /// The longest credential id WebAuthn Level 3 allows (§5.1: `rawId` is at most 1023 bytes).
    public static let maximumCredentialIDBytes = 1023

    /// A credential's `rawId`: base64url of 1 to 1023 bytes. An empty id would make a passkey that signs in but that
    /// nobody can name to delete.
    package static func credentialID(_ text: String) throws(LatchkeyError) -> [UInt8] {
        let id = try decoded(text, "rawId")
        guard !id.isEmpty else { throw refusal("rawId is empty; a credential id is 1 to \(maximumCredentialIDBytes) bytes") }
        guard id.count <= maximumCredentialIDBytes else {
            throw refusal("rawId is \(id.count) bytes; a credential id is at most \(maximumCredentialIDBytes)")
        }
        return id
    }

    package static func decoded(_ text: String, _ field: String) throws(LatchkeyError) -> [UInt8] {
        guard text.utf8.count <= 96 * 1024, let bytes = try? Base64.decode(bytes: Array(text.utf8), options: [.base64UrlAlphabet, .omitPaddingCharacter])
        else { throw refusal("\(field) is not base64url") }
        return bytes
    }

    package static func refusal(_ reason: String) -> LatchkeyError { LatchkeyError(.invalidCredential, reason) }
}

/// Authenticator data (WebAuthn §6.1): the rpId hash, the flags, the signature counter and, at registration, the
/// attested credential.
struct AuthenticatorData {
    struct AttestedCredential {
        let aaguid: [UInt8]
        let credentialID: [UInt8]
        let publicKey: COSEKey
        let publicKeyBytes: [UInt8]
    }

    let rpIDHash: [UInt8]
    let flags: UInt8
    let signCount: UInt32
    let attestedCredential: AttestedCredential?

    var userPresent: Bool { flags & 0x01 != 0 }
    var userVerified: Bool { flags & 0x04 != 0 }
    var backupEligible: Bool { flags & 0x08 != 0 }
    var backedUp: Bool { flags & 0x10 != 0 }

    init(_ bytes: [UInt8]) throws(LatchkeyError) {
        guard bytes.count >= 37 else { throw WebAuthnRelyingParty.refusal("the authenticator data is shorter than 37 bytes") }
        rpIDHash = Array(bytes[0..<32])
        flags = bytes[32]
        signCount = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
        var rest = Array(bytes[37...])
        if flags & 0x40 != 0 {
            guard rest.count >= 18 else { throw WebAuthnRelyingParty.refusal("the attested credential data is cut short") }
            let length = Int(rest[16]) << 8 | Int(rest[17])
            guard length <= 1023, rest.count >= 18 + length else {
                throw WebAuthnRelyingParty.refusal("the credential id is longer than 1023 bytes or cut short")
            }
            let credentialID = Array(rest[18..<18 + length])
            let keyBytes = Array(rest[(18 + length)...])
            let (value, end): (CBORValue, Int)
            do {
                (value, end) = try CBORReader.prefix(keyBytes)
            } catch {
                throw WebAuthnRelyingParty.refusal("the credential public key is not valid CBOR (\(error.reason))")
            }
            let publicKey: COSEKey
            do { publicKey = try COSEKey(value) } catch { throw WebAuthnRelyingParty.refusal(error.reason) }
            attestedCredential = AttestedCredential(
                aaguid: Array(rest[0..<16]), credentialID: credentialID, publicKey: publicKey, publicKeyBytes: Array(keyBytes[..<end]))
            rest = Array(keyBytes[end...])
        } else {
            attestedCredential = nil
        }
        if flags & 0x80 != 0 {
            do { _ = try CBORReader.value(rest) } catch { throw WebAuthnRelyingParty.refusal("the extensions are not valid CBOR") }
        } else if !rest.isEmpty {
            throw WebAuthnRelyingParty.refusal("\(rest.count) bytes follow the authenticator data")
        }
    }
}
