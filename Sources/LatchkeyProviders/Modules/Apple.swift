public import Configuration
public import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// Sign in with Apple: identity tokens verified against Apple's keys; the authorization code redeemed with a client
/// secret the team's `.p8` key signs; Apple's refresh token kept to validate the grant daily and to revoke it when the
/// account is deleted. Its browser sign-in posts the name (`user`) on the first authorization only.
public struct AppleModule: ProviderModule {
    public static let name = "apple"
    public static let displayName = "Apple"
    public static let settings = [
        ProviderSettingDescription("teamId", "the 10-character Team ID"),
        ProviderSettingDescription("keyId", "the 10-character Key ID of the Sign in with Apple key"),
        ProviderSettingDescription("privateKey / privateKeyFile", "the key's .p8 PEM (secret)"),
        ProviderSettingDescription("clientIds", "comma-separated bundle ids (native) and Services IDs (web)"),
        ProviderSettingDescription("baseUrl", "Apple's endpoints, or the emulator's", default: "https://appleid.apple.com"),
        ProviderSettingDescription("redirectUris", "redirect URIs web sign-ins may send with their code (exact match)", default: "none"),
        ProviderSettingDescription("servicesId", "the Services ID the browser flow signs in with", default: "the first client id"),
        ProviderSettingDescription("notificationUrl", "only read by `latchkey doctor`: the URL registered with Apple", default: "none"),
    ]

    public static func tokenVerification(audiences: [String], leeway: TimeInterval) -> TokenVerification? {
        TokenVerification(policy: .apple(clientIDs: audiences, leeway: leeway), keysURL: "https://appleid.apple.com/auth/keys")
    }

    public var teamID: String
    public var keyID: String
    public var privateKeyPEM: Secret
    /// Bundle ids and Services IDs.
    public var clientIDs: [String]
    public var baseURL = "https://appleid.apple.com"
    /// Redirect URIs web sign-ins may send with their code; matched exactly.
    public var redirectURIs: [String] = []
    /// How a sent nonce must match the token: `.hashed` (native apps) unless web sign-ins need `.verbatim`.
    public var nonceMatching: NonceMatching = .hashed
    /// Refuse identity tokens without a `nonce` claim; web sign-ins that cannot carry one turn it off.
    public var requireNonce = true
    /// The Services ID the browser flow signs in with; nil uses the first of ``clientIDs``.
    public var servicesID: String?
    public private(set) var warnings: [String] = []

    public init(
        teamID: String, keyID: String, privateKeyPEM: String, clientIDs: [String], baseURL: String = "https://appleid.apple.com",
        redirectURIs: [String] = [],
        nonceMatching: NonceMatching = .hashed, requireNonce: Bool = true
    ) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKeyPEM = Secret(privateKeyPEM)
        self.clientIDs = clientIDs
        self.baseURL = baseURL
        self.redirectURIs = redirectURIs
        self.nonceMatching = nonceMatching
        self.requireNonce = requireNonce
    }

    public init?(reading config: ConfigReader) throws(LatchkeyError) {
        let teamID = config.string(forKey: "teamId")
        let keyID = config.string(forKey: "keyId")
        let key = try config.settingSecret("privateKey", fileKey: "privateKeyFile", fullFileKey: "apple.privateKeyFile")
        let clientIDs = config.settingList("clientIds")
        guard teamID != nil || keyID != nil || key != nil || clientIDs != nil else { return nil }
        func missing(_ key: String, _ problem: String) -> LatchkeyError {
            LatchkeyError(.invalidConfiguration, "setting apple.\(key) is missing\(problem)")
        }
        guard let teamID else { throw missing("teamId", " (the other apple.* settings are set)") }
        guard let keyID else { throw missing("keyId", " (the other apple.* settings are set)") }
        guard let key else { throw missing("privateKeyFile", ": point it at the .p8 file (or set apple.privateKey)") }
        guard let clientIDs, !clientIDs.isEmpty else { throw missing("clientIds", ": list your bundle id and Services ID, comma-separated") }
        let nonces = try config.settingNonces("", fullPrefix: "apple.", requireByDefault: true)
        self.init(
            teamID: teamID, keyID: keyID, privateKeyPEM: key, clientIDs: clientIDs,
            baseURL: try config.settingURL("baseUrl", fullKey: "apple.baseUrl") ?? "https://appleid.apple.com",
            redirectURIs: config.settingList("redirectUris") ?? [], nonceMatching: nonces.matching, requireNonce: nonces.required)
        servicesID = config.string(forKey: "servicesId")
        warnings = nonces.warning.map { [$0] } ?? []
    }

    /// The signing credentials, once every setting is checked; errors name the setting.
    public func checkedCredentials() throws(LatchkeyError) -> AppleSigningCredentials {
        func named(_ key: String, _ check: () throws(LatchkeyError) -> Void) throws(LatchkeyError) {
            do { try check() } catch { throw LatchkeyError(.invalidConfiguration, "setting apple.\(key): \(error.reason)") }
        }
        guard !clientIDs.isEmpty else {
            throw LatchkeyError(.invalidConfiguration, "setting apple.clientIds is empty; list your bundle id and, for web sign-ins, your Services ID")
        }
        try named("teamId") { () throws(LatchkeyError) in try AppleSigningCredentials.checkTeamID(teamID) }
        try named("keyId") { () throws(LatchkeyError) in try AppleSigningCredentials.checkKeyID(keyID) }
        let credentials: AppleSigningCredentials
        do {
            credentials = try AppleSigningCredentials(teamID: teamID, keyID: keyID, privateKeyPEM: privateKeyPEM.revealed)
        } catch {
            throw LatchkeyError(.invalidConfiguration, "setting apple.privateKeyFile: \(error.reason)")
        }
        if let problem = OutboundURL.problem(baseURL) {
            throw LatchkeyError(.invalidConfiguration, "setting apple.baseUrl is \(baseURL.prefix(200)): \(problem)")
        }
        // Apple puts the Services ID in the `aud` of a web sign-in's ID token, which must be one of ours.
        if let servicesID, !clientIDs.contains(servicesID) {
            throw LatchkeyError(
                .invalidConfiguration, "setting apple.servicesId is \(servicesID.prefix(200)), which apple.clientIds does not list; add it there")
        }
        return credentials
    }

    public func validate() throws(LatchkeyError) { _ = try checkedCredentials() }

    public func makeProvider(_ context: ProviderContext) throws(LatchkeyError) -> any IdentityProvider {
        let configuration = AppleConfiguration(credentials: try checkedCredentials(), clientIDs: clientIDs, baseURL: baseURL)
        var policy = configuration.identityTokenPolicy
        policy.nonceMatching = nonceMatching
        policy.requireNonce = requireNonce
        policy.configurationKey = Self.name
        return try AppleIdentityProvider(
            configuration: configuration, signInPolicy: policy, redirectURIs: redirectURIs + (context.callbackURL(Self.name).map { [$0] } ?? []),
            servicesID: servicesID, transport: context.transport, timeSource: context.timeSource, logger: context.logger, observer: context.observer)
    }

    public var findings: [ProviderFinding] {
        [ProviderFinding(.ok, "apple", "Sign in with Apple for team \(teamID), client ids \(clientIDs.joined(separator: ", "))")]
    }

    public func callbackFindings(_ callbackURL: String) -> [ProviderFinding] {
        if let problem = Self.redirectURIProblem(callbackURL) {
            return [
                ProviderFinding(
                    .warning, "publicUrl", "Sign in with Apple on the web answers at \(callbackURL), which Apple refuses (\(problem))",
                    fix: "set publicUrl to the server's https URL on a domain name and register \(callbackURL) as a return URL of the Services ID")
            ]
        }
        return [
            ProviderFinding(
                .ok, "apple.servicesId", "register \(callbackURL) as a return URL of the Services ID \(servicesID ?? clientIDs.first ?? "")")
        ]
    }

    /// Redeems a made-up code for each client id: Apple's answer tells whether it accepted the client secret.
    public func liveFindings(_ context: ProviderContext) async -> [ProviderFinding] {
        guard let credentials = try? checkedCredentials(),
            let client = try? AppleClient(
                configuration: AppleConfiguration(
                    credentials: credentials, clientIDs: clientIDs, baseURL: baseURL, requestTimeout: .seconds(10), retry: .never),
                transport: context.transport)
        else { return [ProviderFinding(.error, "live", "skipped: fix the errors above first")] }
        var findings: [ProviderFinding] = []
        for clientID in clientIDs {
            do {
                _ = try await client.exchangeCode("latchkey-doctor-invalid-code", clientID: clientID)
                findings.append(
                    ProviderFinding(
                        .warning, "live", "\(clientID): \(baseURL) accepted a made-up code", fix: "this is not Apple's behaviour; check apple.baseUrl"))
            } catch {
                switch error.code {
                case .invalidGrant:
                    findings.append(
                        ProviderFinding(.ok, "live", "\(clientID): \(baseURL) accepted the client secret (it refused only the made-up code: invalid_grant)"))
                case .invalidClient:
                    findings.append(
                        ProviderFinding(
                            .error, "live", "\(clientID): \(baseURL) answered invalid_client — it did not accept the client",
                            fix: "check, most likely first:\n      " + error.likelyCauses.joined(separator: "\n      ")))
                case .providerUnavailable, .providerRateLimited:
                    findings.append(ProviderFinding(.error, "live", "\(clientID): \(error.reason)", fix: "check network access to \(baseURL)"))
                default:
                    findings.append(ProviderFinding(.warning, "live", "\(clientID): \(error.errorCode) — \(error.reason)"))
                }
            }
        }
        return findings
    }

    /// The emulator's Apple answers at its root, for the team `serve --dev` and `demo` make; they add the team's settings.
    public static func emulatedSettings(baseURL: String, clientIDs: [String]) -> [String: String] {
        ["clientIds": clientIDs.joined(separator: ",")]
    }
}

extension AppleModule {
    /// Each `apple.*` setting on its own, so every problem shows, with where to find the right value.
    public static func diagnose(_ config: ConfigReader, expected: Bool) -> [ProviderFinding] {
        let teamID = config.string(forKey: "teamId")
        let keyID = config.string(forKey: "keyId")
        let keyFile = config.string(forKey: "privateKeyFile")
        let inlineKey = config.string(forKey: "privateKey", isSecret: true)
        let clientIDs = config.settingList("clientIds") ?? []
        guard expected || teamID != nil || keyID != nil || keyFile != nil || inlineKey != nil || !clientIDs.isEmpty else {
            return [.notConfigured(self)]
        }
        var findings: [ProviderFinding] = []
        func add(_ level: ProviderFinding.Level, _ key: String, _ message: String, fix: String? = nil) {
            findings.append(ProviderFinding(level, "apple." + key, message, fix: fix))
        }
        func checkIdentifier(_ value: String?, _ key: String, _ source: String, notSet fix: String) {
            guard let value else { return add(.error, key, "not set", fix: fix) }
            if AppleSigningCredentials.isIdentifier(value) {
                add(.ok, key, "\(value) has the right shape")
            } else {
                add(.error, key, "\"\(value)\" is not 10 upper-case letters and digits", fix: "use \(source)")
            }
        }
        checkIdentifier(
            teamID, "teamId", "the Team ID shown under Membership in the developer portal",
            notSet: "set apple.teamId (LATCHKEY_APPLE_TEAM_ID) to your 10-character Team ID")
        checkIdentifier(
            keyID, "keyId", "the Key ID next to your Sign in with Apple key (Certificates, Identifiers & Profiles → Keys)",
            notSet: "set apple.keyId to the 10-character Key ID")
        var keyPEM: String?
        if let keyFile {
            if let text = try? String(contentsOfFile: keyFile, encoding: .utf8) {
                keyPEM = text
                let fileName = (keyFile as NSString).lastPathComponent
                if let keyID, fileName.hasPrefix("AuthKey_"), fileName != "AuthKey_\(keyID).p8" {
                    add(
                        .warning, "keyId", "the key file is named \(fileName) but apple.keyId is \(keyID)",
                        fix: "Apple names the download AuthKey_<KEYID>.p8: use that file's key id, or the matching file")
                }
            } else {
                add(
                    .error, "privateKeyFile", "\(keyFile) cannot be read",
                    fix: "point apple.privateKeyFile at the .p8 file and make it readable by the server user")
            }
        } else if let inlineKey {
            keyPEM = inlineKey
        } else {
            add(.error, "privateKeyFile", "not set", fix: "set apple.privateKeyFile to the .p8 downloaded for the Sign in with Apple key")
        }
        if let keyPEM {
            do {
                _ = try AppleSigningCredentials(teamID: "AAAAAAAAAA", keyID: "AAAAAAAAAA", privateKeyPEM: keyPEM)
                add(.ok, "privateKeyFile", "the key is a PKCS#8 P-256 (ES256) key")
            } catch {
                add(
                    .error, "privateKeyFile", error.reason,
                    fix: "download the key again from the developer portal (it can be downloaded once) or create a new one with Sign in with Apple enabled")
            }
        }
        findings += clientIDFindings(clientIDs, teamID: teamID)
        for uri in config.settingList("redirectUris") ?? [] {
            if let problem = redirectURIProblem(uri) {
                add(
                    .error, "redirectUris", "\(uri): \(problem)",
                    fix:
                        "Apple accepts only HTTPS redirect URIs on a domain name (no IP address, no localhost, no fragment); use a real domain, e.g. through a tunnel, for local web sign-in tests"
                )
            } else {
                add(
                    .ok, "redirectUris",
                    "\(uri) has the shape Apple accepts; it must also be registered on the Services ID and sent unchanged when redeeming web codes")
            }
        }
        findings.append(notificationURLFinding(config.string(forKey: "notificationUrl")))
        let baseURL = config.string(forKey: "baseUrl") ?? "https://appleid.apple.com"
        if !baseURL.hasPrefix("https://") && !baseURL.contains("127.0.0.1") && !baseURL.contains("localhost") {
            add(.warning, "baseUrl", "\(baseURL) is not HTTPS", fix: "use https://appleid.apple.com (the default) outside tests")
        }
        return findings
    }

    private static func clientIDFindings(_ clientIDs: [String], teamID: String?) -> [ProviderFinding] {
        guard !clientIDs.isEmpty else {
            return [
                ProviderFinding(.error, "apple.clientIds", "not set", fix: "list your app's bundle id and, for web sign-ins, your Services ID, comma-separated")
            ]
        }
        var findings = clientIDs.map { clientID -> ProviderFinding in
            let shape = clientID.split(separator: ".").count >= 2 && !clientID.contains(" ") && clientID == clientID.trimmingCharacters(in: .whitespaces)
            if !shape {
                return ProviderFinding(
                    .error, "apple.clientIds", "\"\(clientID)\" does not look like a bundle id or Services ID (reverse-DNS, e.g. com.example.app)",
                    fix: "copy the identifier from Certificates, Identifiers & Profiles")
            } else if let teamID, clientID.hasPrefix(teamID + ".") {
                return ProviderFinding(
                    .error, "apple.clientIds", "\"\(clientID)\" starts with the Team ID",
                    fix: "use the bundle id without the team prefix (Apple's client_id never includes the Team ID)")
            }
            return ProviderFinding(
                .ok, "apple.clientIds", "\(clientID): native sign-ins from an app with this bundle id, or web sign-ins if it is a Services ID, are accepted")
        }
        if clientIDs.count == 1 {
            findings.append(
                ProviderFinding(
                    .warning, "apple.clientIds", "only one client id",
                    fix: "native tokens carry the bundle id, web tokens the Services ID: add the Services ID if you also sign in on the web (else ignore this)")
            )
        }
        return findings
    }

    private static func notificationURLFinding(_ url: String?) -> ProviderFinding {
        let path = "/v1/apple/notifications"
        guard let url else {
            return ProviderFinding(
                .warning, "apple.notificationUrl", "not set",
                fix:
                    "register https://<your host>\(path) with Apple so consent revocations and deletions reach Latchkey at once (the daily check catches them otherwise)"
            )
        }
        if !url.hasPrefix("https://") {
            return ProviderFinding(
                .error, "apple.notificationUrl", "\(url) is not HTTPS", fix: "Apple delivers server-to-server notifications only to HTTPS endpoints (TLS 1.2+)")
        } else if !url.hasSuffix(path) {
            return ProviderFinding(
                .warning, "apple.notificationUrl", "\(url) does not end in \(path)",
                fix: "register https://<your host>\(path) in the developer portal (Sign in with Apple → server-to-server notification endpoint)")
        }
        return ProviderFinding(.ok, "apple.notificationUrl", "\(url) points at Latchkey's notification endpoint")
    }

    /// Why Apple refuses `uri` as a web sign-in's return URL: it takes only `https` on a domain name, without a fragment.
    static func redirectURIProblem(_ uri: String) -> String? {
        guard let url = URLComponents(string: uri), let host = url.host, !host.isEmpty else { return "not a URL" }
        if url.scheme != "https" { return "not HTTPS" }
        if host == "localhost" || host.hasSuffix(".localhost") { return "localhost is refused" }
        if host.split(separator: ".").count == 4 && host.split(separator: ".").allSatisfy({ UInt8($0) != nil }) || host.contains(":") {
            return "an IP address is refused"
        }
        if url.fragment != nil { return "a fragment (#…) is refused" }
        return nil
    }
}
