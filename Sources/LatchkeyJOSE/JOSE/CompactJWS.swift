import ExtrasBase64
import Foundation

/// A compact JWS split into its parts, with the header decoded. Nothing is verified yet.
public struct CompactJWS: Sendable {
    /// The largest token accepted by default. Real ID tokens are 1–2 KiB.
    public static let defaultMaximumSize = 16 * 1024

    /// The decoded protected header.
    public let header: JOSEHeader
    /// The protected header's JSON bytes, for the members ``JOSEHeader`` does not read (a DPoP proof's `jwk`).
    public let headerJSON: [UInt8]
    /// The payload's JSON bytes.
    public let payload: [UInt8]
    /// The raw signature bytes.
    public let signature: [UInt8]
    /// `BASE64URL(header) || '.' || BASE64URL(payload)`, the bytes the signature covers.
    public let signingInput: ArraySlice<UInt8>

    /// Splits and decodes `token`, refusing anything that is not a well-formed compact JWS.
    public init(parsing token: String, maximumSize: Int = CompactJWS.defaultMaximumSize) throws(LatchkeyError) {
        let bytes = Array(token.utf8)
        guard bytes.count <= maximumSize else {
            throw LatchkeyError(.tokenTooLarge, "the token is \(bytes.count) bytes; at most \(maximumSize) are accepted")
        }
        guard let first = bytes.firstIndex(of: UInt8(ascii: ".")),
            let second = bytes[(first + 1)...].firstIndex(of: UInt8(ascii: ".")),
            !bytes[(second + 1)...].contains(UInt8(ascii: "."))
        else {
            throw LatchkeyError(.malformedToken, "a JWT has exactly three dot-separated segments (header.payload.signature)")
        }
        let headerBytes = try Self.decodeSegment(bytes[..<first], name: "header")
        let payloadBytes = try Self.decodeSegment(bytes[(first + 1)..<second], name: "payload")
        let signatureBytes = try Self.decodeSegment(bytes[(second + 1)...], name: "signature")
        guard !signatureBytes.isEmpty else {
            throw LatchkeyError(.unsupportedAlgorithm, "the token is unsigned; unsecured JWTs (alg none) are never accepted")
        }
        self.header = try JOSEHeader(json: headerBytes)
        self.headerJSON = headerBytes
        self.payload = payloadBytes
        self.signature = signatureBytes
        self.signingInput = bytes[..<second]
    }

    private static func decodeSegment(_ segment: ArraySlice<UInt8>, name: String) throws(LatchkeyError) -> [UInt8] {
        if segment.contains(UInt8(ascii: "=")) {
            throw LatchkeyError(.malformedToken, "the \(name) segment is padded; JWTs use unpadded base64url")
        }
        let decoded: [UInt8]
        do {
            decoded = try Base64.decode(bytes: segment, options: [.base64UrlAlphabet, .omitPaddingCharacter])
        } catch {
            throw LatchkeyError(.malformedToken, "the \(name) segment is not valid base64url")
        }
        // A last character with unused bits set decodes to the same bytes as the canonical one; refusing it
        // keeps one token one string, which single-use sign-ins and token hashes rely on. Groups of four
        // characters encode three bytes from the start, so only the last, partial group can carry unused bits.
        let partial = segment.count % 4
        guard
            partial == 0
                || Base64.encodeToBytes(bytes: decoded.suffix(partial - 1), options: [.base64UrlAlphabet, .omitPaddingCharacter])
                    == Array(segment.suffix(partial))
        else {
            throw LatchkeyError(.malformedToken, "the \(name) segment is not canonical base64url (its last character has unused bits set)")
        }
        return decoded
    }
}

/// The JOSE header fields Latchkey acts on. Unknown fields are ignored unless listed in `crit`.
public struct JOSEHeader: Sendable, Equatable {
    /// The signature algorithm, such as `RS256`.
    public let alg: String
    /// The key id used to pick the verification key.
    public let kid: String?
    /// The media type, such as `JWT` or `at+jwt`.
    public let typ: String?
    /// Extensions the verifier must understand (RFC 7515 §4.1.11). Latchkey understands none.
    public let crit: [String]?

    init(json: [UInt8]) throws(LatchkeyError) {
        do {
            let object = try LeanJSONObject(parsing: json)
            guard let alg = try object.string("alg") else { throw LeanJSONError.invalidJSON(offset: 0) }
            self.alg = alg
            self.kid = try object.string("kid")
            self.typ = try object.string("typ")
            self.crit = try object.decode([String].self, "crit")
        } catch LeanJSONError.duplicateKey(let name) {
            throw LatchkeyError(.malformedToken, "the header names \"\(name.prefix(32))\" more than once")
        } catch {
            throw LatchkeyError(.malformedToken, "the header is not a JSON object with a string \"alg\"")
        }
    }
}

/// Reads a JWT's header and payload **without verifying anything**: for display and debugging only.
/// Never make a decision on what this returns.
public enum UnverifiedJWT {
    /// The decoded JSON bytes of the header and the payload, and whether a signature segment is present.
    public static func contents(of token: String, maximumSize: Int = 64 * 1024) throws(LatchkeyError) -> (header: [UInt8], payload: [UInt8], signed: Bool) {
        let bytes = Array(token.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        guard bytes.count <= maximumSize else { throw LatchkeyError(.tokenTooLarge, "the token is \(bytes.count) bytes") }
        let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else {
            throw LatchkeyError(.malformedToken, "a JWT has exactly three dot-separated segments (header.payload.signature); this has \(segments.count)")
        }
        func decode(_ segment: ArraySlice<UInt8>, _ name: String) throws(LatchkeyError) -> [UInt8] {
            do {
                return try Base64.decode(bytes: segment, options: [.base64UrlAlphabet, .omitPaddingCharacter])
            } catch {
                throw LatchkeyError(.malformedToken, "the \(name) segment is not valid base64url")
            }
        }
        return (try decode(segments[0], "header"), try decode(segments[1], "payload"), !segments[2].isEmpty)
    }
}
