import Foundation
import LatchkeyModels
public import Logging
import PostgresNIO

/// A Supabase project's users, read from its database: `auth.users` and `auth.identities`, in one read-only
/// transaction, so that the two tables are read as of one moment.
///
/// Identities come from `auth.identities` alone (`provider`, and `provider_id`, the provider's subject; before Supabase's
/// 2023-11 migration the subject was the `id` column and there was no `provider_id`), never from `raw_user_meta_data`,
/// which the user can change. Soft-deleted users (`deleted_at`) are left out.
public enum SupabaseDatabase {
    /// Supabase's provider names that are Latchkey's providers; any other (`email`, `phone`, `bitbucket`,
    /// `sso:<uuid>`, …) is one of a user's `otherMethods`.
    public static let providers: [String: String] = [
        "apple": "apple", "google": "google", "azure": "microsoft", "facebook": "facebook", "github": "github", "twitter": "x", "x": "x",
        "gitlab": "gitlab", "discord": "discord", "slack": "slack", "slack_oidc": "slack",
    ]

    /// The members of `raw_app_meta_data` that are Supabase's own, not the app's claims.
    static let supabaseAppMetadata: Set<String> = ["provider", "providers"]

    public static func read(url: String, logger: Logger) async throws(ImportSourceError) -> SourceRead {
        let target = try DatabaseURL(url)
        logger.debug("reading Supabase users", metadata: ["database": "\(target.redacted)"])
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: target.configuration, id: 1, logger: logger)
        } catch {
            throw ImportSourceError("Cannot connect to the Supabase database at \(target.redacted): \(describe(error))")
        }
        do {
            let result = try await read(on: connection, target: target, logger: logger)
            try? await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    private static func read(on connection: PostgresConnection, target: DatabaseURL, logger: Logger) async throws(ImportSourceError) -> SourceRead {
        func run(_ sql: String, _ what: String) async throws(ImportSourceError) -> PostgresRowSequence {
            do {
                return try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
            } catch {
                throw ImportSourceError("Cannot read \(what) from the Supabase database at \(target.redacted): \(describe(error))")
            }
        }
        _ = try await run("START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY", "users")
        var columns: [String: Set<String>] = [:]
        do {
            let rows = try await run(
                "SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = 'auth' AND table_name IN ('users', 'identities')",
                "the auth schema")
            for try await (table, column) in rows.decode((String, String).self) { columns[table, default: []].insert(column) }
        } catch let error as ImportSourceError {
            throw error
        } catch {
            throw ImportSourceError("Cannot read the auth schema of the Supabase database at \(target.redacted): \(describe(error))")
        }
        guard let userColumns = columns["users"], userColumns.contains("id") else {
            throw ImportSourceError(
                "The database at \(target.redacted) has no auth.users table: is it a Supabase project's database (Project Settings → Database → Connection string)?"
            )
        }
        guard let identityColumns = columns["identities"], identityColumns.isSuperset(of: ["user_id", "provider"]) else {
            throw ImportSourceError(
                "The database at \(target.redacted) has auth.users but no auth.identities table: its Supabase Auth is too old to import from; update it first."
            )
        }

        var users: [SourceUser] = []
        var positions: [String: Int] = [:]
        var problems: [SourceProblem] = []
        do {
            let rows = try await run(usersQuery(userColumns), "auth.users")
            for try await row in rows {
                let (id, email, confirmed, createdAt, banned, anonymous, appMetadata, userMetadata, phone) = try row.decode(
                    (String, String?, Bool, Date?, Bool, Bool, String?, String?, String?).self)
                do {
                    var user = SourceUser(id: id, createdAt: createdAt, email: email.flatMap { $0.isEmpty ? nil : $0 })
                    user.emailVerified = user.email == nil ? nil : confirmed
                    user.disabled = banned
                    user.isAnonymous = anonymous
                    user.claims = try claims(appMetadata)
                    names(userMetadata, into: &user)
                    if let phone, !phone.isEmpty { user.otherMethods = ["phone"] }
                    positions[id] = users.count
                    users.append(user)
                } catch {
                    problems.append(SourceProblem(sourceID: id, reason: error.reason))
                }
            }
            let subject = identityColumns.contains("provider_id") ? "provider_id" : "id"
            let order = identityColumns.contains("created_at") ? "user_id, created_at, \(subject)" : "user_id, \(subject)"
            let identities = try await run(
                """
                SELECT user_id::text, provider::text, \(subject)::text, identity_data->>'email', identity_data->>'email_verified'
                FROM auth.identities ORDER BY \(order)
                """, "auth.identities")
            for try await (userID, providerName, providerSubject, email, verified) in identities.decode((String?, String, String, String?, String?).self) {
                guard let userID, let position = positions[userID] else { continue }
                if let provider = providers[providerName] {
                    let emailVerified: Bool? =
                        switch verified {
                        case "true": true
                        case "false": false
                        default: nil
                        }
                    users[position].identities.append(
                        SourceIdentity(
                            provider: provider, subject: providerSubject, email: email.flatMap { $0.isEmpty ? nil : $0 }, emailVerified: emailVerified))
                } else {
                    users[position].otherMethods = (users[position].otherMethods + [providerName]).uniqued()
                }
            }
            _ = try await run("COMMIT", "users")
        } catch let error as ImportSourceError {
            throw error
        } catch {
            throw ImportSourceError("Cannot read the users of the Supabase database at \(target.redacted): \(describe(error))")
        }
        for index in users.indices { users[index].otherMethods = users[index].otherMethods.sortedByMethods() }
        return SourceRead(users: users, problems: problems)
    }

    /// `auth.users`, with what columns the schema's age has (`email_confirmed_at` was `confirmed_at` before 2021-07,
    /// `banned_until` came in 2022-01, `deleted_at` in 2022-11, `is_anonymous` in 2024-02).
    static func usersQuery(_ columns: Set<String>) -> String {
        let confirmed =
            columns.contains("email_confirmed_at") ? "email_confirmed_at IS NOT NULL" : columns.contains("confirmed_at") ? "confirmed_at IS NOT NULL" : "false"
        let banned = columns.contains("banned_until") ? "coalesce(banned_until > now(), false)" : "false"
        let anonymous = columns.contains("is_anonymous") ? "coalesce(is_anonymous, false)" : "false"
        let created = columns.contains("created_at") ? "created_at" : "NULL::timestamptz"
        let appMetadata = columns.contains("raw_app_meta_data") ? "raw_app_meta_data::text" : "NULL::text"
        let userMetadata = columns.contains("raw_user_meta_data") ? "raw_user_meta_data::text" : "NULL::text"
        let phone = columns.contains("phone") ? "phone::text" : "NULL::text"
        let live = columns.contains("deleted_at") ? "WHERE deleted_at IS NULL" : ""
        return """
            SELECT id::text, email::text, \(confirmed), \(created), \(banned), \(anonymous), \(appMetadata), \(userMetadata), \(phone)
            FROM auth.users \(live) ORDER BY \(columns.contains("created_at") ? "created_at NULLS LAST, id" : "id")
            """
    }

    /// `raw_app_meta_data` less Supabase's own `provider` and `providers`.
    static func claims(_ text: String?) throws(RecordError) -> [String: JSONValue] {
        guard let text else { return [:] }
        let metadata: ExportJSON
        do {
            metadata = try ExportJSON.parse(text)
        } catch {
            throw RecordError("raw_app_meta_data is not JSON (\(error.description))")
        }
        if case .null = metadata { return [:] }
        return try metadata.claimMembers("raw_app_meta_data").filter { !supabaseAppMetadata.contains($0.key) }
    }

    /// The user's names from `raw_user_meta_data` (`full_name` or `name`, `given_name`, `family_name`): only names, never
    /// identities.
    static func names(_ text: String?, into user: inout SourceUser) {
        guard let text, let metadata = try? ExportJSON.parse(text), case .object = metadata else { return }
        func name(_ key: String) -> String? {
            guard case .string(let value)? = metadata[key], !value.isEmpty else { return nil }
            return value
        }
        user.displayName = name("full_name") ?? name("name")
        user.givenName = name("given_name")
        user.familyName = name("family_name")
    }

    /// What went wrong, without the URL (and so without its password): the server's own message when it sent one.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                let state = error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
                return "the server said: \(message)\(state)"
            }
            if error.code == .sslUnsupported { return "the server does not offer TLS, which the URL's sslmode requires" }
            if let underlying = error.underlying { return "\(underlying)" }
            return "\(error.code)"
        }
        return "\(error)"
    }
}

extension [String] {
    /// `email` and `phone` first, then the rest in their order.
    fileprivate func sortedByMethods() -> [String] {
        let first = ["email", "phone"].filter(contains)
        return first + filter { !first.contains($0) }
    }
}

/// A PostgreSQL URL, `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=MODE`, with libpq's `sslmode`s: `disable`,
/// `allow` and `prefer` (TLS when the server offers it, the default), `require` (TLS, its certificate unchecked unless
/// `sslrootcert` names a CA), `verify-ca` and `verify-full`.
struct DatabaseURL {
    let host: String
    let port: Int
    let username: String
    let password: String?
    let database: String?
    let tls: PostgresConnection.Configuration.TLS

    /// The URL without its password, for messages.
    var redacted: String { "postgres://\(username)@\(host):\(port)/\(database ?? "")" }

    static let usage =
        "postgres://USER:PASSWORD@HOST:5432/postgres, with any @ : / ? # in the password percent-encoded (Supabase: Project Settings → Database → Connection string)"

    init(_ url: String) throws(ImportSourceError) {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "postgres" || scheme == "postgresql"
        else {
            throw ImportSourceError("The Supabase source must be the database's URL, \(Self.usage).")
        }
        guard let host = components.host, !host.isEmpty, let user = components.user, !user.isEmpty else {
            throw ImportSourceError("The Supabase database URL needs a user and a host: \(Self.usage).")
        }
        self.host = host
        port = components.port ?? 5432
        username = user
        password = components.password
        let name = String(components.path.drop { $0 == "/" })
        database = name.isEmpty ? nil : name
        let query = components.queryItems ?? []
        let mode = query.last { $0.name == "sslmode" }?.value ?? "prefer"
        let rootCertificate = query.last { $0.name == "sslrootcert" }?.value
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let rootCertificate {
            guard FileManager.default.isReadableFile(atPath: rootCertificate) else {
                throw ImportSourceError("The Supabase database URL's sslrootcert \(rootCertificate.prefix(200)) is not a readable file.")
            }
            configuration.trustRoots = .file(rootCertificate)
        }
        let redactedHost = "\(host):\(port)"
        switch mode {
        case "disable":
            tls = .disable
            return
        case "allow", "prefer": configuration.certificateVerification = .none
        case "require": configuration.certificateVerification = rootCertificate == nil ? .none : .noHostnameVerification
        case "verify-ca": configuration.certificateVerification = .noHostnameVerification
        case "verify-full": configuration.certificateVerification = .fullVerification
        default:
            throw ImportSourceError(
                "The Supabase database URL's sslmode \(mode.prefix(40)) is not one of disable, allow, prefer, require, verify-ca, verify-full.")
        }
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw ImportSourceError("Cannot set up TLS for \(redactedHost): \(error)")
        }
        tls = mode == "allow" || mode == "prefer" ? .prefer(context) : .require(context)
    }

    var configuration: PostgresConnection.Configuration {
        PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: tls)
    }
}
