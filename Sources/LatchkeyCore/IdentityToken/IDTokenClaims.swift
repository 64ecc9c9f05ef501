import Foundation
public import LatchkeyJOSE

/// The claims of an OpenID Connect ID token, read leniently where providers disagree on types
/// (Apple sends booleans as strings or booleans) and strictly everywhere else.
struct IDTokenClaims {
    var iss: String?
    var sub: String?
    var aud: [String]?
    var exp: Double?
    var iat: Double?
    var nbf: Double?
    var authTime: Double?
    var nonce: String?
    var nonceSupported: Bool?
    var cHash: String?
    var atHash: String?
    var email: String?
    var emailVerified: Bool?
    var isPrivateEmail: Bool?
    var realUserStatus: Int?
    var transferSub: String?
    var orgID: String?
    var azp: String?
    var hd: String?
    var tid: String?
    var name: String?
    var givenName: String?
    var familyName: String?

    init(_ object: LeanJSONObject) throws {
        iss = try object.string("iss")
        sub = try object.string("sub")
        aud = try object.stringOrStrings("aud")
        exp = try object.number("exp")
        iat = try object.number("iat")
        nbf = try object.number("nbf")
        authTime = try object.number("auth_time")
        nonce = try object.string("nonce")
        nonceSupported = try object.lenientBool("nonce_supported")
        cHash = try object.string("c_hash")
        atHash = try object.string("at_hash")
        email = try object.string("email")
        emailVerified = try object.lenientBool("email_verified")
        isPrivateEmail = try object.lenientBool("is_private_email")
        realUserStatus = try object.integer("real_user_status")
        transferSub = try object.string("transfer_sub")
        orgID = try object.string("org_id")
        azp = try object.string("azp")
        hd = try object.string("hd")
        tid = try object.string("tid")
        name = try object.string("name")
        givenName = try object.string("given_name")
        familyName = try object.string("family_name")
    }

    /// Decodes `payload`, turning every decoding problem into an error that names the claim.
    static func decode(_ payload: [UInt8]) throws(LatchkeyError) -> IDTokenClaims {
        try withClaimErrors { try IDTokenClaims(LeanJSONObject(parsing: payload)) }
    }
}

/// Decodes a JWT claims set, refusing duplicate members and naming the claim that has the wrong type.
public func decodeClaims<Claims: Decodable>(_ type: Claims.Type, from payload: [UInt8]) throws(LatchkeyError) -> Claims {
    try withClaimErrors { try LeanJSONDecoder().decode(Claims.self, from: payload) }
}

/// Runs a claims decoding step, translating its errors into ``LatchkeyError``s that name the claim.
func withClaimErrors<T>(_ body: () throws -> T) throws(LatchkeyError) -> T {
    do {
        return try body()
    } catch LeanJSONError.duplicateKey(let name) {
        throw LatchkeyError(.duplicateClaim, "claim \"\(name.prefix(64))\" appears more than once; such tokens are ambiguous and refused")
    } catch let DecodingError.typeMismatch(_, context) {
        throw LatchkeyError(.invalidClaim, "claim \"\(context.codingPath.first?.stringValue ?? "?")\" has the wrong type")
    } catch let DecodingError.dataCorrupted(context) where !context.codingPath.isEmpty {
        throw LatchkeyError(.invalidClaim, "claim \"\(context.codingPath.first?.stringValue ?? "?")\" has an invalid value")
    } catch let DecodingError.keyNotFound(key, _) {
        throw LatchkeyError(.missingClaim, "the token has no \"\(key.stringValue)\" claim")
    } catch {
        throw LatchkeyError(.malformedToken, "the payload is not a JSON object")
    }
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
