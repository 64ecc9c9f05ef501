import Crypto
import Foundation

/// Values shaped like the ones Apple and Google issue, so clients that check formats are not surprised.
enum Identifiers {
    static func randomHex(_ bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return hex((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    static func randomAlphanumeric(_ count: Int, alphabet: String = "abcdefghijklmnopqrstuvwxyz0123456789") -> String {
        let characters = Array(alphabet)
        return String((0..<count).map { _ in characters.randomElement()! })
    }

    static func hexDigest(_ parts: String...) -> String {
        hex(SHA256.hash(data: Array(parts.joined(separator: "|").utf8)))
    }

    /// Lowercase hex. Subjects are hashed for every user created, so this builds no string per byte.
    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let alphabet = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            text.append(alphabet[Int(byte >> 4)])
            text.append(alphabet[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Each digit of a lowercase hex string modulo 10.
    private static func decimalDigits(_ hex: String) -> String {
        String(
            decoding: hex.utf8.map { char in
                let value = char >= UInt8(ascii: "a") ? char - UInt8(ascii: "a") + 10 : char - UInt8(ascii: "0")
                return UInt8(ascii: "0") + value % 10
            }, as: UTF8.self)
    }

    /// A team-scoped subject, `000123.<32 hex>.0456`: stable for a user and team, different across teams.
    static func appleSubject(userID: UUID, teamID: String) -> String {
        let digest = hexDigest(userID.uuidString, teamID)
        let digits = decimalDigits(digest)
        return "\(digits.prefix(6)).\(digest.prefix(32)).\(digits.suffix(4))"
    }

    /// The domains Apple's Hide My Email addresses are at: `privaterelay.appleid.com`, and `private.icloud.com`, from which
    /// Apple also issues new ones. Kept here, not taken from the code the emulator stands in for.
    static let relayDomains = ["privaterelay.appleid.com", "private.icloud.com"]

    /// The Hide My Email address of a user for a team, at `domain` (one of ``Identifiers/relayDomains``).
    static func relayEmail(userID: UUID, teamID: String, domain: String) -> String {
        "\(hexDigest("relay", userID.uuidString, teamID).prefix(10))@\(domain)"
    }

    /// A Google subject: 21 digits.
    static func googleSubject(userID: UUID) -> String {
        "1" + decimalDigits(hexDigest("google", userID.uuidString)).prefix(20)
    }

    /// The tenant of personal Microsoft accounts (`consumers`).
    static let microsoftConsumersTenant = "9188040d-6c67-4c5b-b112-36a304b66dad"

    /// A user's identities at Microsoft, Facebook, Dropbox and the generic OpenID Connect issuer, all cut from
    /// one SHA-512 of the user id (one hash per user keeps batch creation cheap).
    struct ProviderSubjects: Sendable {
        /// Microsoft's `sub`: 43 opaque base64url characters.
        let microsoft: String
        /// Microsoft's `oid`: a GUID.
        let microsoftObjectID: String
        /// A Facebook user id: 17 digits.
        let facebook: String
        /// A Dropbox account id, `dbid:` and 40 base64url characters, and the legacy numeric `uid`.
        let dropbox: String
        let dropboxUID: String
        /// The OpenID Connect issuer's subject: 32 hex digits.
        let oidc: String
        /// A GitHub user id (an integer, here of 8 or 9 digits) and login.
        let github: String
        let githubLogin: String
        /// A Discord snowflake (18 digits) and an X user id (19 digits).
        let discord: String
        let x: String
        /// A GitLab user id: up to 8 digits.
        let gitlab: String
        /// A Slack user id: `U` and 10 upper-case letters and digits.
        let slack: String

        /// The emulator's user these are the subjects of.
        let userID: UUID

        init(userID: UUID) {
            self.userID = userID
            let bytes = Array(SHA512.hash(data: Array("providers|\(userID.uuidString)".utf8)))
            microsoft = base64URL(bytes[0..<32])
            let oid = hex(bytes[32..<48])
            microsoftObjectID = [oid.prefix(8), oid.dropFirst(8).prefix(4), oid.dropFirst(12).prefix(4), oid.dropFirst(16).prefix(4), oid.dropFirst(20)]
                .joined(separator: "-")
            let digits = decimalDigits(hex(bytes[48..<64]))
            facebook = "10" + digits.prefix(15)
            dropboxUID = "4" + digits.suffix(9)
            dropbox = "dbid:AA" + base64URL(bytes[16..<48]).prefix(38)
            oidc = hex(bytes[0..<16])
            github = String(10_000_000 + (Int(digits.prefix(9)) ?? 0) % 190_000_000)
            githubLogin = "octo-" + hex(bytes[0..<4])
            discord = "1" + digits.prefix(17)
            x = "17" + digits.suffix(17)
            gitlab = String(1_000_000 + (Int(digits.dropFirst(9).prefix(8)) ?? 0) % 30_000_000)
            slack = "U" + hex(bytes[20..<25]).uppercased()
        }
    }

    /// `c68eafb759bcc49d9b9620ee0e3de91ba.0.mxzs.gN4k953WIuRVUIqZ4LJl9A`
    static func authorizationCode() -> String {
        "c\(randomHex(16)).0.\(randomAlphanumeric(4)).\(randomAlphanumeric(22, alphabet: base64URLAlphabet))"
    }

    static func refreshToken() -> String {
        "r\(randomHex(16)).0.\(randomAlphanumeric(4)).\(randomAlphanumeric(22, alphabet: base64URLAlphabet))"
    }

    /// `beg5105ed7a4def32adec143038877c2b.0.nx.20LreF67Or9`
    static func accessToken() -> String {
        "a\(randomHex(16)).0.nx.\(randomAlphanumeric(12, alphabet: base64URLAlphabet))"
    }

    /// `760417.ebbf12acbc78e1be1668ba852d492d8a.1827`
    static func transferSubject() -> String {
        "\(randomAlphanumeric(6, alphabet: "0123456789")).\(randomHex(16)).\(randomAlphanumeric(4, alphabet: "0123456789"))"
    }

    /// A Team ID: 10 upper-case letters and digits.
    static func isTeamID(_ value: String) -> Bool {
        value.utf8.count == 10
            && value.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    /// The id of a team's Sign in with Apple key (a `.p8`): 10 upper-case letters and digits.
    static func teamKeyID() -> String { randomAlphanumeric(10, alphabet: "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") }

    /// A key id: 10 characters for Apple, 40 hex for Google.
    static func appleKeyID() -> String { randomAlphanumeric(10, alphabet: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") }
    static func googleKeyID() -> String { randomHex(20) }
    /// Microsoft's key ids look like certificate thumbprints: 27 base64url characters.
    static func microsoftKeyID() -> String { randomAlphanumeric(27, alphabet: base64URLAlphabet) }

    /// An opaque provider token: `prefix` and `count` base64url characters.
    static func providerToken(_ prefix: String, _ count: Int) -> String { prefix + randomAlphanumeric(count, alphabet: base64URLAlphabet) }

    static let base64URLAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
}
