import CompressNIO
public import Foundation
import NIOCore

/// The file of an Auth0 bulk user export (`POST /api/v2/jobs/users-exports` with `"format": "json"`): one user object
/// a line (NDJSON), gzip-compressed as Auth0 hands it out or already unpacked; a JSON array of the same objects is
/// taken too. The fields are those of Auth0's user profile: `user_id`, `email`, `email_verified`, `given_name`,
/// `family_name`, `name`, `created_at`, `blocked`, `app_metadata` and `identities[]` (`provider`, `user_id`,
/// `profileData`).
public enum Auth0Export {
    /// Auth0's identity providers that are Latchkey's providers; any other (`auth0` for a database connection,
    /// `email` and `sms` for passwordless, `oidc`, `samlp`, `waad`, …) is one of a user's `otherMethods`.
    public static let providers: [String: String] = [
        "apple": "apple", "google-oauth2": "google", "windowslive": "microsoft", "facebook": "facebook", "github": "github", "twitter": "x",
    ]

    /// The largest export unpacked: far more than any tenant's users take, and a bound on a file that unpacks forever.
    static let maximumUnpackedSize = 8 << 30

    public static func read(_ data: Data) throws(ImportSourceError) -> SourceRead {
        var bytes = [UInt8](data)
        if bytes.starts(with: [0x1F, 0x8B]) { bytes = try gunzip(bytes) }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        guard let first = bytes.first(where: { ![0x20, 0x0A, 0x0D, 0x09].contains($0) }) else { return SourceRead() }
        if first == UInt8(ascii: "[") { return try readArray(bytes) }
        guard first == UInt8(ascii: "{") else {
            throw ImportSourceError(
                "This is not an Auth0 user export: Auth0's export job with \"format\": \"json\" writes one JSON user object a line (a CSV export cannot be imported: ask for JSON)."
            )
        }
        return try readLines(bytes)
    }

    /// Unpacks a gzip file, and checks what it unpacked to against the file's trailer (CRC-32 and size): zlib stops
    /// quietly where a cut-short file ends.
    static func gunzip(_ bytes: [UInt8]) throws(ImportSourceError) -> [UInt8] {
        var buffer = ByteBuffer(bytes: bytes)
        let unpacked: [UInt8]
        do {
            var output = try buffer.decompress(with: .gzip(), maxSize: maximumUnpackedSize)
            unpacked = output.readBytes(length: output.readableBytes) ?? []
        } catch {
            throw ImportSourceError("The Auth0 export is a gzip file that cannot be unpacked (\(error)): download it again.")
        }
        guard bytes.count >= 18 else { throw ImportSourceError("The Auth0 export is a gzip file cut short: download it again.") }
        let trailer = bytes.suffix(8).map(UInt32.init)
        let crc = trailer[0] | trailer[1] << 8 | trailer[2] << 16 | trailer[3] << 24
        let size = trailer[4] | trailer[5] << 8 | trailer[6] << 16 | trailer[7] << 24
        guard crc == CRC32.checksum(unpacked), size == UInt32(truncatingIfNeeded: unpacked.count) else {
            throw ImportSourceError("The Auth0 export is a gzip file cut short or damaged (its checksum does not match): download it again.")
        }
        return unpacked
    }

    private static func readArray(_ bytes: [UInt8]) throws(ImportSourceError) -> SourceRead {
        guard case .array(let records) = try document(bytes) else {
            throw ImportSourceError("This is not an Auth0 user export: it is not a list of users.")
        }
        var read = SourceRead()
        for (position, record) in records.enumerated() { add(record, at: "user \(position + 1) of the file", to: &read) }
        return read
    }

    private static func document(_ bytes: [UInt8]) throws(ImportSourceError) -> ExportJSON {
        do {
            return try ExportJSON.parse(bytes)
        } catch {
            throw ImportSourceError("The Auth0 export is not valid JSON (\(error.description)).")
        }
    }

    /// NDJSON: each line read on its own, so that one broken line is one problem.
    private static func readLines(_ bytes: [UInt8]) throws(ImportSourceError) -> SourceRead {
        var read = SourceRead()
        var readLines = 0
        for (number, line) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
            guard line.contains(where: { ![0x20, 0x0D, 0x09].contains($0) }) else { continue }
            let record: ExportJSON
            do {
                record = try ExportJSON.parse(line)
            } catch {
                read.problems.append(SourceProblem(sourceID: nil, reason: "line \(number + 1) is not JSON (\(error.description))"))
                continue
            }
            readLines += 1
            add(record, at: "line \(number + 1)", to: &read)
        }
        if readLines == 0, !read.problems.isEmpty {
            // One JSON document over several lines (an object, or pretty-printed): not the export's format.
            if (try? ExportJSON.parse(bytes)) != nil {
                throw ImportSourceError(
                    "This is not an Auth0 user export: it is one JSON object, where Auth0's export has one user object a line (or a list of users).")
            }
            throw ImportSourceError("This is not an Auth0 user export: no line of it is a JSON user object.")
        }
        return read
    }

    private static func add(_ record: ExportJSON, at place: String, to read: inout SourceRead) {
        guard case .object = record else {
            read.problems.append(SourceProblem(sourceID: nil, reason: "\(place) is \(record.kind), not a user object"))
            return
        }
        let id: String
        do throws(RecordError) {
            guard let userID = try record.identifier("user_id") else { throw RecordError("it has no user_id") }
            id = userID
        } catch {
            read.problems.append(SourceProblem(sourceID: nil, reason: "\(place): \(error.reason)"))
            return
        }
        do {
            read.users.append(try user(record, id: id))
        } catch {
            read.problems.append(SourceProblem(sourceID: id, reason: error.reason))
        }
    }

    private static func user(_ record: ExportJSON, id: String) throws(RecordError) -> SourceUser {
        var user = SourceUser(id: id)
        user.email = try record.text("email")
        user.emailVerified = try record.bool("email_verified")
        user.givenName = try record.text("given_name")
        user.familyName = try record.text("family_name")
        user.displayName = try record.text("name")
        if let created = try record.text("created_at") {
            guard let date = ExportDate.iso8601(created) else { throw RecordError("created_at \(created.prefix(40)) is not an ISO 8601 date") }
            user.createdAt = date
        }
        user.disabled = try record.bool("blocked") ?? false
        user.claims = try record.claims("app_metadata")
        var methods: [String] = []
        if let identities = try record.array("identities") {
            for (position, identity) in identities.enumerated() {
                guard case .object = identity else { throw RecordError("identities[\(position)] is \(identity.kind), not an object") }
                guard let providerName = try identity.text("provider") else { throw RecordError("identities[\(position)] has no provider") }
                guard let provider = providers[providerName] else {
                    methods.append(providerName)
                    continue
                }
                guard let subject = try identity.identifier("user_id") else { throw RecordError("its \(providerName) identity has no user_id") }
                // The first identity is the user's own profile; a linked one carries its profile in profileData.
                let profile = try identity.object("profileData") ?? (position == 0 ? record : nil)
                user.identities.append(
                    SourceIdentity(provider: provider, subject: subject, email: try profile?.text("email"), emailVerified: try profile?.bool("email_verified")))
            }
        } else if let bar = id.firstIndex(of: "|") {
            // An export job asked for no identities: the user id is `provider|id` of the primary identity.
            let providerName = String(id[..<bar])
            let subject = String(id[id.index(after: bar)...])
            if let provider = providers[providerName], !subject.isEmpty {
                user.identities.append(SourceIdentity(provider: provider, subject: subject, email: user.email, emailVerified: user.emailVerified))
            } else {
                methods.append(providerName)
            }
        }
        user.otherMethods = methods.uniqued()
        return user
    }
}

/// CRC-32 (ISO 3309, the polynomial gzip uses).
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        (0..<8).reduce(UInt32(index)) { value, _ in value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        ~bytes.reduce(~UInt32(0)) { crc, byte in table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
    }
}
