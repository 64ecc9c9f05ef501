import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyServer

/// `latchkey audit export`: the audit trail as NDJSON, for a SIEM.
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit", abstract: "Export the audit trail of the configured store.",
        subcommands: [Export.self]
    )

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write audit events as NDJSON (one JSON object per line, oldest first), as GET /admin/v1/audit?format=ndjson streams them.",
            discussion: """
                Examples:
                  latchkey audit export --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z > november.ndjson
                  latchkey audit export --dev --user 01a2… --type signed_in
                Each line: {"id", "at", "userId", "type", "detail"}. --since is inclusive, --until exclusive (ISO 8601 or Unix seconds).
                Exit codes: 0 done, 64 usage or configuration error.
                """
        )
        @OptionGroup var options: StoreOptions
        @Option(help: "Events at or after this time (ISO 8601 or Unix seconds).") var since: String?
        @Option(help: "Events before this time (ISO 8601 or Unix seconds).") var until: String?
        @Option(help: "One user's events only.") var user: String?
        @Option(help: "One type of event only (signed_in, session_revoked, …).") var type: String?

        func run() async throws {
            let search = AuditSearch(userID: user, kind: type, since: try since.map(parseInstant), until: try until.map(parseInstant))
            if let since = search.since, let until = search.until, since >= until { throw ValidationError("--since must be before --until") }
            try await options.withServer { server, _ in
                try await AuditExport.pages(of: search, in: server.store) { page in
                    FileHandle.standardOutput.write(Data(AuditExport.lines(page)))
                }
            }
        }
    }
}
