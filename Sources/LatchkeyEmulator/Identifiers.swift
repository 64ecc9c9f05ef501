import Crypto
import Foundation

/// Values shaped like the ones Apple and Google issue, so clients that check formats are not surprised.
enum Identifiers {
    static func randomHex(_ bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    static func randomAlphanumeric(_ count: Int, alphabet: String = "abcdefghijklmnopqrstuvwxyz0123456789") -> String {
        let characters = Array(alphabet)
        return String((0..<count).map { _ in characters.randomElement()! })
    }

    static func hexDigest(_ parts: String...) -> String {
        SHA256.hash(data: Array(parts.joined(separator: "|").utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// A team-scoped subject, `000123.<32 hex>.0456`: stable for a user and team, different across teams.
    static func appleSubject(userID: UUID, teamID: String) -> String {
        let digest = hexDigest(userID.uuidString, teamID)
        let digits = digest.unicodeScalars.compactMap { Int(String($0), radix: 16) }.map { String($0 % 10) }.joined()
        return "\(digits.prefix(6)).\(digest.prefix(32)).\(digits.suffix(4))"
    }

    /// The Hide My Email address of a user for a team.
    static func relayEmail(userID: UUID, teamID: String) -> String {
        "\(hexDigest("relay", userID.uuidString, teamID).prefix(10))@privaterelay.appleid.com"
    }

    /// A Google subject: 21 digits.
    static func googleSubject(userID: UUID) -> String {
        let digits = hexDigest("google", userID.uuidString).unicodeScalars.compactMap { Int(String($0), radix: 16) }.map { String($0 % 10) }.joined()
        return "1" + digits.prefix(20)
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

    /// A key id: 10 characters for Apple, 40 hex for Google.
    static func appleKeyID() -> String { randomAlphanumeric(10, alphabet: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") }
    static func googleKeyID() -> String { randomHex(20) }

    static let base64URLAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
}
