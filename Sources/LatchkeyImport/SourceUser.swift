public import Foundation
public import LatchkeyModels

/// Where a team's existing users come from: `latchkey users import --from NAME`.
public enum ImportSource: String, Sendable, CaseIterable, Codable {
    case firebase
    case supabase
    case auth0
    case cognito
}

/// One user as the source system holds them, in Latchkey's terms: provider names are Latchkey's (`apple`, `google`,
/// `microsoft`, `facebook`, `github`, `x`, …; docs/migration.md has each source's table), subjects are strings exactly
/// as the provider issued them.
public struct SourceUser: Sendable, Equatable {
    /// The source's own id of the user (Firebase `localId`, Supabase `id`, Auth0 `user_id`, Cognito `Username`).
    public var id: String
    public var createdAt: Date?
    public var email: String?
    /// As the source says; nil when it says nothing (never guessed as verified).
    public var emailVerified: Bool?
    public var givenName: String?
    public var familyName: String?
    /// The whole display name, when the source keeps no parts.
    public var displayName: String?
    /// Disabled, banned or blocked in the source.
    public var disabled: Bool
    /// An anonymous (guest) user of the source.
    public var isAnonymous: Bool
    /// The custom claims the source keeps for the user (Firebase `customAttributes`, Supabase `raw_app_meta_data` less
    /// `provider`/`providers`, Auth0 `app_metadata`, Cognito `custom:*`), unchecked.
    public var claims: [String: JSONValue]
    /// The federated identities, with Latchkey's provider names.
    public var identities: [SourceIdentity]
    /// The source's names of the ways in Latchkey does not take (`password`, `phone`, `email` links, an unmapped
    /// provider), for the report.
    public var otherMethods: [String]

    public init(
        id: String, createdAt: Date? = nil, email: String? = nil, emailVerified: Bool? = nil, givenName: String? = nil, familyName: String? = nil,
        displayName: String? = nil, disabled: Bool = false, isAnonymous: Bool = false, claims: [String: JSONValue] = [:],
        identities: [SourceIdentity] = [], otherMethods: [String] = []
    ) {
        self.id = id
        self.createdAt = createdAt
        self.email = email
        self.emailVerified = emailVerified
        self.givenName = givenName
        self.familyName = familyName
        self.displayName = displayName
        self.disabled = disabled
        self.isAnonymous = isAnonymous
        self.claims = claims
        self.identities = identities
        self.otherMethods = otherMethods
    }
}

/// A federated identity of a ``SourceUser``.
public struct SourceIdentity: Sendable, Equatable, Hashable {
    /// Latchkey's provider name.
    public var provider: String
    /// The provider's subject, as a string (a 21-digit Google `sub` is never read as a number).
    public var subject: String
    public var email: String?
    public var emailVerified: Bool?

    public init(provider: String, subject: String, email: String? = nil, emailVerified: Bool? = nil) {
        self.provider = provider
        self.subject = subject
        self.email = email
        self.emailVerified = emailVerified
    }
}

/// A record of the source that could not be read as a user: reported `invalid`, the rest of the source still imported.
public struct SourceProblem: Sendable, Equatable {
    /// The source's id of the user, when the record had one.
    public var sourceID: String?
    /// What is wrong, for the report.
    public var reason: String

    public init(sourceID: String?, reason: String) {
        self.sourceID = sourceID
        self.reason = reason
    }
}

/// Everything read from a source, in the source's order.
public struct SourceRead: Sendable, Equatable {
    public var users: [SourceUser]
    public var problems: [SourceProblem]
    /// Users the source lists twice by design (Cognito after account linking): not imported on their own, reported
    /// `skipped` with this reason.
    public var folded: [SourceProblem]

    public init(users: [SourceUser] = [], problems: [SourceProblem] = [], folded: [SourceProblem] = []) {
        self.users = users
        self.problems = problems
        self.folded = folded
    }
}

/// A source that cannot be read at all (the command exits 1 with this message).
public struct ImportSourceError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String

    public init(_ description: String) { self.description = description }
}
