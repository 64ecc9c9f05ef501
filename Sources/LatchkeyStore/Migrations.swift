import Foundation
import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// Versioned schema changes, applied in order at start-up and by `latchkey migrate`. Never edit a shipped one.
enum Migrations {
    /// The statements of each version. Types are the subset SQLite and PostgreSQL share; times are Unix milliseconds.
    static let all: [(version: Int, statements: [String])] = [
        (
            1,
            [
                """
                CREATE TABLE users (id TEXT PRIMARY KEY, created_at BIGINT NOT NULL, email TEXT, email_verified INTEGER,
                  given_name TEXT, family_name TEXT)
                """,
                """
                CREATE TABLE identities (id TEXT PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                  provider TEXT NOT NULL, subject TEXT NOT NULL, email TEXT, email_verified INTEGER, is_private_email INTEGER,
                  real_user_status INTEGER, transfer_subject TEXT, given_name TEXT, family_name TEXT, email_forwarding_enabled INTEGER,
                  first_seen_at BIGINT NOT NULL, last_sign_in_at BIGINT NOT NULL, UNIQUE (provider, subject))
                """,
                "CREATE INDEX identities_user ON identities(user_id)",
                """
                CREATE TABLE provider_grants (identity_id TEXT PRIMARY KEY REFERENCES identities(id) ON DELETE CASCADE,
                  client_id TEXT NOT NULL, sealed_refresh_token TEXT NOT NULL, last_validated_at BIGINT NOT NULL, created_at BIGINT NOT NULL)
                """,
                """
                CREATE TABLE sessions (id TEXT PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                  identity_id TEXT, client_id TEXT NOT NULL, created_at BIGINT NOT NULL, last_used_at BIGINT NOT NULL,
                  absolute_expires_at BIGINT NOT NULL, revoked_at BIGINT, revocation_reason TEXT, user_agent TEXT)
                """,
                "CREATE INDEX sessions_user ON sessions(user_id)",
                "CREATE INDEX sessions_identity ON sessions(identity_id)",
                """
                CREATE TABLE refresh_tokens (hash TEXT PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                  parent_hash TEXT, created_at BIGINT NOT NULL, idle_expires_at BIGINT NOT NULL, rotated_at BIGINT, successor_hash TEXT)
                """,
                "CREATE INDEX refresh_tokens_session ON refresh_tokens(session_id)",
                """
                CREATE TABLE signing_keys (key_id TEXT PRIMARY KEY, algorithm TEXT NOT NULL, sealed_private_key TEXT NOT NULL,
                  public_key_pem TEXT NOT NULL, state TEXT NOT NULL, created_at BIGINT NOT NULL, retire_after BIGINT)
                """,
                "CREATE TABLE processed_notifications (id TEXT PRIMARY KEY, type TEXT NOT NULL, received_at BIGINT NOT NULL)",
                """
                CREATE TABLE outbox (id TEXT PRIMARY KEY, kind TEXT NOT NULL, client_id TEXT NOT NULL, sealed_payload TEXT NOT NULL,
                  attempts INTEGER NOT NULL, next_attempt_at BIGINT NOT NULL, last_error TEXT, created_at BIGINT NOT NULL, completed_at BIGINT)
                """,
                "CREATE INDEX outbox_due ON outbox(completed_at, next_attempt_at)",
                "CREATE TABLE audit_events (id TEXT PRIMARY KEY, at BIGINT NOT NULL, user_id TEXT, kind TEXT NOT NULL, detail TEXT NOT NULL)",
                "CREATE INDEX audit_events_user ON audit_events(user_id, at)",
            ]
        ),
        (
            2,
            [
                // One row per identity token that started a session, until the token expires.
                """
                CREATE TABLE used_sign_in_tokens (provider TEXT NOT NULL, subject TEXT NOT NULL, token_hash TEXT NOT NULL,
                  expires_at BIGINT NOT NULL, PRIMARY KEY (provider, subject, token_hash))
                """,
                "CREATE INDEX used_sign_in_tokens_expiry ON used_sign_in_tokens(expires_at)",
            ]
        ),
        (
            3,
            [
                // Provider-neutral accounts: grants and owed calls name their provider (rows from before were Apple's),
                // identities keep a claims document for what only some providers say.
                "ALTER TABLE provider_grants ADD COLUMN provider TEXT NOT NULL DEFAULT 'apple'",
                "ALTER TABLE outbox ADD COLUMN provider TEXT NOT NULL DEFAULT 'apple'",
                "ALTER TABLE identities ADD COLUMN claims TEXT",
                """
                CREATE TABLE invites (code_hash TEXT PRIMARY KEY, id TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, expires_at BIGINT,
                  max_uses INTEGER NOT NULL, uses INTEGER NOT NULL, revoked_at BIGINT, note TEXT)
                """,
            ]
        ),
        (
            4,
            [
                // The browser flow: provider flow state and authorization codes, each used once, kept a day past expiry
                // so a replayed code is recognised.
                """
                CREATE TABLE one_time_records (kind TEXT NOT NULL, key_hash TEXT NOT NULL, sealed_payload TEXT NOT NULL, expires_at BIGINT NOT NULL,
                  used_at BIGINT, PRIMARY KEY (kind, key_hash))
                """,
                "CREATE INDEX one_time_records_expiry ON one_time_records(expires_at)",
            ]
        ),
        (
            5,
            [
                // A fleet asks a provider about a grant once: the instance that claims it holds the right until then
                // (after a failure, every instance waits until then).
                "ALTER TABLE provider_grants ADD COLUMN validation_claimed_until BIGINT"
            ]
        ),
        (
            6,
            [
                // Used identity tokens keyed by expiry first, so that each sign-in's record goes beside the last one
                // instead of into a random page of an index keyed by subject (a page written per sign-in). Same
                // columns: the previous release still works on the table (its release of a claim reads the whole
                // table, until it is replaced). A token's hash names it, and its expiry follows from the token.
                // (`WHERE true` tells SQLite's parser that ON begins the upsert, not a join constraint.)
                """
                CREATE TABLE used_sign_in_tokens_by_expiry (provider TEXT NOT NULL, subject TEXT NOT NULL, token_hash TEXT NOT NULL,
                  expires_at BIGINT NOT NULL, PRIMARY KEY (expires_at, provider, token_hash))
                """,
                """
                INSERT INTO used_sign_in_tokens_by_expiry (provider, subject, token_hash, expires_at)
                SELECT provider, subject, token_hash, expires_at FROM used_sign_in_tokens WHERE true ON CONFLICT DO NOTHING
                """,
                "DROP TABLE used_sign_in_tokens",
                "ALTER TABLE used_sign_in_tokens_by_expiry RENAME TO used_sign_in_tokens",
            ]
        ),
        (
            7,
            [
                // Every sign-in wrote an entry to this index (about three pages per commit, as SQLite rebalances an index
                // whose last page fills), for revocations by identity, which are rare: they now find the sessions among
                // the identity's user's, through `sessions_user`.
                "DROP INDEX sessions_identity"
            ]
        ),
        (
            8,
            [
                // When periodic work last ran anywhere in the fleet, so that one instance does it per period (the sweep
                // reads whole tables; every instance used to).
                "CREATE TABLE maintenance_runs (name TEXT PRIMARY KEY, last_run_at BIGINT NOT NULL)"
            ]
        ),
        (
            9,
            [
                // Events owed to the app's webhook endpoints, one row per event and endpoint, written in the transaction
                // of the change they tell of. `message_id` is the event's webhook-id; `payload` its body.
                """
                CREATE TABLE webhook_deliveries (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, endpoint TEXT NOT NULL, kind TEXT NOT NULL,
                  user_id TEXT, payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL, next_attempt_at BIGINT NOT NULL,
                  last_error TEXT, created_at BIGINT NOT NULL, finished_at BIGINT)
                """,
                "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at)",
            ]
        ),
        (
            10,
            [
                // The admin API: keys by name, only their hashes kept; claims the app's backend sets on a user (a JSON
                // object) go into their access tokens. No index on e-mails: every sign-in would write two more index
                // entries (a third more bytes per sign-in) for a support look-up that may scan.
                """
                CREATE TABLE admin_keys (name TEXT PRIMARY KEY, key_hash TEXT NOT NULL UNIQUE, read_only INTEGER NOT NULL,
                  created_at BIGINT NOT NULL, revoked_at BIGINT)
                """,
                "ALTER TABLE users ADD COLUMN claims TEXT",
                // The provider of the sign-in that began a session: `idp` in its access tokens.
                "ALTER TABLE sessions ADD COLUMN idp TEXT",
            ]
        ),
        (
            11,
            [
                // Apple's facts (private relay, real-user status, transfer subject, e-mail forwarding) live in each
                // identity's claims, as every other provider's do: `moveAppleFactsToClaims` moves them there first. The
                // columns stay, emptied, while a release before this one may still write them beside it in a fleet.
            ]
        ),
        (
            12,
            [
                // Users a team already had (`latchkey users import`) keep their source and id there, so that a rerun finds
                // them; a disabled user keeps their identities reserved and cannot sign in.
                "ALTER TABLE users ADD COLUMN disabled_at BIGINT",
                "ALTER TABLE users ADD COLUMN imported_source TEXT",
                "ALTER TABLE users ADD COLUMN imported_id TEXT",
                "ALTER TABLE users ADD COLUMN imported_at BIGINT",
                "CREATE UNIQUE INDEX users_imported ON users(imported_source, imported_id)",
                // An app transfer (Apple's TN3159): each Apple identity's transfer_sub from the sending team, and its move
                // to the recipient team's subject.
                """
                CREATE TABLE apple_transfers (identity_id TEXT PRIMARY KEY REFERENCES identities(id) ON DELETE CASCADE, old_subject TEXT NOT NULL,
                  transfer_sub TEXT UNIQUE, target_team TEXT NOT NULL, prepared_at BIGINT NOT NULL, moved_at BIGINT, new_subject TEXT,
                  failure TEXT, closed_at BIGINT)
                """,
            ]
        ),
        (
            13,
            [
                // Guests (`POST /v1/auth/anonymous`) until they link an identity; counters of fixed windows shared by a fleet
                // (the anonymous sign-ins of an address per hour).
                "ALTER TABLE users ADD COLUMN is_anonymous INTEGER",
                "CREATE INDEX users_anonymous ON users(is_anonymous, created_at)",
                "CREATE TABLE rate_counters (key TEXT PRIMARY KEY, window_start BIGINT NOT NULL, count INTEGER NOT NULL)",
            ]
        ),
        (
            14,
            [
                // E-mail sign-in codes: one live code per address, only its hash, and the wrong tries so far.
                "CREATE TABLE email_codes (address TEXT PRIMARY KEY, code_hash TEXT NOT NULL, expires_at BIGINT NOT NULL, attempts INTEGER NOT NULL)"
            ]
        ),
        (
            15,
            [
                // Sessions bound to a device's DPoP key (RFC 9449), and whether App Attest vouched for their sign-in.
                "ALTER TABLE sessions ADD COLUMN dpop_jkt TEXT",
                "ALTER TABLE sessions ADD COLUMN attested INTEGER",
                // Each install's App Attest key: its public half, the last assertion's counter, Apple's receipt.
                """
                CREATE TABLE app_attest_keys (key_id TEXT PRIMARY KEY, user_id TEXT REFERENCES users(id) ON DELETE CASCADE, public_key TEXT NOT NULL,
                  counter BIGINT NOT NULL, receipt TEXT NOT NULL, app_id TEXT NOT NULL, environment TEXT NOT NULL, created_at BIGINT NOT NULL,
                  last_used_at BIGINT NOT NULL)
                """,
                "CREATE INDEX app_attest_keys_user ON app_attest_keys(user_id)",
            ]
        ),
    ]

    static var latestVersion: Int { all.last?.version ?? 0 }

    /// Work a version does in Swift before its statements, in the same transaction.
    static let rewrites: [Int: @Sendable (any SQLDatabase) async throws -> Void] = [11: moveAppleFactsToClaims]

    /// Copies each identity's Apple columns into its claims document (a value already there wins) and empties them.
    static func moveAppleFactsToClaims(_ db: any SQLDatabase) async throws {
        let rows = try await db.raw(
            """
            SELECT id, claims, is_private_email, real_user_status, transfer_subject, email_forwarding_enabled FROM identities
            WHERE is_private_email IS NOT NULL OR real_user_status IS NOT NULL OR transfer_subject IS NOT NULL OR email_forwarding_enabled IS NOT NULL
            """
        ).all()
        for row in rows {
            var identity = LinkedIdentity(
                id: try row.decode(column: "id", as: String.self), userID: "", provider: "", subject: "", claims: try SQLAuthStore.identityClaims(row),
                firstSeenAt: Date(), lastSignInAt: Date())
            try SQLAuthStore.fillAppleFacts(&identity, from: row)
            try await db.raw(
                """
                UPDATE identities SET claims = \(bind: SQLAuthStore.claimsDocument(identity.claims)), is_private_email = NULL, real_user_status = NULL,
                  transfer_subject = NULL, email_forwarding_enabled = NULL WHERE id = \(bind: identity.id)
                """
            ).run()
        }
    }
}
