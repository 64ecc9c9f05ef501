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

    public init(
        rp: RelyingParty, user: User, challenge: String, pubKeyCredParams: [Parameters], timeout: Int, excludeCredentials: [PublicKeyCredentialDescriptorJSON],
        authenticatorSelection: AuthenticatorSelection, attestation: String = "none"
    ) {
        self.rp = rp
        self.user = user
        self.challenge = challenge
        self.pubKeyCredParams = pubKeyCredParams
        self.timeout = timeout
        self.excludeCredentials = excludeCredentials
        self.authenticatorSelection = authenticatorSelection
        self.attestation = attestation
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

    public init(challenge: String, timeout: Int, rpId: String, allowCredentials: [PublicKeyCredentialDescriptorJSON] = [], userVerification: String) {
        self.challenge = challenge
        self.timeout = timeout
        self.rpId = rpId
        self.allowCredentials = allowCredentials
        self.userVerification = userVerification
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

/// `RegistrationResponseJSON`: a new credential, as `PublicKeyCredential.toJSON()` writes it.
public struct RegistrationResponseJSON: Codable, Sendable, Equatable {
    public struct Response: Codable, Sendable, Equatable {
        public var clientDataJSON: String
        public var attestationObject: String
        public var transports: [String]?
        public init(clientDataJSON: String, attestationObject: String, transports: [String]? = nil) {
            self.clientDataJSON = clientDataJSON
            self.attestationObject = attestationObject
            self.transports = transports
        }
    }

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

/// `AuthenticationResponseJSON`: an assertion, as `PublicKeyCredential.toJSON()` writes it.
public struct AuthenticationResponseJSON: Codable, Sendable, Equatable {
    public struct Response: Codable, Sendable, Equatable {
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
