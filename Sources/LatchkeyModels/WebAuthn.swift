import ExtrasBase64
public import Foundation

/// The WebAuthn Level 3 JSON forms (§5.1.8–§5.1.10 and the `toJSON()` results): every binary field is unpadded
/// base64url text. The server sends the options; the browser's `PublicKeyCredential.toJSON()` (or the app) sends the
/// responses back.

/// `PublicKeyCredentialCreationOptionsJSON`: what `navigator.credentials.create()` needs to make a passkey.
public struct PublicKeyCredentialCreationOptionsJSON: Codable, Sendable, Equatable {
    public struct RelyingParty: Codable, Sendable, Equatable {
        public var id: String
        public var name: String
        public init(id: String, name: String) {
            self.id = id
            self.name = name
        }
    }

    public struct User: Codable, Sendable, Equatable {
        /// The user handle (base64url): opaque, never the e-mail.
        public var id: String
        public var name: String
        public var displayName: String
        public init(id: String, name: String, displayName: String) {
            self.id = id
            self.name = name
            self.displayName = displayName
        }
    }

    public struct Parameters: Codable, Sendable, Equatable {
        public var type = "public-key"
        public var alg: Int
        public init(alg: Int) { self.alg = alg }
    }

    public struct AuthenticatorSelection: Codable, Sendable, Equatable {
        public var residentKey: String
        public var requireResidentKey: Bool
        public var userVerification: String
        public init(residentKey: String = "required", requireResidentKey: Bool = true, userVerification: String) {
            self.residentKey = residentKey
            self.requireResidentKey = requireResidentKey
            self.userVerification = userVerification
        }
    }

    public var rp: RelyingParty
    public var user: User
    public var challenge: String
    public var pubKeyCredParams: [Parameters]
    /// Milliseconds.
    public var timeout: Int
    public var excludeCredentials: [PublicKeyCredentialDescriptorJSON]
    public var authenticatorSelection: AuthenticatorSelection
    public var attestation: String
    /// Latchkey's, not WebAuthn's: the challenge to name when the credential comes back (passkey sign-up). Browsers
    /// ignore it in `PublicKeyCredential.parseCreationOptionsFromJSON`.
    public var challengeId: String?

    public init(
        rp: RelyingParty, user: User, challenge: String, pubKeyCredParams: [Parameters], timeout: Int, excludeCredentials: [PublicKeyCredentialDescriptorJSON],
        authenticatorSelection: AuthenticatorSelection, attestation: String = "none", challengeId: String? = nil
    ) {
        self.rp = rp
        self.user = user
        self.challenge = challenge
        self.pubKeyCredParams = pubKeyCredParams
        self.timeout = timeout
        self.excludeCredentials = excludeCredentials
        self.authenticatorSelection = authenticatorSelection
        self.attestation = attestation
        self.challengeId = challengeId
    }
}

/// `PublicKeyCredentialRequestOptionsJSON`: what `navigator.credentials.get()` needs; an empty `allowCredentials`
/// asks for a discoverable credential (and works with conditional mediation).
public struct PublicKeyCredentialRequestOptionsJSON: Codable, Sendable, Equatable {
    public var challenge: String
    /// Milliseconds.
    public var timeout: Int
    public var rpId: String
    public var allowCredentials: [PublicKeyCredentialDescriptorJSON]
    public var userVerification: String
    /// Latchkey's, not WebAuthn's: the challenge to name in `POST /v1/auth/passkey`.
    public var challengeId: String?

    public init(
        challenge: String, timeout: Int, rpId: String, allowCredentials: [PublicKeyCredentialDescriptorJSON] = [], userVerification: String,
        challengeId: String? = nil
    ) {
        self.challenge = challenge
        self.timeout = timeout
        self.rpId = rpId
        self.allowCredentials = allowCredentials
        self.userVerification = userVerification
        self.challengeId = challengeId
    }
}

/// `PublicKeyCredentialDescriptorJSON`.
public struct PublicKeyCredentialDescriptorJSON: Codable, Sendable, Equatable {
    public var type = "public-key"
    public var id: String
    public var transports: [String]?
    public init(id: String, transports: [String]? = nil) {
        self.id = id
        self.transports = transports
    }
}

/// A `PublicKeyCredential` as `toJSON()` writes it: a new credential (``RegistrationResponseJSON``) or an assertion
/// (``AuthenticationResponseJSON``), which differ only in their `response`.
public struct PublicKeyCredentialJSON<Response: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    public var id: String
    public var rawId: String
    public var type: String
    public var response: Response
    public var authenticatorAttachment: String?

    public init(id: String, rawId: String, type: String = "public-key", response: Response, authenticatorAttachment: String? = nil) {
        self.id = id
        self.rawId = rawId
        self.type = type
        self.response = response
        self.authenticatorAttachment = authenticatorAttachment
    }
}

/// `RegistrationResponseJSON`: a new credential.
public typealias RegistrationResponseJSON = PublicKeyCredentialJSON<AuthenticatorAttestationResponseJSON>

/// `AuthenticationResponseJSON`: an assertion.
public typealias AuthenticationResponseJSON = PublicKeyCredentialJSON<AuthenticatorAssertionResponseJSON>

/// `AuthenticatorAttestationResponseJSON`: a registration's `response`.
public struct AuthenticatorAttestationResponseJSON: Codable, Sendable, Equatable {
    public var clientDataJSON: String
    public var attestationObject: String
    public var transports: [String]?
    public init(clientDataJSON: String, attestationObject: String, transports: [String]? = nil) {
        self.clientDataJSON = clientDataJSON
        self.attestationObject = attestationObject
        self.transports = transports
    }
}

/// `AuthenticatorAssertionResponseJSON`: an assertion's `response`.
public struct AuthenticatorAssertionResponseJSON: Codable, Sendable, Equatable {
    public var clientDataJSON: String
    public var authenticatorData: String
    public var signature: String
    /// The user handle the credential was made with; discoverable credentials always send it.
    public var userHandle: String?
    public init(clientDataJSON: String, authenticatorData: String, signature: String, userHandle: String? = nil) {
        self.clientDataJSON = clientDataJSON
        self.authenticatorData = authenticatorData
        self.signature = signature
        self.userHandle = userHandle
    }
}

/// `POST /v1/me/passkeys`'s body: the new credential and a name for it.
public struct PasskeyRegistrationRequest: Codable, Sendable, Equatable {
    public var credential: RegistrationResponseJSON
    /// Shown in the account's list of passkeys (up to 64 characters); the server names it otherwise.
    public var name: String?
    public init(credential: RegistrationResponseJSON, name: String? = nil) {
        self.credential = credential
        self.name = name
    }
}

/// `POST /v1/auth/passkey`'s body.
public struct PasskeySignInRequest: Codable, Sendable, Equatable {
    public var challengeId: String
    public var credential: AuthenticationResponseJSON
    /// App Attest's evidence for this sign-in, where the server asks for it.
    public var appAttest: AppAttestEvidence? = nil
    public init(challengeId: String, credential: AuthenticationResponseJSON) {
        self.challengeId = challengeId
        self.credential = credential
    }
}

/// `POST /v1/auth/passkey/signup/options`'s body.
public struct PasskeySignUpOptionsRequest: Codable, Sendable, Equatable {
    /// The name the new account and its passkey show.
    public var displayName: String?
    /// Needed when the server's `signup.mode` is `invite`.
    public var inviteCode: String?
    public init(displayName: String? = nil, inviteCode: String? = nil) {
        self.displayName = displayName
        self.inviteCode = inviteCode
    }
}

/// `POST /v1/auth/passkey/signup`'s body.
public struct PasskeySignUpRequest: Codable, Sendable, Equatable {
    public var challengeId: String
    public var credential: RegistrationResponseJSON
    public var name: String?
    /// App Attest's evidence for this sign-in, where the server asks for it.
    public var appAttest: AppAttestEvidence? = nil
    public init(challengeId: String, credential: RegistrationResponseJSON, name: String? = nil) {
        self.challengeId = challengeId
        self.credential = credential
        self.name = name
    }
}

/// A passkey of the account, as `GET /v1/me/passkeys` lists it.
public struct PasskeyResponse: Codable, Sendable, Equatable {
    /// The credential id (base64url): the `{id}` of `DELETE /v1/me/passkeys/{id}`.
    public var id: String
    public var name: String
    public var createdAt: Date
    public var lastUsedAt: Date?
    /// The passkey is synced (BS): it survives the loss of the device.
    public var backedUp: Bool
    /// Its signature counter went backwards once: it is blocked and should be deleted.
    public var cloneSuspected: Bool
    public init(id: String, name: String, createdAt: Date, lastUsedAt: Date? = nil, backedUp: Bool, cloneSuspected: Bool = false) {
        self.id = id
        self.name = name
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.backedUp = backedUp
        self.cloneSuspected = cloneSuspected
    }
}

/// Unpadded base64url, the encoding of every binary field in WebAuthn's JSON forms (through swift-extras-base64).
public enum Base64URL {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64.encodeToString(bytes: bytes, options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }

    /// Nil when `text` is not unpadded base64url.
    public static func decode(_ text: String) -> [UInt8]? {
        try? Base64.decode(bytes: Array(text.utf8), options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }
}

/// `GET /v1/me/passkeys`: the user's passkeys, oldest first.
public struct PasskeyList: Codable, Sendable, Equatable {
    public var passkeys: [PasskeyResponse]

    public init(passkeys: [PasskeyResponse]) { self.passkeys = passkeys }
}
