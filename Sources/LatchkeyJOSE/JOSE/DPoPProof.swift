public import Crypto
import ExtrasBase64
public import Foundation

/// A DPoP proof (RFC 9449) whose signature, key, method, URL, age and access-token hash have been checked. Its single
/// use (``jti``) and its ``nonce`` are the caller's to check: they need state this value does not have.
public struct VerifiedDPoPProof: Sendable, Equatable {
    /// The RFC 7638 SHA-256 thumbprint of the proof's key, base64url: what a session or an access token (`cnf.jkt`) is
    /// bound to.
    public let thumbprint: String
    /// The proof's unique id.
    public let jti: String
    public let issuedAt: Date
    /// The server-provided nonce the proof carries, if any.
    public let nonce: String?
}

/// Checks DPoP proofs (RFC 9449 §4.3): `typ` `dpop+jwt`, an allowed `alg` (ES256), a public P-256 `jwk` and the
/// signature by it, `htm`, `htu` without query or fragment, `iat` within ``maximumAge``, and `ath` when an access
/// token goes with the proof. Every failure is `invalid_dpop_proof` with the reason.
public struct DPoPProofCheck: Sendable {
    /// The algorithms proofs may be signed with (`dpop_signing_alg_values_supported`).
    public static let algorithms = ["ES256"]
    /// The largest proof accepted. Real ones are under 1 KiB.
    public static let maximumSize = 4096

    /// How far a proof's `iat` may lie from now, either way.
    public let maximumAge: TimeInterval
    public let timeSource: TimeSource

    public init(maximumAge: TimeInterval = 60, timeSource: TimeSource = .system) {
        self.maximumAge = maximumAge
        self.timeSource = timeSource
    }

    /// Verifies `proof` for a request with `method` to `url`; with `accessToken`, its `ath` must be that token's hash.
    public func verify(_ proof: String, method: String, url: String, accessToken: String? = nil) throws(LatchkeyError) -> VerifiedDPoPProof {
        let jws: CompactJWS
        do {
            jws = try CompactJWS(parsing: proof, maximumSize: Self.maximumSize)
        } catch {
            throw Self.invalid("the DPoP proof is not a compact JWS (\(error.reason))")
        }
        guard jws.header.typ?.lowercased() == "dpop+jwt" else { throw Self.invalid("the DPoP proof's typ is not dpop+jwt") }
        guard Self.algorithms.contains(jws.header.alg) else {
            throw Self.invalid("the DPoP proof's alg \"\(jws.header.alg.prefix(16))\" is not allowed (allowed: \(Self.algorithms.joined(separator: ", ")))")
        }
        guard jws.header.crit == nil else { throw Self.invalid("the DPoP proof marks header members as critical; none is understood") }
        let header: Header
        let claims: Claims
        do {
            header = try LeanJSONDecoder().decode(Header.self, from: jws.headerJSON)
            claims = try LeanJSONDecoder().decode(Claims.self, from: jws.payload)
        } catch {
            throw Self.invalid("the DPoP proof's header needs a jwk, and its claims jti, htm, htu and iat")
        }
        let key = try Self.publicKey(header.jwk)
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: jws.signature),
            key.isValidSignature(signature, for: jws.signingInput)
        else { throw Self.invalid("the DPoP proof's signature does not match its jwk") }
        guard (1...256).contains(claims.jti.utf8.count) else { throw Self.invalid("the DPoP proof's jti is empty or longer than 256 bytes") }
        guard claims.htm == method else { throw Self.invalid("the DPoP proof's htm is \(claims.htm.prefix(16)), not \(method)") }
        guard let presented = Self.comparableURL(claims.htu), presented == Self.comparableURL(url) else {
            throw Self.invalid("the DPoP proof's htu is not this endpoint's URL (\(Self.comparableURL(url) ?? url))")
        }
        let now = timeSource.now.timeIntervalSince1970
        guard claims.iat.isFinite, abs(now - claims.iat) <= maximumAge else {
            throw Self.invalid("the DPoP proof's iat is more than \(Int(maximumAge)) s from the server's time; make a new proof")
        }
        if let accessToken {
            guard let ath = claims.ath else { throw Self.invalid("the DPoP proof lacks ath, the hash of the access token it goes with") }
            guard ath == base64URL(Array(SHA256.hash(data: Array(accessToken.utf8)))) else {
                throw Self.invalid("the DPoP proof's ath is not the hash of this access token")
            }
        }
        return VerifiedDPoPProof(
            thumbprint: Self.thumbprint(x: header.jwk.x, y: header.jwk.y), jti: claims.jti, issuedAt: Date(timeIntervalSince1970: claims.iat),
            nonce: claims.nonce)
    }

    /// The RFC 7638 thumbprint of a P-256 public key: SHA-256 over its required members in lexical order, base64url.
    public static func thumbprint(of key: P256.Signing.PublicKey) -> String {
        let raw = Array(key.rawRepresentation)
        return thumbprint(x: base64URL(Array(raw.prefix(32))), y: base64URL(Array(raw.suffix(32))))
    }

    private static func thumbprint(x: String, y: String) -> String {
        // The members are base64url text checked by `publicKey(_:)`: nothing in them needs JSON escaping.
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#
        return base64URL(Array(SHA256.hash(data: Array(canonical.utf8))))
    }

    private struct Header: Decodable {
        var jwk: JWK
    }

    struct JWK: Decodable {
        var kty: String
        var crv: String?
        var x: String
        var y: String
        /// A private key's member; its presence refuses the proof.
        var d: String?
    }

    private struct Claims: Decodable {
        var jti: String
        var htm: String
        var htu: String
        var iat: Double
        var ath: String?
        var nonce: String?
    }

    private static func publicKey(_ jwk: JWK) throws(LatchkeyError) -> P256.Signing.PublicKey {
        guard jwk.d == nil else { throw invalid("the DPoP proof's jwk holds a private key; send the public key only") }
        guard jwk.kty == "EC", jwk.crv == "P-256" else { throw invalid("the DPoP proof's jwk is not an EC P-256 key") }
        guard let x = coordinate(jwk.x), let y = coordinate(jwk.y), let key = try? P256.Signing.PublicKey(rawRepresentation: x + y) else {
            throw invalid("the DPoP proof's jwk is not a valid P-256 public key")
        }
        return key
    }

    /// A 32-byte coordinate in canonical unpadded base64url, else nil.
    private static func coordinate(_ text: String) -> [UInt8]? {
        guard let bytes = try? Base64.decode(string: text, options: [.base64UrlAlphabet, .omitPaddingCharacter]), bytes.count == 32,
            base64URL(bytes) == text
        else { return nil }
        return bytes
    }

    /// The URL as RFC 9449 compares it: scheme and host in lower case, no default port, no query, no fragment.
    static func comparableURL(_ text: String) -> String? {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
            let host = components.host?.lowercased(), !host.isEmpty
        else { return nil }
        let port = components.port.flatMap { (scheme == "https" && $0 == 443) || (scheme == "http" && $0 == 80) ? nil : $0 }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        return "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")\(path)"
    }

    private static func invalid(_ reason: String) -> LatchkeyError { LatchkeyError(.invalidDPoPProof, reason) }
}
