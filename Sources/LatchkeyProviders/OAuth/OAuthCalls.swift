import Foundation
import LatchkeyCore
import LatchkeyJOSE

/// What an OAuth 2.0 token endpoint answers (RFC 6749 §5.1), with the provider-specific fields Latchkey reads.
struct OAuthTokenAnswer: Decodable, Sendable {
    var access_token: String?
    var id_token: String?
    var refresh_token: String?
    /// Dropbox names the account in the token answer.
    var account_id: String?
}

/// Calls to a provider's HTTP endpoints, with errors that name the provider and never echo a token.
struct ProviderCalls: Sendable {
    let provider: String
    let displayName: String
    let transport: any HTTPTransport
    let timeout: Duration
    let observer: ProviderCallObserver?

    /// POSTs a form to a token, revocation or similar endpoint; returns the 200 answer's body.
    func postForm(_ url: String, _ fields: [(String, String)], headers: [(name: String, value: String)] = [], operation: String) async throws(LatchkeyError)
        -> [UInt8]
    {
        try await send(OutboundRequest.form(url: url, fields: fields, headers: headers, timeout: timeout), operation: operation)
    }

    /// Sends a request; a non-200 answer becomes an error in RFC 6749 terms.
    /// - Parameter bearer: the request presents a token to an API (not to an OAuth endpoint): a 400 or 401 without an
    ///   RFC 6749 error code then means the API refused that token. From a token, revocation or discovery endpoint the
    ///   same answer (an empty body, a proxy's HTML page) says nothing about the grant.
    /// - Parameter gone: statuses that mean the provider no longer knows the token presented (GitHub's 404): the grant
    ///   is gone, an `invalid_grant`.
    func send(_ request: OutboundRequest, operation: String, bearer: Bool = false, gone: Set<Int> = []) async throws(LatchkeyError) -> [UInt8] {
        do throws(LatchkeyError) {
            let response = try await transport.send(request)
            if gone.contains(response.status) {
                throw LatchkeyError(.invalidGrant, "\(displayName) no longer knows the token (HTTP \(response.status)): it was revoked or has expired")
            }
            // 2xx: GitHub answers a revocation with 204 No Content.
            guard (200..<300).contains(response.status) else { throw error(for: response, operation: operation, bearer: bearer) }
            observer?(provider, operation, "ok")
            return response.body
        } catch {
            observer?(provider, operation, error.errorCode)
            throw error
        }
    }

    func decode<T: Decodable>(_ type: T.Type, _ body: [UInt8], what: String) throws(LatchkeyError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(body))
        } catch {
            throw LatchkeyError(.invalidProviderResponse, "\(displayName)'s \(what) answered 200 with a body Latchkey cannot read")
        }
    }

    private func error(for response: OutboundResponse, operation: String, bearer: Bool) -> LatchkeyError {
        if response.status == 429 { return LatchkeyError(.providerRateLimited, "\(displayName) is throttling requests (HTTP 429); try again later") }
        if response.status >= 500 { return LatchkeyError(.providerUnavailable, "\(displayName) answered HTTP \(response.status); try again later") }
        struct ErrorBody: Decodable { let error: String? }
        let code = (try? JSONDecoder().decode(ErrorBody.self, from: Data(response.body)))?.error
        switch code {
        case "invalid_grant":
            return LatchkeyError(
                .invalidGrant,
                operation == "code_exchange"
                    ? "\(displayName) refused the authorization code: it is unknown, expired or already used, or the code verifier or redirect URI does not match the authorization request"
                    : "\(displayName) refused the stored grant (invalid_grant): the user disconnected this app or the token expired")
        case "invalid_token" where operation == "revocation":
            // RFC 7009 §2.2: the token is no longer valid (Google answers this for one revoked already): nothing is left to revoke.
            return LatchkeyError(.invalidGrant, "\(displayName) no longer knows the token (invalid_token): it was revoked or has expired")
        case "invalid_client":
            return LatchkeyError(
                .invalidClient, "\(displayName) did not accept the client id or secret; check the \(provider).clientIds and \(provider).clientSecret settings")
        case .some(let code):
            return LatchkeyError(
                .invalidRequest, "\(displayName) refused the \(operation.replacingOccurrences(of: "_", with: " ")) request: \(code.prefix(64))")
        case nil:
            // Bearer-token APIs (Dropbox, Facebook Graph) answer 400/401, with errors of their own shape, for a token they do not accept.
            if bearer, response.status == 400 || response.status == 401 {
                return LatchkeyError(.invalidGrant, "\(displayName) did not accept the token (HTTP \(response.status)): it is invalid, expired or revoked")
            }
            return LatchkeyError(.invalidProviderResponse, "\(displayName) answered HTTP \(response.status) without an error code")
        }
    }
}
