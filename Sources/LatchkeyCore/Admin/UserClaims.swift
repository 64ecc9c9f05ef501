import LatchkeyJOSE
public import LatchkeyModels

/// The rules for the claims an app's backend sets on a user: a JSON object of at most 4 KiB encoded, nested at
/// most 5 deep, none of whose names is a claim that JWT, RFC 9068 or OpenID Connect defines, or that Latchkey sets,
/// except RFC 9068's authorization attributes (``authorizationAttributes``), which are the backend's to set.
public enum UserClaims {
    public static let maximumBytes = 4096
    public static let maximumDepth = 5

    /// Names no custom claim may take.
    public static let reserved: Set<String> = [
        // RFC 7519
        "iss", "sub", "aud", "exp", "nbf", "iat", "jti",
        // RFC 9068 (its authorization attributes, below, are the backend's to set)
        "client_id", "scope", "auth_time", "acr", "amr",
        // OpenID Connect Core: ID token and standard claims
        "nonce", "azp", "at_hash", "c_hash", "sid", "sub_jwk", "name", "given_name", "family_name", "middle_name", "nickname", "preferred_username",
        "profile", "picture", "website", "email", "email_verified", "gender", "birthdate", "zoneinfo", "locale", "phone_number",
        "phone_number_verified", "address", "updated_at", "_claim_names", "_claim_sources",
        // RFC 7800, RFC 8693
        "cnf", "act", "may_act",
        // Latchkey's own
        "idp", "is_anonymous", "attested",
    ]

    /// RFC 9068 §2.2.3.1: an authorization server should carry SCIM's `roles`, `groups` and `entitlements` (RFC 7643
    /// §4.1.2) in access tokens under exactly these names. Each is an array of strings, or of SCIM objects with a
    /// string `value`; access tokens carry them at the top level like every other claim.
    public static let authorizationAttributes: Set<String> = ["roles", "groups", "entitlements"]

    /// What is wrong with `claims` (an `invalid_claims` description), or nil.
    public static func problem(_ claims: [String: JSONValue], encodedSize: Int) -> String? {
        if encodedSize > maximumBytes { return "the claims take \(encodedSize) bytes encoded; at most \(maximumBytes)" }
        for name in authorizationAttributes.sorted() {
            guard let value = claims[name] else { continue }
            guard case .array(let items) = value, items.allSatisfy(isSCIMAttribute) else {
                return "\(name) is RFC 9068's SCIM attribute: an array of strings, or of objects with a string value ([\"admin\"] or [{\"value\": \"admin\"}])"
            }
        }
        if let name = claims.keys.sorted().first(where: { reserved.contains($0) }) {
            return
                "\(name.prefix(40)) is a claim that JWT, RFC 9068, OpenID Connect or Latchkey defines; choose another name (for example app_\(name.prefix(40)))"
        }
        if claims.keys.contains(where: \.isEmpty) { return "a claim's name is empty" }
        if JSONValue.object(claims).depth > maximumDepth { return "the claims nest deeper than \(maximumDepth) levels" }
        return nil
    }

    private static func isSCIMAttribute(_ item: JSONValue) -> Bool {
        switch item {
        case .string: true
        case .object(let object):
            if case .string = object["value"] { true } else { false }
        default: false
        }
    }
}
