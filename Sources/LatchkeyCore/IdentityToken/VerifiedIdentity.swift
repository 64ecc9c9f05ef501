public import Foundation
import LatchkeyJOSE

/// Who a verified identity token says the user is.
public struct VerifiedIdentity: Sendable, Equatable, Codable, AppleIdentityFacts {
    public var issuer: String
    /// The provider's stable user id. Identify users by issuer and subject, never by e-mail.
    public var subject: String
    /// The configured client id the token was issued to.
    public var audience: String
    public var issuedAt: Date
    public var expiresAt: Date
    public var authTime: Date?
    public var email: String?
    public var emailVerified: Bool?
    /// Apple's `nonce_supported`: false when the device could not put a nonce in the token.
    public var nonceSupported: Bool?
    public var name: String?
    public var givenName: String?
    public var familyName: String?
    /// What only some providers say about the account, by claim name (Apple's `is_private_email`, Google's `hd`,
    /// Microsoft's `tid`, …), as the identity keeps it; the typed accessors below read it.
    public var claims: [String: String] = [:]

    public init(
        issuer: String, subject: String, audience: String, issuedAt: Date, expiresAt: Date, authTime: Date? = nil, email: String? = nil,
        emailVerified: Bool? = nil, isPrivateEmail: Bool? = nil, realUserStatus: RealUserStatus? = nil, transferSubject: String? = nil,
        organizationID: String? = nil, nonceSupported: Bool? = nil, authorizedParty: String? = nil, hostedDomain: String? = nil, tenantID: String? = nil,
        name: String? = nil, givenName: String? = nil, familyName: String? = nil
    ) {
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.authTime = authTime
        self.email = email
        self.emailVerified = emailVerified
        self.nonceSupported = nonceSupported
        self.name = name
        self.givenName = givenName
        self.familyName = familyName
        self.isPrivateEmail = isPrivateEmail
        self.realUserStatus = realUserStatus
        self.transferSubject = transferSubject
        claims["org_id"] = organizationID
        self.authorizedParty = authorizedParty
        self.hostedDomain = hostedDomain
        self.tenantID = tenantID
    }

    /// Apple's real-user indicator; present only for native sign-ins on recent OS versions.
    public var realUserStatus: RealUserStatus? {
        get { claims[LinkedIdentity.AppleClaim.realUserStatus].flatMap { Int($0) }.flatMap(RealUserStatus.init) }
        set { claims[LinkedIdentity.AppleClaim.realUserStatus] = newValue.map { String($0.rawValue) } }
    }
    /// Apple's `org_id` for Managed Apple Accounts.
    public var organizationID: String? { claims["org_id"] }
    /// Google's `azp`.
    public var authorizedParty: String? {
        get { claims["azp"] }
        set { claims["azp"] = newValue }
    }
    /// Google's `hd` (hosted Workspace domain).
    public var hostedDomain: String? {
        get { claims["hd"] }
        set { claims["hd"] = newValue }
    }
    /// Microsoft's `tid`.
    public var tenantID: String? {
        get { claims["tid"] }
        set { claims["tid"] = newValue }
    }
}

/// Apple's `real_user_status`, the `ASUserDetectionStatus` of the device.
public enum RealUserStatus: Int, Sendable, Codable, CustomStringConvertible {
    case unsupported = 0
    case unknown = 1
    case likelyReal = 2

    public var description: String {
        switch self {
        case .unsupported: "unsupported"
        case .unknown: "unknown"
        case .likelyReal: "likely_real"
        }
    }
}

extension VerifiedIdentity {
    /// An identity a provider vouched for without an ID token (an access-token check): `audience` is the
    /// client id the provider confirmed; the times are those of the check.
    public init(
        issuer: String, subject: String, audience: String, checkedAt now: Date, email: String? = nil, emailVerified: Bool? = nil, name: String? = nil,
        givenName: String? = nil, familyName: String? = nil
    ) {
        self.init(issuer: issuer, subject: subject, audience: audience, issuedAt: now, expiresAt: now)
        self.email = email
        self.emailVerified = emailVerified
        self.name = name
        self.givenName = givenName
        self.familyName = familyName
    }
}
