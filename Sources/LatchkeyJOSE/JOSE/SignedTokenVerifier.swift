/// Checks the envelope of a compact JWS: size, shape, header, algorithm allow-list, key and signature.
/// Claims are the caller's business; this returns the verified payload bytes.
public struct SignedTokenVerifier: Sendable {
    /// Algorithms accepted, such as `["RS256"]` for Apple. Never `none`; an HMAC algorithm only when the resolver holds
    /// the shared secret for it (``VerificationKeyResolver/sharedSecretAlgorithms``), never with public keys.
    public let allowedAlgorithms: Set<String>
    public let keys: any VerificationKeyResolver
    public let maximumTokenSize: Int

    public init(
        allowedAlgorithms: Set<String>,
        keys: any VerificationKeyResolver,
        maximumTokenSize: Int = CompactJWS.defaultMaximumSize
    ) {
        self.allowedAlgorithms = allowedAlgorithms.subtracting(Set(["none", "HS256", "HS384", "HS512"]).subtracting(keys.sharedSecretAlgorithms))
        self.keys = keys
        self.maximumTokenSize = maximumTokenSize
    }

    /// Returns the parsed token once its signature is proven.
    public func verify(_ token: String) async throws(LatchkeyError) -> CompactJWS {
        let jws = try CompactJWS(parsing: token, maximumSize: maximumTokenSize)
        let alg = jws.header.alg
        guard allowedAlgorithms.contains(alg) else {
            throw LatchkeyError(
                .unsupportedAlgorithm,
                "alg \"\(alg.prefix(16))\" is not allowed here (allowed: \(allowedAlgorithms.sorted().joined(separator: ", ")))"
            )
        }
        if let crit = jws.header.crit {
            throw LatchkeyError(
                .unsupportedCriticalHeader,
                "the header marks \(crit.map { "\"\($0.prefix(32))\"" }.joined(separator: ", ")) as critical; Latchkey understands no JWS extensions"
            )
        }
        let kid = jws.header.kid ?? ""
        // A shared-secret token names no key; a token that names one is checked against that public key, and its
        // algorithm must be the key's.
        let key = kid.isEmpty ? try await keys.sharedSecretKey(algorithm: alg) : try await keys.key(forKeyID: kid)
        guard key.algorithm == alg else {
            throw LatchkeyError(
                .unsupportedAlgorithm,
                "the header says alg \"\(alg)\" but key \"\(kid)\" is a \(key.algorithm) key; one key verifies one algorithm"
            )
        }
        guard key.isValidSignature(jws.signature, for: jws.signingInput) else {
            let keyName = kid.isEmpty ? "the shared secret" : "key \"\(kid)\""
            throw LatchkeyError(.invalidSignature, "the signature does not match \(keyName); the token was altered or signed by someone else")
        }
        return jws
    }
}
