import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import LatchkeyProviders

/// `latchkey token inspect|verify`.
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Look inside identity tokens, or verify them fully.",
        subcommands: [Inspect.self, Verify.self]
    )

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decode a JWT's header and claims WITHOUT verifying it.",
            discussion: """
                Examples:
                  latchkey token inspect eyJraWQiOi...
                  pbpaste | latchkey token inspect - --json
                Exit codes: 0 decoded, 1 not a JWT, 64 usage.
                """
        )

        @Argument(help: "The JWT, or - to read it from standard input.") var token: String
        @Flag(help: "Print a JSON object instead.") var json = false

        func run() throws {
            let printer = Printer(json: json)
            let contents: (header: [UInt8], payload: [UInt8], signed: Bool)
            let header: [String: Any]
            let claims: [String: Any]
            do {
                contents = try UnverifiedJWT.contents(of: try readTokenArgument(token))
                guard let decodedHeader = try? JSONSerialization.jsonObject(with: Data(contents.header)) as? [String: Any] else {
                    throw LatchkeyError(.malformedToken, "the header is not a JSON object")
                }
                guard let decodedClaims = try? JSONSerialization.jsonObject(with: Data(contents.payload)) as? [String: Any] else {
                    throw LatchkeyError(.malformedToken, "the payload is not a JSON object")
                }
                header = decodedHeader
                claims = decodedClaims
            } catch let error as LatchkeyError {
                throw printer.fail(error.errorCode, error.reason)
            }
            let notes = Self.notes(header: header, claims: claims, signed: contents.signed)
            if json {
                printer.emit(["verified": false, "header": header, "claims": claims, "notes": notes])
                return
            }
            print(printer.yellow(printer.bold("UNVERIFIED — decoded only; nothing here is proven until `latchkey token verify` succeeds")))
            print(printer.bold("header"))
            for (key, value) in header.sorted(by: { $0.key < $1.key }) { print("  \(key): \(value)") }
            print(printer.bold("claims"))
            let now = Date()
            for (key, value) in claims.sorted(by: { $0.key < $1.key }) {
                if ["exp", "iat", "nbf", "auth_time"].contains(key), let seconds = (value as? NSNumber)?.doubleValue {
                    let date = Date(timeIntervalSince1970: seconds > 100_000_000_000 ? seconds / 1000 : seconds)
                    print(
                        "  \(key): \(Int(seconds)) = "
                            + (key == "exp" ? describeInstant(date, now: now, past: "ago — expired", future: "expires in") : describeInstant(date, now: now)))
                } else {
                    print("  \(key): \(value)")
                }
            }
            if !notes.isEmpty {
                print(printer.bold("what matters"))
                for note in notes { print("  - \(note)") }
            }
        }

        static func notes(header: [String: Any], claims: [String: Any], signed: Bool) -> [String] {
            var notes: [String] = []
            if !signed || (header["alg"] as? String)?.lowercased() == "none" { notes.append("the token is unsigned (alg none): never accept it") }
            if claims["aud"] as? String == "https://appleid.apple.com", let iss = claims["iss"] as? String {
                notes.append(
                    "this is an Apple client secret from team \(iss): its sub (\(claims["sub"] ?? "-")) must equal the client_id sent with it, alg must be ES256 with raw r||s, and exp at most 15777000 s ahead"
                )
                if let exp = (claims["exp"] as? NSNumber)?.doubleValue, exp < Date().timeIntervalSince1970 {
                    notes.append("expired \(humanDuration(Date().timeIntervalSince1970 - exp)) ago: Apple answers invalid_client")
                }
                return notes
            }
            if let iss = claims["iss"] as? String {
                notes.append("issued by \(iss)" + (IdentityTokenPolicy.appleIssuers.contains(iss) ? " (Sign in with Apple)" : ""))
            }
            let audiences = (claims["aud"] as? String).map { [$0] } ?? (claims["aud"] as? [String]) ?? []
            if !audiences.isEmpty {
                notes.append(
                    "issued to client id \(audiences.joined(separator: ", ")): your server must list it (native sign-ins: bundle id; web: Services ID)")
            }
            if let exp = (claims["exp"] as? NSNumber)?.doubleValue, exp < Date().timeIntervalSince1970 {
                notes.append("expired \(humanDuration(Date().timeIntervalSince1970 - exp)) ago")
            }
            if let nonce = claims["nonce"] as? String {
                notes.append(
                    "nonce present (\(nonce.count) characters\(nonce.count == 64 && nonce.allSatisfy(\.isHexDigit) ? ", looks like SHA-256 hex: send the raw nonce to the server" : ""))"
                )
            } else {
                notes.append("no nonce: replay protection depends on the app setting one")
            }
            if let supported = claims["nonce_supported"] { notes.append("nonce_supported: \(supported)") }
            if let email = claims["email"] as? String {
                let relay =
                    ApplePrivateRelay.isRelayAddress(email) || "\(claims["is_private_email"] ?? "")" == "true"
                    || "\(claims["is_private_email"] ?? "")" == "1"
                notes.append(relay ? "private relay e-mail (Hide My Email): deliverable only while forwarding is on" : "e-mail \(email)")
            } else {
                notes.append("no e-mail claim: keep the one from the first sign-in")
            }
            if let status = (claims["real_user_status"] as? NSNumber)?.intValue {
                notes.append("real_user_status \(status): " + ["unsupported (older OS or web)", "unknown", "likely a real person"][min(max(status, 0), 2)])
            }
            if let transfer = claims["transfer_sub"] as? String {
                notes.append("transfer_sub \(transfer): the app is being transferred between teams; map the user with /auth/usermigrationinfo")
            }
            return notes
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify an identity token fully: signature, issuer, audience, expiry, nonce.",
            discussion: """
                Examples:
                  latchkey token verify eyJraWQiOi... --provider apple --audience com.example.app --nonce "$RAW_NONCE"
                  latchkey token verify - --provider apple --audience com.example.web --jwks apple-keys.json --at 2026-01-31T12:00:00Z
                  latchkey token verify token.jwt --provider https://issuer.example.com --audience my-client
                  latchkey token verify - --provider facebook --audience 1234567890 --jwks facebook-keys.json
                --jwks takes a file (offline: nothing is fetched, not even an issuer's discovery document) or a URL;
                without it the provider's published keys are fetched.
                Exit codes: 0 verified, 1 refused (the reason says what to do), 64 usage.
                """
        )

        @Argument(help: "The JWT, or - to read it from standard input.") var token: String
        @Option(
            help:
                "apple, google, microsoft, facebook (Limited Login), line (the app SDK's ES256 tokens), or an issuer URL (its discovery document gives the keys)."
        )
        var provider: String
        @Option(help: "A client id the token may be issued to; repeatable.") var audience: [String] = []
        @Option(help: "The provider's key set: a file or a URL.") var jwks: String?
        @Option(help: "The raw nonce the app generated.") var nonce: String?
        @Option(help: "Verify as of this time: ISO-8601 or Unix seconds.") var at: String?
        @Option(help: "Clock skew tolerated: 60s, 2m …") var leeway = "60s"
        @Flag(help: "Print a JSON object instead.") var json = false

        func validate() throws {
            guard !audience.isEmpty else {
                throw ValidationError(
                    "pass --audience with your client id(s): a token is only valid for the app it was issued to (Apple: bundle id for native sign-ins, Services ID for web)"
                )
            }
        }

        func run() async throws {
            let printer = Printer(json: json)
            let leewaySeconds = try parseDuration(leeway)
            let instant = try at.map(parseInstant)
            do {
                let (policy, defaultKeys) = try await Self.policy(provider, audiences: audience, leeway: leewaySeconds, offline: jwks != nil)
                let keys = try await Self.keys(jwks ?? defaultKeys)
                let verifier = IdentityTokenVerifier(policy: policy, keys: keys)
                let identity = try await verifier.verify(try readTokenArgument(token), expecting: .init(rawNonce: nonce), now: instant)
                if json {
                    let encoder = JSONEncoder()
                    encoder.dateEncodingStrategy = .iso8601
                    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                    let data = try encoder.encode(identity)
                    var object = (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
                    object["verified"] = true
                    printer.emit(object)
                } else {
                    print(printer.green(printer.bold("verified")) + " — \(policy.providerName) identity token for \(identity.audience)")
                    print("  subject: \(identity.subject)")
                    if let email = identity.email {
                        print(
                            "  e-mail: \(email)\(identity.isPrivateEmail == true ? " (private relay)" : "")\(identity.emailVerified == true ? ", verified" : "")"
                        )
                    }
                    if let status = identity.realUserStatus { print("  real user status: \(status)") }
                    if let transfer = identity.transferSubject { print("  transfer subject: \(transfer)") }
                    print("  expires: \(describeInstant(identity.expiresAt, now: instant ?? Date()))")
                }
            } catch let error as LatchkeyError {
                if json {
                    printer.emit(["verified": false, "error": error.errorCode, "error_description": error.reason])
                } else {
                    print(printer.red(printer.bold("refused")) + " — \(error.errorCode)")
                    print("  \(error.reason)")
                    for cause in error.likelyCauses { print("  - \(cause)") }
                }
                throw ExitStatus.failure
            }
        }

        /// The providers whose ID tokens `--provider` takes by name.
        static var namedProviders: String {
            var names: [String] = []
            for module in ProviderModules.all where module.tokenVerification(audiences: [], leeway: 0) != nil { names.append(module.name) }
            return names.joined(separator: ", ")
        }

        /// The policy for `provider` and where its keys are published. With `offline` (a `--jwks` file or URL given), an
        /// issuer URL is taken as the issuer itself: no discovery document is fetched.
        static func policy(_ provider: String, audiences: [String], leeway: TimeInterval, offline: Bool = false) async throws(LatchkeyError) -> (
            IdentityTokenPolicy, String
        ) {
            if let module = ProviderModules.all.first(where: { $0.name == provider.lowercased() }) {
                guard let verification = module.tokenVerification(audiences: audiences, leeway: leeway) else {
                    throw LatchkeyError(
                        .invalidConfiguration,
                        "\(module.name) issues no ID tokens: its sign-ins are authorization codes the server redeems, so there is no token to verify")
                }
                return (verification.policy, verification.keysURL)
            }
            guard let url = URL(string: provider), url.scheme == "https" || url.scheme == "http" else {
                throw LatchkeyError(
                    .invalidConfiguration, "--provider is \(Self.namedProviders) or an issuer URL; \"\(provider)\" is none of these")
            }
            let issuer = provider.hasSuffix("/") ? String(provider.dropLast()) : provider
            if offline { return (IdentityTokenPolicy(providerName: issuer, issuers: [issuer], audiences: audiences, leeway: leeway), "") }
            let response = try await AsyncHTTPClientTransport().send(OutboundRequest(url: issuer + "/.well-known/openid-configuration"))
            struct Discovery: Decodable { let issuer: String; let jwks_uri: String }
            guard response.status == 200, let discovery = try? JSONDecoder().decode(Discovery.self, from: Data(response.body)) else {
                throw LatchkeyError(.keysUnavailable, "\(issuer)/.well-known/openid-configuration did not answer with a discovery document")
            }
            guard discovery.issuer == issuer else {
                throw LatchkeyError(
                    .unexpectedIssuer, "the discovery document names issuer \(discovery.issuer), not \(issuer) (RFC 8414 §3.3: they must be identical)")
            }
            return (IdentityTokenPolicy(providerName: issuer, issuers: [issuer], audiences: audiences, leeway: leeway), discovery.jwks_uri)
        }

        static func keys(_ source: String) async throws(LatchkeyError) -> any VerificationKeyResolver {
            if source.hasPrefix("https://") || source.hasPrefix("http://") {
                return JWKSCache(url: source, transport: AsyncHTTPClientTransport())
            }
            guard let data = FileManager.default.contents(atPath: source) else {
                throw LatchkeyError(.keysUnavailable, "cannot read the key set file \(source)")
            }
            return JWKSCache(offline: try await VerificationKeySet(jwksJSON: Array(data)))
        }
    }
}
