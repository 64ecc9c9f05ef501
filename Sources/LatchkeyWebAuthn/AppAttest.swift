/// The App Attest environment an app's key was made in: the `aaguid` of its authenticator data says which.
public enum AppAttestEnvironment: String, Sendable, CaseIterable, Codable {
    /// An App Store, TestFlight or Enterprise build: `aaguid` is "appattest" followed by seven zero bytes.
    case production
    /// A build signed for development: `aaguid` is "appattestdevelop".
    case development

    /// The 16 bytes of `aaguid` that name this environment.
    var aaguid: [UInt8] {
        switch self {
        case .production: Array("appattest".utf8) + Array(repeating: 0, count: 7)
        case .development: Array("appattestdevelop".utf8)
        }
    }
}

/// One check of Apple's list ("Validating apps that connect to your server"), in the order they run.
public enum AppAttestCheck: String, Sendable, CaseIterable {
    /// A CBOR map with fmt "apple-appattest", attStmt with x5c (2 to 8 DER certificates) and receipt, authenticator data
    /// well formed; sizes within bounds.
    case encoding
    /// The leaf is signed by x5c[1] and x5c[1] by the trusted root, names chaining; x5c[1] is a CA; leaf, intermediate
    /// and root are all valid at the time given.
    case chain
    /// The leaf's extension 1.2.840.113635.100.8.2 (`SEQUENCE { [1] EXPLICIT OCTET STRING }`) is
    /// SHA256(authenticatorData ‖ clientDataHash).
    case nonce
    /// SHA256 of the leaf's uncompressed P-256 public key is the key id given, and the authenticator data's COSE key
    /// is that same key.
    case keyId
    /// The authenticator data's rpIdHash is SHA256 of one of the configured App IDs (of the stored key's, for an
    /// assertion).
    case appId
    /// `aaguid` is "appattestdevelop" (development) or "appattest" followed by 7 zero bytes (production), as configured.
    case environment
    /// Attestation: the counter is 0. Assertion: it is strictly above the stored counter.
    case counter
    /// The authenticator data's credential id is the key id.
    case credentialId
    /// Assertion only: an ES256 signature by the stored key over the nonce SHA256(authenticatorData ‖ clientDataHash).
    case signature
}

/// Why an attestation or an assertion was refused: the first check that failed and a short reason for a person. The
/// reason names no key, hash or receipt.
public struct AppAttestFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The first check that failed.
    public let check: AppAttestCheck
    /// A short reason for a person, such as "the counter is 3, not above the stored 5".
    public let reason: String

    public init(check: AppAttestCheck, reason: String) {
        self.check = check
        self.reason = reason
    }

    public var description: String { "\(check.rawValue): \(reason)" }
}

/// An app's key that passed attestation: what the server stores to check its assertions.
public struct AttestedAppKey: Sendable, Equatable, Codable {
    /// SHA256 of ``publicKey``: the key id the app sends with each assertion.
    public var keyID: [UInt8]
    /// The P-256 public key, X9.63 uncompressed (65 bytes: 0x04 ‖ x ‖ y).
    public var publicKey: [UInt8]
    /// The last counter seen: 0 after attestation, then each assertion's (the caller stores what
    /// ``AppAttestVerifier/verifyAssertion(_:clientDataHash:key:)`` returns).
    public var counter: UInt32
    /// Apple's receipt (`attStmt.receipt`, CMS), for fraud-metric requests to Apple; not verified here.
    public var receipt: [UInt8]
    /// The App ID (team id, a dot, bundle id) whose rpIdHash the authenticator data carries.
    public var appID: String
    /// The environment the key was made in (the verifier's, which the key's aaguid matched).
    public var environment: AppAttestEnvironment

    public init(keyID: [UInt8], publicKey: [UInt8], counter: UInt32, receipt: [UInt8], appID: String, environment: AppAttestEnvironment) {
        (self.keyID, self.publicKey, self.counter, self.receipt, self.appID, self.environment) = (keyID, publicKey, counter, receipt, appID, environment)
    }
}

/// The outcome of one check, for a report that prints a line per check.
public struct AppAttestCheckResult: Sendable, Equatable {
    /// The check this is the outcome of.
    public let check: AppAttestCheck
    /// Why the check failed, or nil when it passed. A check that could not run (after `encoding` failed) fails with a
    /// reason that starts with "not run: ".
    public let failure: String?

    public var passed: Bool { failure == nil }
}
