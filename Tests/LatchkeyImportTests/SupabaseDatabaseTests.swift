import Foundation
import LatchkeyImport
import LatchkeyModels
import Logging
import PostgresNIO
import Testing

/// Against a real PostgreSQL (LATCHKEY_TEST_DATABASE_URL): a fresh database per test with an `auth` schema laid out as
/// Supabase Auth's migrations leave it, dropped afterwards.
@Suite(
    "Import: a Supabase database",
    .enabled(if: ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] != nil, "needs PostgreSQL (LATCHKEY_TEST_DATABASE_URL)"))
struct SupabaseDatabaseTests {
    static let logger = Logger(label: "latchkey.import.test")

    /// `auth.users` and `auth.identities` as of Supabase Auth's 2024 migrations (`provider_id`, `is_anonymous`).
    static let currentSchema = """
        CREATE SCHEMA auth;
        CREATE TABLE auth.users (
            instance_id uuid, id uuid NOT NULL PRIMARY KEY, aud varchar(255), role varchar(255), email varchar(255),
            encrypted_password varchar(255), email_confirmed_at timestamptz, invited_at timestamptz, confirmation_token varchar(255),
            confirmation_sent_at timestamptz, recovery_token varchar(255), recovery_sent_at timestamptz, last_sign_in_at timestamptz,
            raw_app_meta_data jsonb, raw_user_meta_data jsonb, is_super_admin boolean, created_at timestamptz, updated_at timestamptz,
            phone text UNIQUE DEFAULT NULL, phone_confirmed_at timestamptz,
            confirmed_at timestamptz GENERATED ALWAYS AS (LEAST(email_confirmed_at, phone_confirmed_at)) STORED,
            banned_until timestamptz, deleted_at timestamptz, is_sso_user boolean NOT NULL DEFAULT false,
            is_anonymous boolean NOT NULL DEFAULT false
        );
        CREATE TABLE auth.identities (
            provider_id text NOT NULL, user_id uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE, identity_data jsonb NOT NULL,
            provider text NOT NULL, last_sign_in_at timestamptz, created_at timestamptz, updated_at timestamptz,
            email text GENERATED ALWAYS AS (lower(identity_data->>'email')) STORED,
            id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, UNIQUE (provider_id, provider)
        );
        """

    /// Before the 2023-11 migration: `identities.id` is the provider's subject, and there is no `provider_id`; before
    /// 2022 there was no `banned_until`, `deleted_at` nor `is_anonymous` either.
    static let oldSchema = """
        CREATE SCHEMA auth;
        CREATE TABLE auth.users (
            instance_id uuid, id uuid NOT NULL PRIMARY KEY, aud varchar(255), role varchar(255), email varchar(255),
            encrypted_password varchar(255), email_confirmed_at timestamptz, last_sign_in_at timestamptz, raw_app_meta_data jsonb,
            raw_user_meta_data jsonb, is_super_admin boolean, created_at timestamptz, updated_at timestamptz, phone varchar(15)
        );
        CREATE TABLE auth.identities (
            id text NOT NULL, user_id uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE, identity_data jsonb NOT NULL,
            provider text NOT NULL, last_sign_in_at timestamptz, created_at timestamptz, updated_at timestamptz,
            PRIMARY KEY (provider, id)
        );
        """

    static let apple = "001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0456"
    static let google = "109876543210987654321"

    static let users = """
        INSERT INTO auth.users (id, email, email_confirmed_at, created_at, raw_app_meta_data, raw_user_meta_data, phone, banned_until, deleted_at, is_anonymous) VALUES
        ('00000000-0000-4000-8000-000000000001', 'r7x@privaterelay.appleid.com', '2024-01-01T00:00:00Z', '2024-01-01T00:00:00Z',
         '{"provider": "apple", "providers": ["apple", "email"]}',
         '{"full_name": "Ann Apple", "sub": "attacker-controlled", "provider_id": "attacker-controlled", "iss": "https://appleid.apple.com"}', NULL, NULL, NULL, false),
        ('00000000-0000-4000-8000-000000000002', 'gus@example.com', NULL, '2024-01-02T00:00:00Z',
         '{"provider": "google", "providers": ["google"], "role": "admin", "seats": 5}', '{"name": "Gus"}', NULL, NULL, NULL, false),
        ('00000000-0000-4000-8000-000000000003', 'banned@example.com', '2024-01-03T00:00:00Z', '2024-01-03T00:00:00Z',
         '{"provider": "email", "providers": ["email"]}', '{}', NULL, now() + interval '100 years', NULL, false),
        ('00000000-0000-4000-8000-000000000004', 'was-banned@example.com', '2024-01-04T00:00:00Z', '2024-01-04T00:00:00Z',
         '{"provider": "azure", "providers": ["azure", "twitter", "slack_oidc"]}', '{}', NULL, now() - interval '1 day', NULL, false),
        ('00000000-0000-4000-8000-000000000005', NULL, NULL, '2024-01-05T00:00:00Z', '{}', '{}', NULL, NULL, NULL, true),
        ('00000000-0000-4000-8000-000000000006', 'gone@example.com', NULL, '2024-01-06T00:00:00Z',
         '{"provider": "github", "providers": ["github"]}', '{}', NULL, NULL, now(), false),
        ('00000000-0000-4000-8000-000000000007', NULL, NULL, '2024-01-07T00:00:00Z', '{"provider": "phone", "providers": ["phone"]}', '{}',
         '15551234567', NULL, NULL, false);
        INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at) VALUES
        ('\(apple)', '00000000-0000-4000-8000-000000000001',
         '{"sub": "\(apple)", "email": "r7x@privaterelay.appleid.com", "email_verified": true, "iss": "https://appleid.apple.com"}', 'apple', '2024-01-01T00:00:00Z'),
        ('00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000001',
         '{"sub": "00000000-0000-4000-8000-000000000001", "email": "r7x@privaterelay.appleid.com"}', 'email', '2024-01-01T00:00:01Z'),
        ('\(google)', '00000000-0000-4000-8000-000000000002', '{"sub": "\(google)", "email": "gus@example.com", "email_verified": "false"}', 'google', '2024-01-02T00:00:00Z'),
        ('00000000-0000-4000-8000-000000000003', '00000000-0000-4000-8000-000000000003', '{"sub": "00000000-0000-4000-8000-000000000003"}', 'email', '2024-01-03T00:00:00Z'),
        ('aad-sub-1', '00000000-0000-4000-8000-000000000004', '{"sub": "aad-sub-1"}', 'azure', '2024-01-04T00:00:00Z'),
        ('783214', '00000000-0000-4000-8000-000000000004', '{"sub": "783214"}', 'twitter', '2024-01-04T00:00:01Z'),
        ('U0SLACK', '00000000-0000-4000-8000-000000000004', '{"sub": "U0SLACK"}', 'slack_oidc', '2024-01-04T00:00:02Z'),
        ('sso-subject', '00000000-0000-4000-8000-000000000004', '{"sub": "sso-subject"}', 'sso:7d2e0000-0000-4000-8000-000000000000', '2024-01-04T00:00:03Z'),
        ('5550001', '00000000-0000-4000-8000-000000000006', '{"sub": "5550001"}', 'github', '2024-01-06T00:00:00Z'),
        ('00000000-0000-4000-8000-000000000007', '00000000-0000-4000-8000-000000000007', '{"sub": "00000000-0000-4000-8000-000000000007", "phone": "15551234567"}', 'phone', '2024-01-07T00:00:00Z');
        """

    @Test("users and identities of the current schema: providers mapped, claims less provider(s), banned, anonymous, deleted left out")
    func currentSchemaUsers() async throws {
        try await withSupabaseDatabase([Self.currentSchema, Self.users]) { url in
            let read = try await SupabaseDatabase.read(url: url, logger: Self.logger)
            #expect(read.problems.isEmpty)
            #expect(
                read.users.map(\.id) == [
                    "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003",
                    "00000000-0000-4000-8000-000000000004", "00000000-0000-4000-8000-000000000005", "00000000-0000-4000-8000-000000000007",
                ])
            let apple = read.users[0]
            #expect(apple.identities == [SourceIdentity(provider: "apple", subject: Self.apple, email: "r7x@privaterelay.appleid.com", emailVerified: true)])
            #expect(apple.otherMethods == ["email"])
            #expect(apple.claims.isEmpty)
            #expect(apple.emailVerified == true)
            #expect(apple.displayName == "Ann Apple")
            #expect(apple.createdAt == Date(timeIntervalSince1970: 1_704_067_200))

            let google = read.users[1]
            #expect(google.identities == [SourceIdentity(provider: "google", subject: Self.google, email: "gus@example.com", emailVerified: false)])
            #expect(google.claims == ["role": .string("admin"), "seats": .integer(5)])
            #expect(google.emailVerified == false)

            #expect(read.users[2].disabled)
            let unbanned = read.users[3]
            #expect(!unbanned.disabled)
            #expect(unbanned.identities.map(\.provider) == ["microsoft", "x", "slack"])
            #expect(unbanned.identities.map(\.subject) == ["aad-sub-1", "783214", "U0SLACK"])
            #expect(unbanned.otherMethods == ["sso:7d2e0000-0000-4000-8000-000000000000"])

            #expect(read.users[4].isAnonymous)
            #expect(read.users[4].email == nil)
            #expect(read.users[4].emailVerified == nil)
            #expect(read.users[5].otherMethods == ["phone"])
            #expect(!read.users.contains { $0.isAnonymous && $0.id != "00000000-0000-4000-8000-000000000005" })
        }
    }

    @Test("the schema before provider_id (the subject in identities.id) and before banned_until, deleted_at and is_anonymous")
    func oldSchemaUsers() async throws {
        let data = """
            INSERT INTO auth.users (id, email, email_confirmed_at, created_at, raw_app_meta_data, raw_user_meta_data) VALUES
            ('00000000-0000-4000-8000-000000000011', 'old@example.com', '2021-10-01T00:00:00Z', '2021-10-01T00:00:00Z',
             '{"provider": "github", "providers": ["github"], "plan": "team"}', '{"user_name": "oldie"}');
            INSERT INTO auth.identities (id, user_id, identity_data, provider, created_at) VALUES
            ('5550001', '00000000-0000-4000-8000-000000000011', '{"sub": "5550001", "email": "old@example.com"}', 'github', '2021-10-01T00:00:00Z');
            """
        try await withSupabaseDatabase([Self.oldSchema, data]) { url in
            let read = try await SupabaseDatabase.read(url: url, logger: Self.logger)
            #expect(read.problems.isEmpty)
            #expect(read.users.count == 1)
            #expect(read.users.first?.identities == [SourceIdentity(provider: "github", subject: "5550001", email: "old@example.com")])
            #expect(read.users.first?.claims == ["plan": .string("team")])
            #expect(read.users.first?.disabled == false)
        }
    }

    @Test("a database without Supabase's auth schema is refused, naming the database but not the password")
    func noAuthSchema() async throws {
        try await withSupabaseDatabase(["CREATE TABLE unrelated (id int)"]) { url in
            var components = try #require(URLComponents(string: url))
            components.password = "not-the-password-\(UUID().uuidString.prefix(6))"
            let password = try #require(components.password)
            let withPassword = try #require(components.string)
            // trust authentication: any password is let in, so the message is about the schema.
            let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
                try await SupabaseDatabase.read(url: withPassword, logger: Self.logger)
            }
            #expect(message.contains("no auth.users table"), "\(message)")
            #expect(!message.contains(password), "\(message)")
        }
    }

    @Test("a database name that does not exist: the server's word for it")
    func missingDatabase() async throws {
        let base = try #require(ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"])
        var components = try #require(URLComponents(string: base))
        components.path = "/supa_missing_\(UUID().uuidString.prefix(8).lowercased())"
        let missing = try #require(components.string)
        let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
            try await SupabaseDatabase.read(url: missing, logger: Self.logger)
        }
        #expect(message.contains("does not exist"), "\(message)")
    }

    @Test("sslmode=require against a server without TLS: refused, saying so")
    func tlsRequired() async throws {
        let base = try #require(ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"])
        var components = try #require(URLComponents(string: base))
        components.queryItems = [URLQueryItem(name: "sslmode", value: "require")]
        let url = try #require(components.string)
        let message = await ImportFixtures.refusal { () async throws(ImportSourceError) in
            try await SupabaseDatabase.read(url: url, logger: Self.logger)
        }
        #expect(message.contains("does not offer TLS"), "\(message)")
    }

    /// Runs `body` with the URL of a fresh database set up by the statements of `setup` (each script's statements end
    /// with `;` and a line break), then drops the database.
    private func withSupabaseDatabase(_ setup: [String], _ body: (String) async throws -> Void) async throws {
        let base = try #require(ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"])
        let name = "supa_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        try await Self.execute(["CREATE DATABASE \(name)"], on: base)
        var components = try #require(URLComponents(string: base))
        components.path = "/" + name
        let url = try #require(components.string)
        do {
            let statements = setup.flatMap { $0.components(separatedBy: ";\n") }.filter { !$0.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty }
            try await Self.execute(statements, on: url)
            try await body(url)
        } catch {
            try? await Self.execute(["DROP DATABASE \(name) WITH (FORCE)"], on: base)
            throw error
        }
        try await Self.execute(["DROP DATABASE \(name) WITH (FORCE)"], on: base)
    }

    private static func execute(_ statements: [String], on url: String) async throws {
        let components = try #require(URLComponents(string: url))
        let configuration = PostgresConnection.Configuration(
            host: try #require(components.host), port: components.port ?? 5432, username: try #require(components.user), password: components.password,
            database: String(components.path.dropFirst()), tls: .disable)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        do {
            for statement in statements {
                do {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                } catch {
                    Issue.record("\(statement.prefix(80)): \(String(reflecting: error))")
                    throw error
                }
            }
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }
}
