import Foundation
public import LatchkeyCore
public import LatchkeyJOSE
import LatchkeyModels

/// Brings the users a source read into the store (`latchkey users import`), in batches of one transaction each:
/// each source user becomes one Latchkey user keeping the source's id (or a new one), and each federated identity a
/// (provider, subject) identity. Never merges by e-mail, never moves an identity another user holds, and sends no
/// `user.created`. Rerunning a source changes nothing; a run stopped midway continues where it stopped.
public struct UserImporter: Sendable {
    public let store: any TransactionalStore
    public let timeSource: TimeSource
    /// Users per transaction.
    public var batchSize = 500

    public init(store: any TransactionalStore, timeSource: TimeSource = .system) {
        self.store = store
        self.timeSource = timeSource
    }

    /// How a run behaves.
    public struct Options: Sendable {
        public var source: ImportSource
        /// Check and report everything, write nothing.
        public var dryRun = false
        /// Give each user a new id (the report maps the source's to it) instead of the source's.
        public var newIDs = false

        public init(source: ImportSource, dryRun: Bool = false, newIDs: Bool = false) {
            self.source = source
            self.dryRun = dryRun
            self.newIDs = newIDs
        }
    }

    /// The ids Latchkey takes as a user's: 1 to 128 of `A-Za-z0-9._:|@-`.
    public static func isAcceptableID(_ id: String) -> Bool {
        (1...128).contains(id.utf8.count)
            && id.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
                case UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "|"), UInt8(ascii: "@"), UInt8(ascii: "-"): true
                default: false
                }
            }
    }

    /// Imports `read` and reports on every source user, in the source's order. `progress` hears of each batch.
    public func run(_ read: SourceRead, options: Options, progress: @Sendable (ImportReport.Summary) -> Void = { _ in }) async throws -> ImportReport {
        var entries: [ImportReport.Entry?] = []
        var pending: [(index: Int, user: SourceUser)] = []
        var seenIDs: Set<String> = []
        // An identity on two source users goes to neither: export order is not guaranteed, so no user may win it.
        var holders: [ProviderAccountKey: [String]] = [:]
        var counted: Set<String> = []
        for user in read.users where counted.insert(user.id).inserted {
            for key in Set(user.identities.map { ProviderAccountKey(provider: $0.provider, subject: $0.subject) }) { holders[key, default: []].append(user.id) }
        }
        for user in read.users {
            let index = entries.count
            entries.append(nil)
            if !seenIDs.insert(user.id).inserted {
                entries[index] = .init(user, outcome: .invalid, reason: "the source lists this id twice; the first record was taken")
                continue
            }
            if !options.newIDs, !Self.isAcceptableID(user.id) {
                entries[index] = .init(
                    user, outcome: .invalid,
                    reason: "the id is not 1 to 128 characters of A-Za-z0-9._:|@- and cannot be a Latchkey id; rerun with --new-ids to give new ids")
                continue
            }
            if let bad = user.identities.first(where: { $0.subject.isEmpty || $0.subject.utf8.count > 255 || $0.subject.contains("\u{0}") }) {
                entries[index] = .init(user, outcome: .invalid, reason: "its \(bad.provider) identity has an empty or unusable subject")
                continue
            }
            if user.identities.isEmpty {
                let reason =
                    user.isAnonymous
                    ? "an anonymous user: Latchkey has no anonymous users yet"
                    : "no federated identity (\(user.otherMethods.isEmpty ? "no way in" : user.otherMethods.joined(separator: ", ")) only)"
                entries[index] = .init(user, outcome: .skipped, reason: reason)
                continue
            }
            let shared = user.identities.filter { (holders[ProviderAccountKey(provider: $0.provider, subject: $0.subject)]?.count ?? 0) > 1 }
            if let identity = shared.first {
                let others = holders[ProviderAccountKey(provider: identity.provider, subject: identity.subject)]!.filter { $0 != user.id }
                entries[index] = .init(
                    user, outcome: .conflict,
                    reason: "its \(identity.provider) account \(identity.subject) is also on source user \(others.joined(separator: ", ")); it goes to neither")
                continue
            }
            pending.append((index, user))
        }
        for problem in read.problems {
            entries.append(ImportReport.Entry(sourceId: problem.sourceID ?? "", outcome: .invalid, reason: problem.reason))
        }
        for folded in read.folded {
            entries.append(ImportReport.Entry(sourceId: folded.sourceID ?? "", outcome: .skipped, reason: folded.reason))
        }
        var start = 0
        while start < pending.count {
            let batch = Array(pending[start..<min(start + batchSize, pending.count)])
            for (index, entry) in zip(batch.map(\.index), try await importBatch(batch.map(\.user), options: options)) { entries[index] = entry }
            start += batch.count
            progress(ImportReport.Summary(entries.compactMap { $0 }))
        }
        let all = entries.compactMap { $0 }
        return ImportReport(source: options.source.rawValue, dryRun: options.dryRun, summary: .init(all), users: all)
    }

    /// One batch in one transaction: what the store holds already is looked up in it, then the rest inserted.
    private func importBatch(_ users: [SourceUser], options: Options) async throws -> [ImportReport.Entry] {
        let now = timeSource.now
        let source = options.source.rawValue
        let newIDs = users.map { _ in newIdentifier() }
        let identityIDs = users.map { $0.identities.map { _ in newIdentifier() } }
        let dryRun = options.dryRun
        return try await store.write { tx in
            let imported = try await tx.importedUserIDs(source: source, sourceIDs: users.map(\.id))
            let taken = options.newIDs ? [] : try await tx.existingUserIDs(users.map(\.id))
            let owners = try await tx.identityOwners(users.flatMap { $0.identities.map { ProviderAccountKey(provider: $0.provider, subject: $0.subject) } })
            var entries: [ImportReport.Entry] = []
            var accepted: [NewAccount] = []
            for (position, user) in users.enumerated() {
                if let existing = imported[user.id] {
                    entries.append(.init(user, latchkeyId: existing, outcome: .alreadyImported, reason: nil))
                    continue
                }
                if taken.contains(user.id) {
                    entries.append(
                        .init(user, outcome: .conflict, reason: "a Latchkey user with this id exists already and was not imported from \(source)"))
                    continue
                }
                if let held = user.identities.first(where: { owners[ProviderAccountKey(provider: $0.provider, subject: $0.subject)] != nil }) {
                    let owner = owners[ProviderAccountKey(provider: held.provider, subject: held.subject)]!
                    entries.append(
                        .init(user, outcome: .conflict, reason: "its \(held.provider) account \(held.subject) belongs to Latchkey user \(owner); never moved"))
                    continue
                }
                let (account, note) = Self.account(
                    user, id: options.newIDs ? newIDs[position] : user.id, identityIDs: identityIDs[position], source: source, at: now)
                accepted.append(account)
                entries.append(.init(user, latchkeyId: account.user.id, outcome: .imported, reason: note))
            }
            if !dryRun { try await tx.insertAccounts(accepted) }
            return entries
        }
    }

    /// The Latchkey user and identities of a source user, and a note on what was left out.
    static func account(_ user: SourceUser, id: String, identityIDs: [String], source: String, at now: Date) -> (NewAccount, String?) {
        var note: String?
        var claims: [String: JSONValue]? = user.claims.isEmpty ? nil : user.claims
        if let kept = claims {
            let size = (try? LeanJSONEncoder().encode(kept).count) ?? Int.max
            if let problem = UserClaims.problem(kept, encodedSize: size) {
                claims = nil
                note = "imported without its claims: \(problem)"
            }
        }
        let created = user.createdAt ?? now
        let account = UserAccount(
            id: id, createdAt: created, email: user.email, emailVerified: user.email == nil ? nil : user.emailVerified,
            givenName: user.givenName ?? (user.familyName == nil ? user.displayName : nil), familyName: user.familyName, claims: claims,
            disabledAt: user.disabled ? now : nil, importedFrom: ImportOrigin(source: source, id: user.id, at: now))
        let identities = zip(user.identities, identityIDs).map { identity, identityID in
            LinkedIdentity(
                id: identityID, userID: id, provider: identity.provider, subject: identity.subject, email: identity.email,
                emailVerified: identity.email == nil ? nil : identity.emailVerified, firstSeenAt: created, lastSignInAt: created)
        }
        return (NewAccount(user: account, identities: identities), note)
    }
}

/// What `latchkey users import` did with every source user, as `--report FILE` writes it.
public struct ImportReport: Codable, Sendable, Equatable {
    public var source: String
    public var dryRun: Bool
    public var summary: Summary
    public var users: [Entry]

    /// What became of one source user.
    public enum Outcome: String, Codable, Sendable {
        case imported
        case alreadyImported = "already_imported"
        case skipped
        case conflict
        case invalid
    }

    public struct Entry: Codable, Sendable, Equatable {
        public var sourceId: String
        /// The user's id in Latchkey, when they are there.
        public var latchkeyId: String?
        public var outcome: Outcome
        public var reason: String?
        /// `provider:subject` of each federated identity.
        public var identities: [String]
        /// For a user skipped for lack of a federated identity: the address and whether the source verified it.
        public var email: String?
        public var emailVerified: Bool?
        public var disabled: Bool?

        public init(
            sourceId: String, latchkeyId: String? = nil, outcome: Outcome, reason: String?, identities: [String] = [], email: String? = nil,
            emailVerified: Bool? = nil, disabled: Bool? = nil
        ) {
            self.sourceId = sourceId
            self.latchkeyId = latchkeyId
            self.outcome = outcome
            self.reason = reason
            self.identities = identities
            self.email = email
            self.emailVerified = emailVerified
            self.disabled = disabled
        }

        init(_ user: SourceUser, latchkeyId: String? = nil, outcome: Outcome, reason: String?) {
            self.init(
                sourceId: user.id, latchkeyId: latchkeyId, outcome: outcome, reason: reason, identities: user.identities.map { "\($0.provider):\($0.subject)" },
                email: outcome == .skipped ? user.email : nil, emailVerified: outcome == .skipped ? user.emailVerified : nil,
                disabled: user.disabled ? true : nil)
        }
    }

    public struct Summary: Codable, Sendable, Equatable, CustomStringConvertible {
        public var total = 0
        public var imported = 0
        public var alreadyImported = 0
        public var skipped = 0
        public var conflict = 0
        public var invalid = 0
        /// Of those imported, how many are disabled.
        public var disabled = 0
        /// Apple identities imported without an Apple refresh token (`appleGrant: missing`).
        public var appleGrantsMissing = 0

        public init(_ entries: [Entry]) {
            total = entries.count
            for entry in entries {
                switch entry.outcome {
                case .imported:
                    imported += 1
                    if entry.disabled == true { disabled += 1 }
                    appleGrantsMissing += entry.identities.filter { $0.hasPrefix("apple:") }.count
                case .alreadyImported: alreadyImported += 1
                case .skipped: skipped += 1
                case .conflict: conflict += 1
                case .invalid: invalid += 1
                }
            }
        }

        public var description: String {
            "\(total) source users: \(imported) imported (\(disabled) disabled), \(alreadyImported) already imported, \(skipped) skipped, "
                + "\(conflict) conflicts, \(invalid) invalid; \(appleGrantsMissing) Apple identities without an Apple refresh token"
        }
    }
}
