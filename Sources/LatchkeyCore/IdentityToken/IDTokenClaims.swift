import Foundation

/// The claims of an OpenID Connect ID token, decoded leniently where providers disagree on types
/// (Apple sends booleans as strings or booleans) and strictly everywhere else.
struct IDTokenClaims: Decodable {
    var iss: String?
    var sub: String?
    var aud: Audience?
    var exp: Double?
    var iat: Double?
    var nbf: Double?
    var authTime: Double?
    var nonce: String?
    var nonceSupported: LenientBool?
    var cHash: String?
    var atHash: String?
    var email: String?
    var emailVerified: LenientBool?
    var isPrivateEmail: LenientBool?
    var realUserStatus: Int?
    var transferSub: String?
    var orgID: String?
    var azp: String?
    var hd: String?
    var tid: String?
    var name: String?
    var givenName: String?
    var familyName: String?

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, exp, iat, nbf, nonce, email, azp, hd, tid, name
        case authTime = "auth_time"
        case nonceSupported = "nonce_supported"
        case cHash = "c_hash"
        case atHash = "at_hash"
        case emailVerified = "email_verified"
        case isPrivateEmail = "is_private_email"
        case realUserStatus = "real_user_status"
        case transferSub = "transfer_sub"
        case orgID = "org_id"
        case givenName = "given_name"
        case familyName = "family_name"
    }

    /// Decodes `payload`, turning every decoding problem into an error that names the claim.
    static func decode(_ payload: [UInt8]) throws(LatchkeyError) -> IDTokenClaims {
        try decodeClaims(IDTokenClaims.self, from: payload)
    }
}

/// Decodes a JWT claims set, refusing duplicate members and naming the claim that has the wrong type.
public func decodeClaims<Claims: Decodable>(_ type: Claims.Type, from payload: [UInt8]) throws(LatchkeyError) -> Claims {
    let claims: Claims
    do {
        claims = try sharedJSONDecoder.decode(Claims.self, from: Data(payload))
    } catch let DecodingError.typeMismatch(_, context) {
        throw LatchkeyError(.invalidClaim, "claim \"\(context.codingPath.first?.stringValue ?? "?")\" has the wrong type")
    } catch let DecodingError.dataCorrupted(context) where !context.codingPath.isEmpty {
        throw LatchkeyError(.invalidClaim, "claim \"\(context.codingPath.first?.stringValue ?? "?")\" has an invalid value")
    } catch {
        throw LatchkeyError(.malformedToken, "the payload is not a JSON object")
    }
    if let duplicate = JSONTopLevelKeys.firstDuplicate(in: payload) {
        throw LatchkeyError(.duplicateClaim, "claim \"\(duplicate.prefix(64))\" appears more than once; such tokens are ambiguous and refused")
    }
    return claims
}

/// `aud` is a string or an array of strings (RFC 7519 §4.1.3).
public struct Audience: Decodable, Sendable {
    public var values: [String]

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let single = try? container.decode(String.self) {
            values = [single]
        } else {
            values = try container.decode([String].self)
        }
    }
}

/// A boolean that may arrive as `true` or as `"true"`.
public struct LenientBool: Decodable, Sendable {
    public var value: Bool

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let bool = try? container.decode(Bool.self) {
            value = bool
            return
        }
        switch try container.decode(String.self) {
        case "true": value = true
        case "false": value = false
        default:
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected true or false")
        }
    }
}
