import Foundation
import HTTPTypes
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE

/// DPoP (RFC 9449) on the routes that start or refresh sessions: a proof there is verified and its key binds the
/// session the request starts (``SessionBinding``); `dpop.mode` `require` refuses a sign-in without one. With
/// `dpop.requireNonce`, every answer of these routes carries the current `DPoP-Nonce`.
struct DPoPMiddleware: RouterMiddleware {
    typealias Context = LatchkeyRequestContext
    let proofs: DPoPProofs
    let issuer: String

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.method == .post, let route = Self.route(context.endpointPath ?? request.uri.path) else { return try await next(request, context) }
        var response: Response
        do {
            // A merge also presents the guest's access token: a proof that goes with it carries its `ath`.
            let accessToken = request.authorization.flatMap { $0.0 == .dpop ? $0.1 : nil }
            let proof = try await LatchkeyServer.verifiedProof(request, proofs: proofs, issuer: issuer, accessToken: accessToken)
            if proof == nil, route == .signIn, proofs.policy.mode == .require {
                throw LatchkeyError(.invalidDPoPProof, "this server binds every session to a device key: send a DPoP proof (RFC 9449) with the sign-in")
            }
            response = try await SessionBinding.$current.withValue(SessionBinding(dpopThumbprint: proof?.thumbprint)) { try await next(request, context) }
        } catch let error as LatchkeyError where error.code == .useDPoPNonce || error.code == .invalidDPoPProof {
            var refusal = APIError(status: .badRequest, code: error.errorCode, description: error.reason)
            if error.code == .useDPoPNonce { refusal.headers[.dpopNonce] = proofs.nonces.current }
            throw refusal
        }
        if proofs.policy.requireNonce { response.headers[.dpopNonce] = proofs.nonces.current }
        return response
    }

    enum Route { case signIn, token }

    /// The routes that take a proof at the token endpoint's rules (RFC 9449 §5): sign-ins, merges and the two token
    /// endpoints.
    static func route(_ path: String) -> Route? {
        if path.hasPrefix("/v1/auth/") || path.hasPrefix("/v1/me/merge/") { return .signIn }
        if path == "/v1/token" || path == "/oauth2/token" { return .token }
        return nil
    }
}

extension HTTPField.Name {
    static let dpop = HTTPField.Name("DPoP")!
    static let dpopNonce = HTTPField.Name("DPoP-Nonce")!
}

extension LatchkeyServer {
    /// The request's `DPoP` proof for this URL (`publicUrl` and the path, without the query), verified; nil when it
    /// sends none. More than one is refused.
    static func verifiedProof(_ request: Request, proofs: DPoPProofs, issuer: String, accessToken: String?) async throws -> VerifiedDPoPProof? {
        let values = request.headers[values: .dpop]
        guard let proof = values.first else { return nil }
        guard values.count == 1 else { throw LatchkeyError(.invalidDPoPProof, "the request carries more than one DPoP header") }
        return try await proofs.verify(proof, method: request.method.rawValue, url: issuer + request.uri.path, accessToken: accessToken)
    }

    /// Checks how a resource request presents its access token: a DPoP-bound token (`cnf.jkt`) only as
    /// `Authorization: DPoP` with a proof by its key carrying `ath`, an unbound one only as `Bearer`.
    func checkPresentation(_ request: Request, scheme: AuthorizationScheme, token: String, verified: VerifiedAccessToken) async throws {
        guard let bound = verified.boundKeyThumbprint else {
            guard scheme == .bearer else {
                throw Self.resourceRefusal("invalid_token", "this access token is not DPoP-bound: send it as Authorization: Bearer")
            }
            return
        }
        guard scheme == .dpop else {
            throw Self.resourceRefusal("invalid_token", "this access token is DPoP-bound: send it as Authorization: DPoP with a DPoP proof by its key")
        }
        // The middleware has verified (and spent) a merge's proof, with this token's `ath`.
        var thumbprint = SessionBinding.current.dpopThumbprint
        if thumbprint == nil {
            do {
                thumbprint = try await Self.verifiedProof(request, proofs: dpopProofs, issuer: configuration.issuer, accessToken: token)?.thumbprint
            } catch let error as LatchkeyError where error.code == .useDPoPNonce || error.code == .invalidDPoPProof {
                throw Self.resourceRefusal(error.errorCode, error.reason, nonce: error.code == .useDPoPNonce ? dpopProofs.nonces.current : nil)
            }
        }
        guard let thumbprint else {
            throw Self.resourceRefusal("invalid_dpop_proof", "a DPoP-bound access token goes with a DPoP proof (the DPoP header)")
        }
        guard thumbprint == bound else { throw Self.resourceRefusal("invalid_dpop_proof", "the DPoP proof is by another key than the token's") }
    }

    /// A resource request's 401 (RFC 9449 §7.1), with the `WWW-Authenticate: DPoP` challenge.
    static func resourceRefusal(_ code: String, _ description: String, nonce: String? = nil) -> APIError {
        var headers: HTTPFields = [.wwwAuthenticate: #"DPoP error="\#(code)", algs="\#(DPoPProofCheck.algorithms.joined(separator: " "))""#]
        if let nonce { headers[.dpopNonce] = nonce }
        return APIError(status: .unauthorized, code: code, description: description, headers: headers)
    }
}
