public import Foundation
import LatchkeyModels

/// The output of `aws cognito-idp list-users --user-pool-id ID` (`{"Users": [...]}`), one file or several pages.
///
/// Each user is a `UserType`: `Username`, `Attributes` (`[{"Name", "Value"}]`, every value a string), `UserCreateDate`
/// (ISO 8601 from AWS CLI v2, seconds since 1970 on the wire), `Enabled` and `UserStatus`. The `identities` attribute is
/// a JSON array in a string: `[{"userId", "providerName", "providerType", "issuer", "primary", "dateCreated"}]`.
///
/// A native user linked to an external identity (AdminLinkProviderForUser) is listed twice by design: as the native
/// user, whose `identities` name the linked identity, and as the external user (status `EXTERNAL_PROVIDER`, user name
/// `<providerName>_<userId>`) with the same identity. The external one is folded into the native one.
public enum CognitoExport {
    /// Cognito's identity provider types that are Latchkey's providers; any other (`LoginWithAmazon`, an `OIDC` or
    /// `SAML` provider under the name its pool gave it) is one of a user's `otherMethods`.
    public static let providers: [String: String] = ["SignInWithApple": "apple", "Google": "google", "Facebook": "facebook"]

    /// The command whose output this reads.
    public static let exportCommand = "`aws cognito-idp list-users --user-pool-id POOL_ID --output json > users.json`"

    public static func read(_ pages: [Data]) throws(ImportSourceError) -> SourceRead {
        var read = SourceRead()
        var users: [PoolUser] = []
        var seen: [String: Int] = [:]
        for (index, page) in pages.enumerated() {
            let name = pages.count == 1 ? "The Cognito export" : "Cognito export file \(index + 1)"
            let document: ExportJSON
            do {
                document = try ExportJSON.parse([UInt8](page))
            } catch {
                throw ImportSourceError("\(name) is not valid JSON (\(error.description)). Export the users with: \(exportCommand)")
            }
            guard case .array(let records)? = document["Users"] else {
                throw ImportSourceError(
                    "\(name) is not the output of `aws cognito-idp list-users`: that is an object with a \"Users\" list. Export the users with: \(exportCommand)"
                )
            }
            let place = pages.count == 1 ? "" : " of file \(index + 1)"
            for (position, record) in records.enumerated() {
                guard case .object = record else {
                    read.problems.append(SourceProblem(sourceID: nil, reason: "user \(position + 1)\(place) is \(record.kind), not an object"))
                    continue
                }
                let username: String
                do throws(RecordError) {
                    guard let name = try record.text("Username") else { throw RecordError("it has no Username") }
                    username = name
                } catch {
                    read.problems.append(SourceProblem(sourceID: nil, reason: "user \(position + 1)\(place): \(error.reason)"))
                    continue
                }
                if let earlier = seen[username] {
                    read.problems.append(
                        SourceProblem(sourceID: username, reason: "listed twice (also as user \(earlier + 1) of the files): only the first is read"))
                    continue
                }
                do {
                    users.append(try user(record, username: username))
                    seen[username] = users.count - 1
                } catch {
                    read.problems.append(SourceProblem(sourceID: username, reason: error.reason))
                }
            }
        }
        read.users = fold(users, into: &read.folded)
        return read
    }

    /// A user of the pool, with what folding needs.
    struct PoolUser {
        var user: SourceUser
        /// Signed up through an external provider (`EXTERNAL_PROVIDER`): the twin of a native user when linked.
        var isExternal: Bool
        /// Its `identities` entries: provider name and user id, as Cognito writes them.
        var links: [Link]
    }

    struct Link: Hashable {
        let providerName: String
        let userID: String
    }

    private static func user(_ record: ExportJSON, username: String) throws(RecordError) -> PoolUser {
        var attributes: [String: String] = [:]
        for (position, attribute) in (try record.array("Attributes") ?? []).enumerated() {
            guard case .object = attribute, let name = try attribute.text("Name") else {
                throw RecordError("Attributes[\(position)] is not a {\"Name\", \"Value\"} object")
            }
            attributes[name] = try attribute.string("Value")
        }
        var user = SourceUser(id: username)
        user.email = attributes["email"].flatMap { $0.isEmpty ? nil : $0 }
        switch attributes["email_verified"] {
        case nil: break
        case "true": user.emailVerified = true
        case "false": user.emailVerified = false
        case let other?: throw RecordError("email_verified is \(other.prefix(40)), not true or false")
        }
        user.givenName = attributes["given_name"].flatMap { $0.isEmpty ? nil : $0 }
        user.familyName = attributes["family_name"].flatMap { $0.isEmpty ? nil : $0 }
        user.displayName = attributes["name"].flatMap { $0.isEmpty ? nil : $0 }
        for (name, value) in attributes where name.hasPrefix("custom:") { user.claims[String(name.dropFirst("custom:".count))] = .string(value) }
        switch record["UserCreateDate"] {
        case nil: break
        case .string(let text)?:
            guard let date = ExportDate.iso8601(text) ?? ExportDate.epochSeconds(text) else {
                throw RecordError("UserCreateDate \(text.prefix(40)) is no date")
            }
            user.createdAt = date
        case .number(let literal)?:
            guard let date = ExportDate.epochSeconds(literal) else { throw RecordError("UserCreateDate \(literal.prefix(40)) is no date") }
            user.createdAt = date
        case let other?: throw RecordError("UserCreateDate is \(other.kind), not a date")
        }
        user.disabled = !(try record.bool("Enabled") ?? true)
        let status = try record.text("UserStatus")
        var links: [Link] = []
        var methods: [String] = []
        if let text = attributes["identities"], !text.isEmpty {
            let entries: ExportJSON
            do {
                entries = try ExportJSON.parse(text)
            } catch {
                throw RecordError("the identities attribute is not JSON (\(error.description))")
            }
            guard case .array(let identities) = entries else { throw RecordError("the identities attribute is \(entries.kind), not a list") }
            for (position, identity) in identities.enumerated() {
                guard case .object = identity else { throw RecordError("identities[\(position)] is \(identity.kind), not an object") }
                guard let providerName = try identity.text("providerName") else { throw RecordError("identities[\(position)] has no providerName") }
                guard let userID = try identity.identifier("userId") else { throw RecordError("its \(providerName) identity has no userId") }
                links.append(Link(providerName: providerName, userID: userID))
                let type = try identity.text("providerType") ?? providerName
                if let provider = providers[type] {
                    let email = status == "EXTERNAL_PROVIDER" ? user.email : nil
                    user.identities.append(SourceIdentity(provider: provider, subject: userID, email: email))
                } else {
                    methods.append(providerName)
                }
            }
        }
        let external = status == "EXTERNAL_PROVIDER" || links.contains { username.lowercased() == "\($0.providerName)_\($0.userID)".lowercased() }
        if !external { methods.insert("password", at: 0) }
        user.otherMethods = methods.uniqued()
        return PoolUser(user: user, isExternal: external, links: links)
    }

    /// The users less the external twins of linked native users, each merged into its native user and listed in
    /// `folded`.
    private static func fold(_ users: [PoolUser], into folded: inout [SourceProblem]) -> [SourceUser] {
        var nativeByLink: [Link: Int] = [:]
        for (index, pooled) in users.enumerated() where !pooled.isExternal {
            for link in pooled.links where nativeByLink[link.lowered] == nil { nativeByLink[link.lowered] = index }
        }
        var result = users.map(\.user)
        var dropped: Set<Int> = []
        for (index, pooled) in users.enumerated() where pooled.isExternal {
            guard let link = pooled.links.first(where: { nativeByLink[$0.lowered] != nil }), let native = nativeByLink[link.lowered] else { continue }
            for identity in pooled.user.identities
            where !result[native].identities.contains(where: { $0.provider == identity.provider && $0.subject == identity.subject }) {
                result[native].identities.append(identity)
            }
            result[native].otherMethods = (result[native].otherMethods + pooled.user.otherMethods).uniqued()
            dropped.insert(index)
            folded.append(
                SourceProblem(
                    sourceID: pooled.user.id,
                    reason:
                        "the \(link.providerName) user linked into \(users[native].user.id): Cognito lists a linked user twice, as the native user and as the external one"
                ))
        }
        return result.enumerated().filter { !dropped.contains($0.offset) }.map(\.element)
    }
}

extension CognitoExport.Link {
    /// Provider names compared without case: Cognito writes new federated user names in lower case.
    var lowered: Self { Self(providerName: providerName.lowercased(), userID: userID) }
}
