import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// A provider account, as sign-ins look it up.
struct AccountKey: Sendable, Hashable {
    let provider: String
    let subject: String
}

extension AccountKey {
    init(_ identity: LinkedIdentity) { self.init(provider: identity.provider, subject: identity.subject) }
    init(_ plan: SignInPlan) { self.init(provider: plan.provider, subject: plan.subject) }
}

/// Sign-ins handled as sets, like rotations: the look-ups of accounts that arrive together share one query, and
/// the sign-ins' writes share one transaction with one statement of each kind for the whole group.
extension SQLAuthStore: SignInStepParts {
    package func account(provider: String, subject: String) async throws -> StoredAccount? {
        try await read { db in try await Self.accounts([AccountKey(provider: provider, subject: subject)], db)[0] }
    }

    package func recordSignIn(_ record: SignInRecord) async throws {
        guard try await sqlWrite({ db in try await Self.recordSignIns([record], db)[0] }) else { throw AuthStoreError.duplicate }
    }

    public func signIn(_ plan: SignInPlan) async throws -> SignInStepResult {
        try await Self.translatingErrors { try await signIns.submit(plan) }
    }

    /// Handles `plans` as one group in one transaction, as ``signIn(_:)`` does with plans that arrive together (for tests).
    func signInGroup(_ plans: [SignInPlan]) async throws -> [SignInStepResult] {
        try await sqlWrite { db in try await Self.signIns(plans, db) }
    }

    /// SQLite's plan for `query`, one line per step (for tests).
    func queryPlan(_ query: BoundStatement) async throws -> [String] {
        let explained: BoundStatement = "EXPLAIN QUERY PLAN " + query
        return try await read { db in try await explained.all(on: db).map { try $0.decode(column: "detail", as: String.self) } }
    }

    /// The account of each key (nil for an unknown one), in one query.
    static func accounts(_ keys: [AccountKey], _ db: any SQLDatabase) async throws -> [StoredAccount?] {
        guard !keys.isEmpty else { return [] }
        let rows = try await accountsLookup(Array(Set(keys))).all(on: db)
        var users: [String: UserAccount] = [:]
        var identities: [String: [LinkedIdentity]] = [:]
        for row in rows {
            let identity = try identity(row)
            if users[identity.userID] == nil { users[identity.userID] = try user(row, prefix: "u_") }
            identities[identity.userID, default: []].append(identity)
        }
        var found: [AccountKey: StoredAccount] = [:]
        for (userID, linked) in identities {
            guard let user = users[userID] else { continue }
            for identity in linked {
                found[AccountKey(identity)] = StoredAccount(identity: identity, user: user, identities: linked)
            }
        }
        return keys.map { found[$0] }
    }

    /// Every identity of the users who hold one of `keys`, with its user's columns prefixed `u_`.
    static func accountsLookup(_ keys: [AccountKey]) -> BoundStatement {
        """
        SELECT u.id AS u_id, u.created_at AS u_created_at, u.email AS u_email, u.email_verified AS u_email_verified,
          u.given_name AS u_given_name, u.family_name AS u_family_name, u.claims AS u_claims, u.disabled_at AS u_disabled_at, i.*
        FROM identities i JOIN users u ON u.id = i.user_id
        WHERE i.user_id IN (SELECT user_id FROM identities WHERE (provider, subject) IN (VALUES \(rows: keys.map { [$0.provider, $0.subject] })))
        ORDER BY i.first_seen_at
        """
    }

    /// The provider and subject of each identity that `keys` name and that is linked already.
    static func linkedLookup(_ keys: [AccountKey]) -> BoundStatement {
        "SELECT provider, subject FROM identities WHERE (provider, subject) IN (VALUES \(rows: keys.map { [$0.provider, $0.subject] }))"
    }

    /// Records each claim of an identity token that was not made before, with one statement; true for those.
    /// A token claimed twice in one group counts for its first claim only.
    static func claim(_ claims: [SignInTokenClaim], _ db: any SQLDatabase) async throws -> [Bool] {
        guard !claims.isEmpty else { return [] }
        var distinct: [SignInTokenClaim] = []
        var seen: Set<SignInTokenClaim> = []
        for claim in claims where seen.insert(claim).inserted { distinct.append(claim) }
        let insert: BoundStatement = """
            INSERT INTO used_sign_in_tokens (provider, subject, token_hash, expires_at)
            VALUES \(rows: distinct.map { [$0.provider, $0.subject, $0.tokenHash, $0.expiresAt.millis] })
            ON CONFLICT DO NOTHING RETURNING provider, subject, token_hash, expires_at
            """
        let inserted = try await insert.all(on: db)
        var fresh: Set<StoredClaim> = []
        for row in inserted {
            fresh.insert(
                StoredClaim(
                    provider: try row.decode(column: "provider", as: String.self), subject: try row.decode(column: "subject", as: String.self),
                    tokenHash: try row.decode(column: "token_hash", as: String.self), expiresAt: try row.decode(column: "expires_at", as: Int64.self)))
        }
        return claims.map {
            fresh.remove(StoredClaim(provider: $0.provider, subject: $0.subject, tokenHash: $0.tokenHash, expiresAt: $0.expiresAt.millis)) != nil
        }
    }

    /// A used token's record as stored, which keeps its expiry to the millisecond.
    private struct StoredClaim: Hashable {
        let provider: String
        let subject: String
        let tokenHash: String
        let expiresAt: Int64
    }

    /// A group of sign-in plans in one transaction: the claims of their tokens in one statement, the look-ups of the
    /// accounts of those claimed in one query, then their records written together.
    static func signIns(_ plans: [SignInPlan], _ db: any SQLDatabase) async throws -> [SignInStepResult] {
        let claimed = try await claim(plans.compactMap(\.claim), db)
        var results = [SignInStepResult?](repeating: nil, count: plans.count)
        var going: [Int] = []
        var nextClaim = 0
        for (index, plan) in plans.enumerated() {
            if plan.claim != nil {
                defer { nextClaim += 1 }
                guard claimed[nextClaim] else {
                    results[index] = .tokenUsed
                    continue
                }
            }
            going.append(index)
        }
        let keys = going.map { AccountKey(plans[$0]) }
        let found = try await accounts(keys, db)
        // The group's sign-ins act in order, as one at a time would: each finds its account as the earlier ones left
        // it, so a profile detail that only one of them brings is kept, and a second first sign-in of an identity
        // returns to the user the first one created.
        var leftBy: [AccountKey: StoredAccount] = [:]
        var records: [SignInRecord] = []
        var recorded: [(index: Int, found: StoredAccount?)] = []
        for (position, index) in going.enumerated() {
            let account = leftBy[keys[position]] ?? found[position]
            if account?.user.disabledAt != nil {
                results[index] = .accountDisabled
                continue
            }
            guard let (record, leaves) = plans[index].step(for: account) else {
                results[index] = .declined
                continue
            }
            // The invite's use is spent with the user it creates, or not at all.
            if let invite = plans[index].inviteRedemption(for: record), try await !redeemInvite(codeHash: invite.codeHash, at: invite.at, db) {
                results[index] = .declined
                continue
            }
            records.append(record)
            recorded.append((index, account))
            for after in leaves { leftBy[AccountKey(after.identity)] = after }
        }
        // Plans create only identities that the look-up above, in this transaction, did not find.
        let written = try await recordSignIns(records, db, lookingUpLinked: false)
        for ((index, account), wrote) in zip(recorded, written) { results[index] = wrote ? .recorded(account) : .duplicate }
        return results.map { $0 ?? .declined }
    }

    /// Writes a group of sign-ins with one statement of each kind; false for a sign-in that creates an identity
    /// that is linked already (by an earlier sign-in, or an earlier one in this group), which writes nothing.
    /// - Parameter lookingUpLinked: false when the caller looked the created identities up in this transaction already.
    static func recordSignIns(_ records: [SignInRecord], _ db: any SQLDatabase, lookingUpLinked: Bool = true) async throws -> [Bool] {
        let created = records.compactMap { record -> AccountKey? in
            guard case .create(_, let identity) = record.account else { return nil }
            return AccountKey(identity)
        }
        var linked: Set<AccountKey> = []
        if lookingUpLinked, !created.isEmpty {
            let rows = try await linkedLookup(Array(Set(created))).all(on: db)
            for row in rows {
                linked.insert(
                    AccountKey(provider: try row.decode(column: "provider", as: String.self), subject: try row.decode(column: "subject", as: String.self)))
            }
        }
        var accepted: [SignInRecord] = []
        let answers = records.map { record in
            if case .create(_, let identity) = record.account {
                guard linked.insert(AccountKey(identity)).inserted else { return false }
            }
            accepted.append(record)
            return true
        }

        var newUsers: [UserAccount] = []
        var newIdentities: [LinkedIdentity] = []
        // A returning user who signs in twice in one group is updated once, as the later sign-in left them.
        var changedUsers: [String: UserAccount] = [:]
        var changedIdentities: [String: LinkedIdentity] = [:]
        for record in accepted {
            switch record.account {
            case .create(let user, let identity):
                newUsers.append(user)
                newIdentities.append(identity)
            case .update(let user, let identity):
                if let user { changedUsers[user.id] = user }
                changedIdentities[identity.id] = identity
            }
        }
        if !newUsers.isEmpty {
            try await insertUsers(newUsers).run(on: db)
            try await insertIdentities(newIdentities).run(on: db)
        }
        // In id order, so that instances sharing PostgreSQL lock the rows in the same order.
        if !changedUsers.isEmpty { try await updateUsers(changedUsers.values.sorted { $0.id < $1.id }).run(on: db) }
        if !changedIdentities.isEmpty { try await updateIdentities(changedIdentities.values.sorted { $0.id < $1.id }).run(on: db) }
        // One grant per identity in a statement (an upsert may not touch a row twice); the last sign-in's wins.
        var grants: [String: ProviderGrant] = [:]
        for grant in accepted.compactMap(\.grant) { grants[grant.identityID] = grant }
        if !grants.isEmpty {
            try await upsertGrants(grants.values.sorted { $0.identityID < $1.identityID }).run(on: db)
        }
        let sessions = accepted.compactMap(\.session)
        if !sessions.isEmpty {
            try await insertSessions(sessions.map(\.family)).run(on: db)
            try await insertTokens(sessions.map(\.firstToken)).run(on: db)
        }
        let audits = accepted.flatMap(\.audits)
        if !audits.isEmpty { try await insertAudits(audits).run(on: db) }
        try await insertWebhookDeliveries(accepted.flatMap(\.notices), db)
        return answers
    }
}

// MARK: Statements shared with the single-row writes

extension SQLAuthStore {
    static func insertUsers(_ users: [UserAccount]) -> BoundStatement {
        """
        INSERT INTO users (id, created_at, email, email_verified, given_name, family_name)
        VALUES \(rows: users.map { [$0.id, $0.createdAt.millis, $0.email, $0.emailVerified.flag, $0.givenName, $0.familyName] })
        """
    }

    static func insertIdentities(_ identities: [LinkedIdentity]) -> BoundStatement {
        """
        INSERT INTO identities (id, user_id, provider, subject, email, email_verified, given_name, family_name, claims, first_seen_at, last_sign_in_at)
        VALUES \(rows: identities.map { identity -> [any StatementValue] in
            [
                identity.id, identity.userID, identity.provider, identity.subject, identity.email, identity.emailVerified.flag, identity.givenName,
                identity.familyName, claimsDocument(identity.claims), identity.firstSeenAt.millis, identity.lastSignInAt.millis,
            ]
        })
        """
    }

    /// Updates users (each at most once) with one statement. The casts give PostgreSQL the column types that a
    /// `VALUES` list of only NULLs would lack.
    static func updateUsers(_ users: [UserAccount]) -> BoundStatement {
        """
        UPDATE users SET email = v.column2, email_verified = CAST(v.column3 AS INTEGER), given_name = v.column4, family_name = v.column5
        FROM (VALUES \(rows: users.map { [$0.id, $0.email, $0.emailVerified.flag, $0.givenName, $0.familyName] })) AS v WHERE users.id = v.column1
        """
    }

    /// Updates identities (each at most once) with one statement; see ``updateUsers(_:)``.
    static func updateIdentities(_ identities: [LinkedIdentity]) -> BoundStatement {
        """
        UPDATE identities SET email = v.column2, email_verified = CAST(v.column3 AS INTEGER), given_name = v.column4, family_name = v.column5,
          claims = v.column6, last_sign_in_at = CAST(v.column7 AS BIGINT)
        FROM (VALUES \(rows: identities.map { identity -> [any StatementValue] in
            [
                identity.id, identity.email, identity.emailVerified.flag, identity.givenName, identity.familyName, claimsDocument(identity.claims),
                identity.lastSignInAt.millis,
            ]
        })) AS v WHERE identities.id = v.column1
        """
    }

    /// Saves grants (one per identity), replacing older ones; a replaced grant's validation is due afresh.
    static func upsertGrants(_ grants: [ProviderGrant]) -> BoundStatement {
        """
        INSERT INTO provider_grants (identity_id, provider, client_id, sealed_refresh_token, last_validated_at, created_at)
        VALUES \(rows: grants.map { [$0.identityID, $0.provider, $0.clientID, $0.sealedRefreshToken, $0.lastValidatedAt.millis, $0.createdAt.millis] })
        ON CONFLICT (identity_id) DO UPDATE SET provider = excluded.provider, client_id = excluded.client_id, sealed_refresh_token = excluded.sealed_refresh_token,
          last_validated_at = excluded.last_validated_at, created_at = excluded.created_at, validation_claimed_until = NULL
        """
    }

    static func insertAudits(_ events: [AuditEvent]) -> BoundStatement {
        "INSERT INTO audit_events (id, at, user_id, kind, detail) VALUES \(rows: events.map { [$0.id, $0.at.millis, $0.userID, $0.kind, $0.detail] })"
    }
}
