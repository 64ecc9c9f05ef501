import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyTestSupport
import Synchronization
import Testing

@Suite("Apple REST client")
struct AppleClientTests {
    static let tokenBody = #"{"access_token":"a1","token_type":"Bearer","expires_in":3600,"refresh_token":"r1","id_token":"eyJ.x.y"}"#

    func client(_ transport: InMemoryTransport, retry: RetryPolicy = .init(maximumAttempts: 3, initialBackoff: .milliseconds(1))) -> AppleClient {
        let credentials = try! AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        let configuration = AppleConfiguration(
            credentials: credentials, clientIDs: [Fixtures.bundleID, Fixtures.servicesID], baseURL: "http://127.0.0.1:9/", retry: retry
        )
        return try! AppleClient(configuration: configuration, transport: transport, timeSource: .fixed(Fixtures.now))
    }

    @Test("a native code is redeemed with the bundle id and without redirect_uri")
    func nativeExchange() async throws {
        let transport = InMemoryTransport.answering(200, Self.tokenBody)
        let tokens = try await client(transport).exchangeCode("code-1", clientID: Fixtures.bundleID)
        #expect(tokens.refreshToken == "r1")
        #expect(tokens.accessToken == "a1")
        let request = try #require(transport.requests.first)
        #expect(request.url == "http://127.0.0.1:9/auth/token")
        #expect(request.method == "POST")
        let fields = request.formFields
        #expect(fields["grant_type"] == "authorization_code")
        #expect(fields["code"] == "code-1")
        #expect(fields["client_id"] == Fixtures.bundleID)
        #expect(fields["redirect_uri"] == nil)
        #expect(fields["client_secret"]?.split(separator: ".").count == 3)
    }

    @Test("a web code carries its redirect_uri")
    func webExchange() async throws {
        let transport = InMemoryTransport.answering(200, Self.tokenBody)
        _ = try await client(transport).exchangeCode("code-2", clientID: Fixtures.servicesID, redirectURI: "https://example.com/callback?a=b")
        #expect(transport.requests.first?.formFields["redirect_uri"] == "https://example.com/callback?a=b")
    }

    @Test("refresh validation, revocation and transfer calls send the right fields")
    func otherCalls() async throws {
        let transport = InMemoryTransport { request throws(LatchkeyError) in
            let fields = request.formFields
            if request.url.hasSuffix("/auth/revoke") { return OutboundResponse(status: 200) }
            if request.url.hasSuffix("/auth/usermigrationinfo") {
                if fields["transfer_sub"] != nil {
                    return OutboundResponse(
                        status: 200, body: Array(#"{"sub":"820417.faa3.0219","email":"x@privaterelay.appleid.com","is_private_email":true}"#.utf8))
                }
                return OutboundResponse(status: 200, body: Array(#"{"transfer_sub":"760417.ebbf.1827"}"#.utf8))
            }
            if fields["grant_type"] == "client_credentials" {
                return OutboundResponse(status: 200, body: Array(#"{"access_token":"team-token","token_type":"Bearer","expires_in":3600}"#.utf8))
            }
            return OutboundResponse(status: 200, body: Array(#"{"access_token":"a2","token_type":"Bearer","expires_in":3600,"id_token":"x.y.z"}"#.utf8))
        }
        let apple = client(transport)
        let refreshed = try await apple.validateRefreshToken("r1", clientID: Fixtures.bundleID)
        #expect(refreshed.refreshToken == nil)
        #expect(transport.requests[0].formFields["refresh_token"] == "r1")
        try await apple.revoke("r1", clientID: Fixtures.bundleID)
        #expect(transport.requests[1].formFields["token_type_hint"] == "refresh_token")
        #expect(try await apple.makeTransferSubject(for: "000123.abc.0456", recipientTeamID: "TEAMB12345", clientID: Fixtures.bundleID) == "760417.ebbf.1827")
        #expect(transport.requests[2].formFields["scope"] == "user.migration")
        #expect(transport.requests[3].headers.contains { $0.name == "Authorization" && $0.value == "Bearer team-token" })
        #expect(transport.requests[3].formFields["target"] == "TEAMB12345")
        let migrated = try await apple.exchangeTransferSubject("760417.ebbf.1827", clientID: Fixtures.bundleID)
        #expect(migrated == AppleMigratedUser(sub: "820417.faa3.0219", email: "x@privaterelay.appleid.com", isPrivateEmail: true))
    }

    @Test(
        "Apple's error codes become explained errors",
        arguments: [
            ("invalid_client", LatchkeyError.Code.invalidClient), ("invalid_grant", .invalidGrant), ("invalid_request", .invalidRequest),
            ("unauthorized_client", .unauthorizedClient), ("unsupported_grant_type", .unsupportedGrantType), ("invalid_scope", .invalidScope),
            ("something_new", .invalidProviderResponse),
        ])
    func errors(wire: String, code: LatchkeyError.Code) async throws {
        let transport = InMemoryTransport.answering(400, #"{"error":"\#(wire)"}"#)
        do {
            _ = try await client(transport).exchangeCode("c", clientID: Fixtures.bundleID)
            Issue.record("no error")
        } catch {
            #expect(error.code == code)
        }
    }

    @Test("invalid_client lists the likely causes with the configured ids")
    func invalidClientCauses() async throws {
        do {
            _ = try await client(.answering(400, #"{"error":"invalid_client"}"#)).exchangeCode("c", clientID: Fixtures.servicesID)
        } catch {
            #expect(error.likelyCauses.count >= 5)
            #expect(error.likelyCauses.contains { $0.contains("DER") })
            #expect(error.likelyCauses.contains { $0.contains(Fixtures.keyID) })
            #expect(error.reason.contains(Fixtures.servicesID))
        }
    }

    @Test("invalid_grant says whether a code or a refresh token was refused")
    func invalidGrantContext() async throws {
        let apple = client(.answering(400, #"{"error":"invalid_grant"}"#))
        do { _ = try await apple.exchangeCode("c", clientID: Fixtures.bundleID) } catch {
            #expect(error.reason.contains("authorization code"))
            #expect(error.reason.contains("five minutes"))
        }
        do { _ = try await apple.validateRefreshToken("r", clientID: Fixtures.bundleID) } catch {
            #expect(error.reason.contains("refresh token"))
            #expect(error.reason.contains("revoked"))
        }
    }

    @Test("5xx and 429 are retried for safe calls, never for the code exchange")
    func retries() async throws {
        let failures = Mutex(2)
        let flaky = InMemoryTransport { _ throws(LatchkeyError) in
            let fail = failures.withLock { remaining in
                defer { remaining -= 1 }
                return remaining > 0
            }
            return fail ? OutboundResponse(status: 503) : OutboundResponse(status: 200, body: Array(Self.tokenBody.utf8))
        }
        _ = try await client(flaky).validateRefreshToken("r", clientID: Fixtures.bundleID)
        #expect(flaky.count == 3)

        let down = InMemoryTransport.answering(503, "")
        await #expect(throws: LatchkeyError(.providerUnavailable, "")) { _ = try await client(down).exchangeCode("c", clientID: Fixtures.bundleID) }
        #expect(down.count == 1)

        let throttled = InMemoryTransport.answering(429, "")
        await #expect(throws: LatchkeyError(.providerRateLimited, "")) { try await client(throttled).revoke("r", clientID: Fixtures.bundleID) }
        #expect(throttled.count == 3)
    }

    @Test("unreadable answers are invalid_provider_response", arguments: [(200, "not json"), (200, #"{"token_type":"Bearer"}"#), (400, "<html>"), (302, "")])
    func unreadable(status: Int, body: String) async throws {
        await #expect(throws: LatchkeyError(.invalidProviderResponse, "")) {
            _ = try await client(.answering(status, body)).exchangeCode("c", clientID: Fixtures.bundleID)
        }
    }

    @Test("a client id that is not configured, or no client ids at all, are configuration errors")
    func configuration() async throws {
        await #expect(throws: LatchkeyError(.invalidConfiguration, "")) {
            _ = try await client(.answering(200, Self.tokenBody)).exchangeCode("c", clientID: "com.unknown")
        }
        let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        #expect(throws: LatchkeyError(.invalidConfiguration, "")) {
            _ = try AppleClient(configuration: AppleConfiguration(credentials: credentials, clientIDs: []), transport: InMemoryTransport.answering(200, ""))
        }
    }

    @Test("an unreachable Apple surfaces as provider_unavailable through the real HTTP client")
    func unreachable() async throws {
        let credentials = try AppleSigningCredentials(teamID: Fixtures.teamID, keyID: Fixtures.keyID, privateKeyPEM: Fixtures.p8)
        let configuration = AppleConfiguration(
            credentials: credentials, clientIDs: [Fixtures.bundleID], baseURL: "http://127.0.0.1:1", requestTimeout: .seconds(2), retry: .never)
        let apple = try AppleClient(configuration: configuration)
        await #expect(throws: LatchkeyError(.providerUnavailable, "")) { _ = try await apple.exchangeCode("c", clientID: Fixtures.bundleID) }
    }
}
