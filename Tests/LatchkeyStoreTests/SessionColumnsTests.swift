import Foundation
import LatchkeyCore
import LatchkeyJOSE
import SQLKit
import Testing

@testable import LatchkeyStore

/// `sessions` and `refresh_tokens` are each described by one column list (`SQLAuthStore.sessionColumns`,
/// `SQLAuthStore.refreshTokenColumns`): the inserts and PostgreSQL's select name their columns from it, and
/// PostgreSQL's positional decode reads them in its order. A family and a token with every field set, each to a value no
/// other field of its type has, come back as they went in, so a decode that reads a column for another fails here.
extension StoreConformanceTests {
    @Test("a session and a token with every field set come back unchanged from a look-up and a rotation", arguments: kinds)
    func everyFieldRoundTrips(kind: Kind) async throws {
        try await withStore(kind) { store in
            let (user, identity) = try await makeUser(store)
            let family = SessionFamily(
                id: "\(run)-family-\(newIdentifier())", userID: user.id, identityID: identity.id, clientID: "\(run)-client",
                createdAt: Self.now.addingTimeInterval(1), lastUsedAt: Self.now.addingTimeInterval(2),
                absoluteExpiresAt: Self.now.addingTimeInterval(86_400 * 90),
                revokedAt: Self.now.addingTimeInterval(3), revocationReason: "\(run)-reason", userAgent: "\(run)-agent")
            let token = RefreshTokenRecord(
                hash: "\(run)-hash-\(newIdentifier())", familyID: family.id, parentHash: "\(run)-parent", createdAt: Self.now.addingTimeInterval(4),
                idleExpiresAt: Self.now.addingTimeInterval(86_400 * 30), rotatedAt: Self.now.addingTimeInterval(5), successorHash: "\(run)-successor")
            try await store.createSession(family, firstToken: token)

            let (foundToken, foundFamily) = try #require(try await store.refreshToken(hash: token.hash))
            #expect(foundToken == token)
            #expect(foundFamily == family)
            #expect(try await store.session(id: family.id) == family)
            #expect(try await store.sessions(userID: user.id) == [family])

            // A rotation reads the token and its session (on PostgreSQL with the positional decode, locking them).
            let result = try await store.rotate(
                presentedHash: token.hash, successor: successor(family, parent: token.hash), now: Self.now.addingTimeInterval(6), graceWindow: 10)
            #expect(result == .revoked(family))
        }
    }

    @Test("the column lists name every column of their tables, in the tables' order", arguments: kinds)
    func columnListsMatchTables(kind: Kind) async throws {
        try await withStore(kind) { store in
            let sql = try #require(store as? SQLAuthStore)
            for (table, columns) in [("sessions", SQLAuthStore.sessionColumns), ("refresh_tokens", SQLAuthStore.refreshTokenColumns)] {
                let names = try await sql.read { db in
                    let query: SQLQueryString =
                        kind == .postgres
                        ? """
                        SELECT column_name::text AS name FROM information_schema.columns
                        WHERE table_schema = current_schema() AND table_name = \(bind: table) ORDER BY ordinal_position
                        """
                        : "SELECT name FROM pragma_table_info(\(bind: table)) ORDER BY cid"
                    return try await db.raw(query).all().map { try $0.decode(column: "name", as: String.self) }
                }
                #expect(names == columns.names, "\(table)")
            }
        }
    }
}
