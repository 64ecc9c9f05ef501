import Foundation
import LatchkeyModels

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// An access token and the scheme it goes with: `DPoP` for a token bound to the device key, `Bearer` otherwise.
struct AccessCredential: Sendable, Equatable {
    let token: String
    let isDPoP: Bool

    init(token: String, tokenType: String?) {
        self.token = token
        isDPoP = tokenType?.caseInsensitiveCompare("DPoP") == .orderedSame
    }

    /// The credential an `Authorization` header carries, or nil for another scheme.
    init?(authorization header: String?) {
        guard let header, let space = header.firstIndex(of: " ") else { return nil }
        let scheme = header[..<space].lowercased()
        guard scheme == "bearer" || scheme == "dpop" else { return nil }
        self.init(token: String(header[header.index(after: space)...]), tokenType: scheme)
    }

    /// The `Authorization` header's value.
    var authorization: String { (isDPoP ? "DPoP " : "Bearer ") + token }
}

/// Makes one client's DPoP proofs (RFC 9449): with its device key, for a request's method and URL, with `ath` when a
/// DPoP-bound access token goes with it, and with the nonce each server gave last (§8).
final class DPoPSigner: @unchecked Sendable {
    // @unchecked: `maker` and `nonces` are only read and written while holding `lock`; the rest are constants.
    private let lock = NSLock()
    private let source: DeviceKeySource
    private let clock: any LatchkeyClock
    private var maker: DPoPProofMaker?
    /// The latest `DPoP-Nonce` of each server, by origin.
    private var nonces: [String: String] = [:]

    init(source: DeviceKeySource, clock: any LatchkeyClock) {
        self.source = source
        self.clock = clock
    }

    /// The proof maker of the device key, loaded on first use.
    func proofMaker() throws -> DPoPProofMaker {
        if let maker = lock.withLock({ maker }) { return maker }
        let key = try source.key()
        let made: DPoPProofMaker
        do {
            made = try DPoPProofMaker(rawPublicKey: key.publicKey) { Array(try key.sign(Data($0))) }
        } catch {
            throw LatchkeyClientError.storageUnavailable("the device key's public key is not a P-256 point")
        }
        lock.withLock { maker = made }
        return made
    }

    /// The RFC 7638 thumbprint of the device key (`cnf.jkt` of the tokens bound to it).
    func thumbprint() throws -> String { try proofMaker().thumbprint }

    /// The nonce `url`'s server gave last.
    func nonce(for url: URL) -> String? { lock.withLock { nonces[Self.origin(url)] } }

    /// A proof for a request with `method` to `url`, going with `accessToken` (`ath`).
    func proof(method: String, url: URL, accessToken: String?) throws -> String {
        let maker = try proofMaker()
        do {
            return try maker.proof(method: method, url: url, accessToken: accessToken, nonce: nonce(for: url), at: clock.now)
        } catch {
            throw LatchkeyClientError.storageUnavailable("the device key did not sign (\(type(of: error)))")
        }
    }

    /// Sets `request`'s `DPoP` header: a proof for its method and URL, with `ath` when its `Authorization` is `DPoP`.
    func sign(_ request: inout URLRequest) throws {
        guard let url = request.url else { return }
        let credential = AccessCredential(authorization: request.value(forHTTPHeaderField: "Authorization"))
        let proof = try proof(method: request.httpMethod ?? "GET", url: url, accessToken: credential?.isDPoP == true ? credential?.token : nil)
        request.setValue(proof, forHTTPHeaderField: "DPoP")
    }

    /// Keeps the `DPoP-Nonce` of `response`, the answer of `url`'s server; true when it is not the one kept already.
    @discardableResult
    func remember(_ response: HTTPURLResponse, from url: URL) -> Bool {
        guard let nonce = response.value(forHTTPHeaderField: "DPoP-Nonce"), !nonce.isEmpty else { return false }
        return lock.withLock { nonces.updateValue(nonce, forKey: Self.origin(url)) != nonce }
    }

    /// Whether `response` asks for a proof with the nonce it carries (RFC 9449 §8, §9): `use_dpop_nonce` as the error
    /// of a JSON body (a 400 of the token and sign-in endpoints) or of a `DPoP` challenge (a resource's 401), with a
    /// `DPoP-Nonce` header.
    static func asksForNonce(_ response: HTTPURLResponse, body: Data) -> Bool {
        guard response.statusCode == 400 || response.statusCode == 401, response.value(forHTTPHeaderField: "DPoP-Nonce")?.isEmpty == false else {
            return false
        }
        if (try? JSONDecoder().decode(OAuthErrorResponse.self, from: body))?.error == "use_dpop_nonce" { return true }
        return LatchkeyClient.challengeError(response.value(forHTTPHeaderField: "WWW-Authenticate"), scheme: "dpop") == "use_dpop_nonce"
    }

    /// Whether `request` gets a proof: every request to the Latchkey server at `server`, and any other that carries a
    /// DPoP-bound access token (the app's backend).
    static func needsProof(_ request: URLRequest, server: URL) -> Bool {
        guard let url = request.url else { return false }
        if AccessCredential(authorization: request.value(forHTTPHeaderField: "Authorization"))?.isDPoP == true { return true }
        let base = server.path.hasSuffix("/") ? server.path : server.path + "/"
        return origin(url) == origin(server) && (url.path + "/").hasPrefix(base)
    }

    /// The `nonce` claim of a proof, read without checking it (the client's own proof).
    static func nonce(ofProof proof: String?) -> String? {
        let parts = proof?.split(separator: ".", omittingEmptySubsequences: false) ?? []
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        struct Claims: Decodable { let nonce: String? }
        return Data(base64Encoded: base64).flatMap { try? JSONDecoder().decode(Claims.self, from: $0) }?.nonce
    }

    /// `scheme://host:port` in lower case, the port spelled out.
    static func origin(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : 0)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }
}

/// The transport of a client with a device key: a proof on every request that needs one, and, when the server asks for
/// a nonce (`use_dpop_nonce`), the request once more with a proof carrying it.
struct DPoPTransport: LatchkeyTransport {
    let inner: any LatchkeyTransport
    let signer: DPoPSigner
    let server: URL

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        guard let url = request.url, DPoPSigner.needsProof(request, server: server) else { return try await inner.send(request) }
        var signed = request
        try signer.sign(&signed)
        let (data, response) = try await inner.send(signed)
        signer.remember(response, from: url)
        guard DPoPSigner.asksForNonce(response, body: data) else { return (data, response) }
        // Once: a second refusal is the answer (the server's nonce would not change within the retry).
        try signer.sign(&signed)
        let retried = try await inner.send(signed)
        signer.remember(retried.1, from: url)
        return retried
    }
}
