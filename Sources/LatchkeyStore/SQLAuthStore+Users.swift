import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import SQLKit
import Synchronization

/// Users and the provider accounts linked to them (``UserStore``).
extension SQLAuthStore {
    public func identity(provider: String, subject: String) async throws -> LinkedIdentity? {
        try await read { db in
            try await db.raw("SELECT * FROM identities WHERE provider = \(bind: provider) AND subject = \(bind: subject)").first().map(Self.identity)
        }
    }

    public func createUser(_ user: UserAccount, identity: LinkedIdentity) async throws {
        try await sqlWrite { db in
            try await Self.insertUsers([user]).run(on: db)
            try await Self.insertIdentities([identity]).run(on: db)
        }
    }

    /// The claims document column: a JSON object of strings, NULL when empty.
    static func claimsDocument(_ claims: [String: String]) -> String? {
        guard !claims.isEmpty, let bytes = try? LeanJSONEncoder().encode(claims) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    public func user(id: String) async throws -> UserAccount? {
        try await read { db in try await db.raw("SELECT * FROM users WHERE id = \(bind: id)").first().map { try Self.user($0) } }
    }

    public func identities(userID: String) async throws -> [LinkedIdentity] {
        try await read { db in try await db.raw("SELECT * FROM identities WHERE user_id = \(bind: userID) ORDER BY first_seen_at").all().map(Self.identity) }
    }

    public func profile(userID: String, sessionID: String) async throws -> (UserAccount, [LinkedIdentity])? {
        let key = userID + "|" + sessionID
        let generation = backend.batcher.generation
        let now = ContinuousClock.now
        let cached: Profile?? = profiles.withLock { cache in
            if cache.generation != generation { cache = (generation, [:]) }
            guard let entry = cache.entries[key], now - entry.at < Self.profileLifetime else { return nil }
            return .some(entry.value)
        }
        if let cached { return cached }
        let value = try await readProfile(userID: userID, sessionID: sessionID)
        profiles.withLock { cache in
            guard cache.generation == generation else { return }
            if cache.entries.count >= 10_000 { cache.entries.removeAll(keepingCapacity: true) }
            cache.entries[key] = (now, value)
        }
        return value
    }

    private func readProfile(userID: String, sessionID: String) async throws -> (UserAccount, [LinkedIdentity])? {
        try await read { db in
            let rows = try await db.raw(
                """
                SELECT u.id AS u_id, u.created_at AS u_created_at, u.email AS u_email, u.email_verified AS u_email_verified,
                  u.given_name AS u_given_name, u.family_name AS u_family_name, u.claims AS u_claims, u.is_anonymous AS u_is_anonymous, i.*
                FROM sessions s JOIN users u ON u.id = s.user_id LEFT JOIN identities i ON i.user_id = u.id
                WHERE s.id = \(bind: sessionID) AND s.user_id = \(bind: userID) AND s.revoked_at IS NULL
                ORDER BY i.first_seen_at
                """
            ).all()
            guard let first = rows.first else { return nil }
            let user = try Self.user(first, prefix: "u_")
            let identities = try rows.filter { try $0.decode(column: "id", as: String?.self) != nil }.map(Self.identity)
            return (user, identities)
        }
    }

    public func users(limit: Int) async throws -> [UserAccount] {
        try await read { db in try await db.raw("SELECT * FROM users ORDER BY created_at LIMIT \(bind: limit)").all().map { try Self.user($0) } }
    }

    // MARK: Rows

    /// A user's columns, named with `prefix` where they are read beside another record's (an identity's).
    static func user(_ row: any SQLRow, prefix: String = "") throws -> UserAccount {
        UserAccount(
            id: try row.decode(column: prefix + "id", as: String.self), createdAt: try row.date(prefix + "created_at"),
            email: try row.decode(column: prefix + "email", as: String?.self), emailVerified: try row.flag(prefix + "email_verified"),
            givenName: try row.decode(column: prefix + "given_name", as: String?.self),
            familyName: try row.decode(column: prefix + "family_name", as: String?.self),
            claims: try row.decode(column: prefix + "claims", as: String?.self).flatMap { Self.claims($0) },
            disabledAt: row.contains(column: prefix + "disabled_at") ? try row.optionalDate(prefix + "disabled_at") : nil,
            importedFrom: try importOrigin(row, prefix: prefix),
            isAnonymous: row.contains(column: prefix + "is_anonymous") ? try row.flag(prefix + "is_anonymous") == true : false
        )
    }

    /// Where the user was imported from, when the row has those columns and they are set.
    private static func importOrigin(_ row: any SQLRow, prefix: String) throws -> ImportOrigin? {
        guard row.contains(column: prefix + "imported_source"), let source = try row.decode(column: prefix + "imported_source", as: String?.self),
            let id = try row.decode(column: prefix + "imported_id", as: String?.self)
        else { return nil }
        return ImportOrigin(source: source, id: id, at: try row.optionalDate(prefix + "imported_at") ?? Date(timeIntervalSince1970: 0))
    }

    /// A claims document as stored; nil when it is missing or unreadable (it was checked when it was set).
    static func claims(_ document: String) -> [String: JSONValue]? {
        try? LeanJSONDecoder().decode([String: JSONValue].self, from: Array(document.utf8))
    }

    static func identity(_ row: any SQLRow) throws -> LinkedIdentity {
        var identity = LinkedIdentity(
            id: try row.decode(column: "id", as: String.self), userID: try row.decode(column: "user_id", as: String.self),
            provider: try row.decode(column: "provider", as: String.self), subject: try row.decode(column: "subject", as: String.self),
            email: try row.decode(column: "email", as: String?.self), emailVerified: try row.flag("email_verified"),
            givenName: try row.decode(column: "given_name", as: String?.self), familyName: try row.decode(column: "family_name", as: String?.self),
            claims: try identityClaims(row), firstSeenAt: try row.date("first_seen_at"), lastSignInAt: try row.date("last_sign_in_at")
        )
        // Schema 11 moved Apple's facts from these columns into the claims; a release before it, still running beside
        // this one in a fleet, writes them there only, so the columns fill what the claims lack until they are dropped.
        if row.contains(column: "is_private_email") { try fillAppleFacts(&identity, from: row) }
        return identity
    }

    /// An identity's claims document; empty when there is none or it cannot be read.
    static func identityClaims(_ row: any SQLRow) throws -> [String: String] {
        try row.decode(column: "claims", as: String?.self).map(stringClaims) ?? [:]
    }

    /// An identity's claims document: an object of strings, or none when it is anything else.
    ///
    /// Read from the parsed tree: decoding `[String: String]` through `Decodable` cost about 90,000 instructions for
    /// eight members (the standard library's generic dictionary decoding), and a passkey sign-in reads three identities.
    /// What the strict parser refuses (a member named twice, say) is read by Foundation's, as it was before.
    static func stringClaims(_ document: String) -> [String: String] {
        guard case .object(let members)? = try? JSONTree.parse(Array(document.utf8)) else {
            return (try? JSONDecoder().decode([String: String].self, from: Data(document.utf8))) ?? [:]
        }
        var claims: [String: String] = .init(minimumCapacity: members.count)
        for member in members {
            guard case .string(let value) = member.value else { return [:] }
            claims[member.name] = value
        }
        return claims
    }

    /// Sets the Apple facts `identity`'s claims lack from the columns that held them before schema 11.
    static func fillAppleFacts(_ identity: inout LinkedIdentity, from row: any SQLRow) throws {
        if identity.isPrivateEmail == nil { identity.isPrivateEmail = try row.flag("is_private_email") }
        if identity.realUserStatus == nil { identity.realUserStatus = try row.decode(column: "real_user_status", as: Int?.self) }
        if identity.transferSubject == nil { identity.transferSubject = try row.decode(column: "transfer_subject", as: String?.self) }
        if identity.emailForwardingEnabled == nil { identity.emailForwardingEnabled = try row.flag("email_forwarding_enabled") }
    }

}
