public import Foundation
import LatchkeyModels
import SwiftCSV

/// The file `firebase auth:export` writes, JSON (`{"users": [...]}`) or CSV, told apart by its content.
///
/// Formats as firebase-tools' `src/accountExporter.ts` writes them: JSON keeps `localId`, `email`, `emailVerified`,
/// `displayName`, `createdAt` (milliseconds since 1970, as a string), `phoneNumber`, `disabled`, `customAttributes` (the
/// custom claims as a JSON string) and `providerUserInfo[]` (`providerId`, `rawId`, `email`). CSV has no header row and
/// fixed columns: 0 UID, 1 email, 2 email verified, 3 password hash, 5 name, 7–10 / 11–14 / 15–18 / 19–22 the Google,
/// Facebook, Twitter and GitHub identities (id, email, name, photo), 23 creation time, 25 phone, 26 disabled, 27 custom
/// claims; firebase-tools 15.19.0 and later add six more identity blocks from column 28 on.
public enum FirebaseExport {
    /// Firebase's provider ids that are Latchkey's providers; any other id (`password`, `phone`, `yahoo.com`, …) is
    /// one of a user's `otherMethods`.
    public static let providers: [String: String] = [
        "apple.com": "apple", "google.com": "google", "microsoft.com": "microsoft", "facebook.com": "facebook", "github.com": "github",
        "twitter.com": "x",
    ]

    /// The only identities firebase-tools before 15.19.0 exports; it leaves every other provider out of the file.
    static let providersOfOldExports: Set<String> = ["google.com", "facebook.com", "twitter.com", "github.com"]

    /// How to make an export this reader takes, for its messages.
    public static let exportCommand = "`npm install -g firebase-tools@latest`, then `firebase auth:export users.json --format=json --project ID`"

    public static func read(_ data: Data) throws(ImportSourceError) -> SourceRead {
        let bytes = [UInt8](data)
        let start = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        guard let first = bytes[start...].first(where: { ![0x20, 0x0A, 0x0D, 0x09].contains($0) }) else {
            throw ImportSourceError("The Firebase export is empty. Export the users with: \(exportCommand)")
        }
        if first == UInt8(ascii: "{") || first == UInt8(ascii: "[") { return try readJSON(bytes) }
        return try readCSV(bytes)
    }

    // MARK: - JSON

    private static func readJSON(_ bytes: [UInt8]) throws(ImportSourceError) -> SourceRead {
        let document: ExportJSON
        do {
            document = try ExportJSON.parse(bytes)
        } catch {
            throw ImportSourceError("The Firebase export is not valid JSON (\(error.description)). Export it again with: \(exportCommand)")
        }
        guard case .array(let records)? = document["users"] else {
            throw ImportSourceError(
                "This is not a Firebase Auth export: a `firebase auth:export` JSON file is an object with a \"users\" list. Export the users with: \(exportCommand)"
            )
        }
        var read = SourceRead()
        var exported = ExportShape()
        for (position, record) in records.enumerated() {
            guard case .object = record else {
                read.problems.append(SourceProblem(sourceID: nil, reason: "user \(position + 1) of the file is \(record.kind), not an object"))
                continue
            }
            let id: String
            do throws(RecordError) {
                guard let localId = try record.text("localId") else { throw RecordError("it has no localId") }
                id = localId
            } catch {
                read.problems.append(SourceProblem(sourceID: nil, reason: "user \(position + 1) of the file: \(error.reason)"))
                continue
            }
            do {
                let (user, providerIDs) = try jsonUser(record, id: id)
                exported.note(user, providerIDs: providerIDs)
                read.users.append(user)
            } catch {
                read.problems.append(SourceProblem(sourceID: id, reason: error.reason))
            }
        }
        try exported.refuseIfAppleWasLeftOut(newLayout: false)
        return read
    }

    private static func jsonUser(_ record: ExportJSON, id: String) throws(RecordError) -> (SourceUser, [String]) {
        var user = SourceUser(id: id)
        user.email = try record.text("email")
        user.emailVerified = try record.bool("emailVerified")
        user.displayName = try record.text("displayName")
        user.disabled = try record.bool("disabled") ?? false
        if let created = try record.identifier("createdAt") {
            guard let date = ExportDate.epochMilliseconds(created) else { throw RecordError("createdAt \(created.prefix(40)) is not milliseconds since 1970") }
            user.createdAt = date
        }
        if let attributes = try record.text("customAttributes") { user.claims = try claims(fromCustomAttributes: attributes) }
        var methods: [String] = []
        if try record.text("passwordHash") != nil { methods.append("password") }
        if try record.text("phoneNumber") != nil { methods.append("phone") }
        var providerIDs: [String] = []
        for (position, info) in (try record.array("providerUserInfo") ?? []).enumerated() {
            guard case .object = info else { throw RecordError("providerUserInfo[\(position)] is \(info.kind), not an object") }
            guard let providerID = try info.text("providerId") else { throw RecordError("providerUserInfo[\(position)] has no providerId") }
            providerIDs.append(providerID)
            guard let provider = providers[providerID] else {
                methods.append(providerID)
                continue
            }
            guard let subject = try info.identifier("rawId") else { throw RecordError("its \(providerID) identity has no rawId") }
            user.identities.append(SourceIdentity(provider: provider, subject: subject, email: try info.text("email")))
        }
        user.otherMethods = methods.uniqued()
        return (user, providerIDs)
    }

    /// `customAttributes`: the custom claims as a JSON object written into a string.
    private static func claims(fromCustomAttributes text: String) throws(RecordError) -> [String: JSONValue] {
        let object: ExportJSON
        do {
            object = try ExportJSON.parse(text)
        } catch {
            throw RecordError("customAttributes is not JSON (\(error.description))")
        }
        return try object.claimMembers("customAttributes")
    }

    // MARK: - CSV

    /// A CSV row's columns; `fields` may end with the empty field after the trailing comma every row has.
    private struct Row {
        let fields: [String]

        subscript(_ column: Int) -> String? {
            guard column < fields.count else { return nil }
            let value = fields[column]
            return value.isEmpty ? nil : value
        }
    }

    /// The columns of an identity block: its first column holds the provider's user id, then email, name and photo.
    private static let oldBlocks: [(String, Int)] = [("google.com", 7), ("facebook.com", 11), ("twitter.com", 15), ("github.com", 19)]
    /// firebase-tools 15.19.0 and later: six more blocks after the custom claims (column 27).
    private static let newBlocks: [(String, Int)] = [
        ("apple.com", 28), ("microsoft.com", 32), ("gc.apple.com", 36), ("playgames.google.com", 40), ("linkedin.com", 44), ("yahoo.com", 48),
    ]
    /// A row's columns without the trailing comma: before 15.19.0, and from then on.
    private static let oldWidth = 28
    private static let newWidth = 52

    private static func readCSV(_ bytes: [UInt8]) throws(ImportSourceError) -> SourceRead {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ImportSourceError("The Firebase export is neither JSON nor UTF-8 CSV. Export it again with: \(exportCommand)")
        }
        var read = SourceRead()
        var exported = ExportShape()
        var widths: Set<Int> = []
        var readable = 0
        for (number, parsed) in csvRows(text) {
            let fields: [String]
            switch parsed {
            case .success(let row): fields = row
            case .failure(let failure):
                read.problems.append(
                    SourceProblem(sourceID: failure.uid, reason: "row \(number) is not CSV as firebase-tools writes it: \(failure.reason)"))
                continue
            }
            if fields.allSatisfy(\.isEmpty) { continue }
            var width = fields.count
            if width == oldWidth + 1 || width == newWidth + 1, fields.last == "" { width -= 1 }
            guard width == oldWidth || width == newWidth else {
                read.problems.append(
                    SourceProblem(
                        sourceID: fields.first.flatMap { $0.isEmpty ? nil : $0 },
                        reason: "row \(number) has \(width) columns; a firebase auth:export CSV row has \(oldWidth) or \(newWidth)"))
                continue
            }
            readable += 1
            widths.insert(width)
            let row = Row(fields: fields)
            guard let id = row[0] else {
                read.problems.append(SourceProblem(sourceID: nil, reason: "row \(number) has no UID"))
                continue
            }
            do {
                let (user, providerIDs) = try csvUser(row, id: id, newLayout: width == newWidth)
                exported.note(user, providerIDs: providerIDs)
                read.users.append(user)
            } catch {
                read.problems.append(SourceProblem(sourceID: id, reason: "row \(number): \(error.reason)"))
            }
        }
        if readable == 0, !read.problems.isEmpty {
            throw ImportSourceError(
                "This is not a Firebase Auth export: no line has the columns of a `firebase auth:export` CSV file. Export the users with: \(exportCommand)"
            )
        }
        try exported.refuseIfAppleWasLeftOut(newLayout: widths.contains(newWidth))
        return read
    }

    /// A line that is no CSV: why, and the UID it seems to start with.
    private struct CSVFailure: Error {
        let reason: String
        let uid: String?
    }

    /// The rows of the file, each with its number (1-based), or why it is no CSV. The whole file is read at once; when
    /// that fails (firebase-tools leaves quotes in names unescaped), or a field spans lines (a quote left open would
    /// swallow the rows after it), line by line, so that one bad line is one problem.
    private static func csvRows(_ text: String) -> [(Int, Result<[String], CSVFailure>)] {
        if let rows = try? csvRecords(text), !rows.contains(where: { $0.contains { $0.contains(where: \.isNewline) } }) {
            return rows.enumerated().map { ($0.offset + 1, .success($0.element)) }
        }
        return text.split(separator: "\n", omittingEmptySubsequences: false).enumerated().map { number, line in
            let line = String(line.hasSuffix("\r") ? line.dropLast() : line)
            let uid = line.split(separator: ",", maxSplits: 1).first.map(String.init).flatMap { $0.contains("\"") ? nil : $0 }
            do {
                let rows = try csvRecords(line)
                guard rows.count <= 1 else { return (number + 1, .failure(CSVFailure(reason: "it holds more than one row", uid: uid))) }
                return (number + 1, .success(rows.first ?? []))
            } catch let error as CSVParseError {
                switch error {
                case .generic(let message), .quotation(let message): return (number + 1, .failure(CSVFailure(reason: message, uid: uid)))
                }
            } catch {
                return (number + 1, .failure(CSVFailure(reason: "\(error)", uid: uid)))
            }
        }
    }

    private static func csvRecords(_ text: String) throws -> [[String]] {
        let csv = try EnumeratedCSV(string: text, delimiter: .comma, loadColumns: false)
        var rows: [[String]] = []
        try csv.enumerateAsArray(startAt: 0, rowLimit: nil) { rows.append($0) }
        return rows
    }

    private static func csvUser(_ row: Row, id: String, newLayout: Bool) throws(RecordError) -> (SourceUser, [String]) {
        var user = SourceUser(id: id)
        user.email = row[1]
        switch row[2] {
        case nil: break
        case "true": user.emailVerified = true
        case "false": user.emailVerified = false
        case let other?: throw RecordError("email verified is \(other.prefix(40)), not true or false")
        }
        user.displayName = row[5]
        if let created = row[23] {
            guard let date = ExportDate.epochMilliseconds(created) else {
                throw RecordError("creation time \(created.prefix(40)) is not milliseconds since 1970")
            }
            user.createdAt = date
        }
        switch row[26] {
        case nil, "false": break
        case "true": user.disabled = true
        case let other?: throw RecordError("disabled is \(other.prefix(40)), not true or false")
        }
        if let attributes = row[27] { user.claims = try claims(fromCustomAttributes: attributes) }
        var methods: [String] = []
        if row[3] != nil { methods.append("password") }
        if row[25] != nil { methods.append("phone") }
        var providerIDs: [String] = []
        for (providerID, column) in oldBlocks + (newLayout ? newBlocks : []) {
            guard let subject = row[column] else { continue }
            providerIDs.append(providerID)
            if let provider = providers[providerID] {
                user.identities.append(SourceIdentity(provider: provider, subject: subject, email: row[column + 1]))
            } else {
                methods.append(providerID)
            }
        }
        user.otherMethods = methods.uniqued()
        return (user, providerIDs)
    }

    // MARK: - Exports that left Apple out

    /// What the file says of its exporter's age: firebase-tools before 15.19.0 writes Sign in with Apple users with
    /// no identity at all, which would import them with no way to sign in.
    private struct ExportShape {
        /// Users with an Apple private-relay address and no Apple identity: Apple users, as an old export shows them.
        var appleLookingUsers: [String] = []
        /// Whether any user has an identity only newer exports keep (Apple, Microsoft, …).
        var hasNewerProviders = false

        mutating func note(_ user: SourceUser, providerIDs: [String]) {
            if providerIDs.contains(where: { !FirebaseExport.providersOfOldExports.contains($0) }) { hasNewerProviders = true }
            if let email = user.email, ApplePrivateRelay.isRelayAddress(email), !user.identities.contains(where: { $0.provider == "apple" }) {
                appleLookingUsers.append(user.id)
            }
        }

        func refuseIfAppleWasLeftOut(newLayout: Bool) throws(ImportSourceError) {
            guard !newLayout, !hasNewerProviders, let example = appleLookingUsers.first else { return }
            let count = appleLookingUsers.count
            throw ImportSourceError(
                """
                This Firebase export was made by firebase-tools older than 15.19.0, which leaves Sign in with Apple \
                identities out of exports: \(count) user\(count == 1 ? "" : "s") with an Apple private-relay address \
                (\(example)\(count > 1 ? ", …" : "")) \(count == 1 ? "has" : "have") no Apple identity in the file, \
                and importing \(count == 1 ? "it" : "them") would leave \(count == 1 ? "it" : "them") no way to sign in. \
                Export the users again with firebase-tools 15.19.0 or later: \(FirebaseExport.exportCommand)
                """)
        }
    }
}

extension Array where Element: Hashable {
    /// The elements in their order, each once.
    func uniqued() -> [Element] {
        var seen: Set<Element> = []
        return filter { seen.insert($0).inserted }
    }
}
