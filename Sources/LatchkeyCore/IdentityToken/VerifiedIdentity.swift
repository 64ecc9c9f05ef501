public import Foundation

/// Who a verified identity token says the user is.
public struct VerifiedIdentity: Sendable, Equatable, Codable {
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
    /// True for Apple's Hide My Email relay addresses (`@privaterelay.appleid.com`).
    public var isPrivateEmail: Bool?
    /// Apple's real-user indicator; present only for native sign-ins on recent OS versions.
    public var realUserStatus: RealUserStatus?
    /// The subject under the previous team, present for 60 days after an app transfer.
    public var transferSubject: String?
    /// Apple's `org_id` for Managed Apple Accounts.
    public var organizationID: String?
    public var nonceSupported: Bool?
    /// Google's `azp`.
    public var authorizedParty: String?
    /// Google's `hd` (hosted Workspace domain).
    public var hostedDomain: String?
    /// Microsoft's `tid`.
    public var tenantID: String?
    public var name: String?
    public var givenName: String?
    public var familyName: String?
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
