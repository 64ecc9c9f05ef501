import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyImport
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyServer
import LatchkeyStore
import Logging

extension StoreOptions {
    /// Opens the configured store with the store settings only (like `latchkey migrate`: a new database is created and
    /// brought to the current schema), runs `body`, closes.
    func withStore<T>(_ body: (SQLAuthStore) async throws -> T) async throws -> T {
        var logger = Logger(label: "latchkey")
        logger.logLevel = .error
        let store: SQLAuthStore
        do {
            if dev && config != nil { throw CLIError("--dev works on serve --dev's database; leave out --config") }
            let configuration = try await Runtime.configuration(file: config, overrides: [:], administrationOnly: true)
            if dev && configuration.mode != .development { throw CLIError("--dev is for development mode (mode is \(configuration.mode.rawValue))") }
            store = try await Runtime.openStore(configuration, logger: logger)
        } catch  where error is LatchkeyError || error is CLIError {
            throw ExitStatus.configurationError(error)
        }
        do {
            let result = try await body(store)
            await store.close()
            return result
        } catch {
            await store.close()
            throw error
        }
    }
}

extension UsersCommand {
    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import", abstract: "Import the users a team already has from Firebase, Supabase, Auth0 or Cognito.",
            discussion: """
                SOURCE is the file of `firebase auth:export` (JSON or CSV), the PostgreSQL URL of a Supabase database, an Auth0
                user-export file (NDJSON or JSON, gzip accepted), or one or more files of `aws cognito-idp list-users`.
                Each user keeps the source's id (the sub of their access tokens), unless --new-ids. Rerunning is safe: users
                imported before are reported already_imported. docs/migration.md has the runbook.
                Exit codes: 0 done (see the summary), 1 the source cannot be read (or --strict and a conflict or invalid
                user), 64 usage or configuration error.
                """)
        @OptionGroup var options: StoreOptions
        @Option(name: .customLong("from"), help: "firebase, supabase, auth0 or cognito.") var source: String
        @Argument(help: "The export file(s), or the Supabase database URL.") var sources: [String]
        @Flag(help: "Check and report everything; write nothing.") var dryRun = false
        @Option(help: "Write the JSON report of every user here.") var report: String?
        @Flag(help: "Give each user a new id; the report maps the source's ids to them.") var newIds = false
        @Flag(help: "Exit 1 when any user is a conflict or invalid.") var strict = false
        @Option(help: "Users written per transaction (1 to 10000).") var batchSize = 500

        func validate() throws {
            guard ImportSource(rawValue: source) != nil else {
                throw ValidationError("--from is \(ImportSource.allCases.map(\.rawValue).joined(separator: ", ")), not \(source)")
            }
            guard !sources.isEmpty else { throw ValidationError("name the export file (or the Supabase database URL)") }
            if ImportSource(rawValue: source) != .cognito, sources.count > 1 { throw ValidationError("only --from cognito takes several files") }
            guard (1...10_000).contains(batchSize) else { throw ValidationError("--batch-size is 1 to 10000") }
        }

        func run() async throws {
            let source = ImportSource(rawValue: source)!
            let printer = Printer(json: options.json)
            let read: SourceRead
            do {
                read = try await SourceReader.read(source, paths: sources, logger: Logger(label: "latchkey"))
            } catch {
                throw printer.fail("unreadable_source", error.description)
            }
            let records = read.users.count + read.problems.count + read.folded.count
            let result = try await options.withStore { store in
                var importer = UserImporter(store: store)
                importer.batchSize = batchSize
                return try await importer.run(read, options: .init(source: source, dryRun: dryRun, newIDs: newIds)) { progress in
                    if !options.json { FileHandle.standardError.write(Data("… \(progress.total) of \(records) source users\n".utf8)) }
                }
            }
            if let report {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                encoder.dateEncodingStrategy = .iso8601
                do {
                    try encoder.encode(result).write(to: URL(fileURLWithPath: report))
                } catch {
                    throw printer.fail("report_not_written", "could not write the report to \(report): \(error.localizedDescription)")
                }
            }
            let summary = result.summary
            if options.json {
                printer.emit([
                    "dryRun": dryRun, "total": summary.total, "imported": summary.imported, "alreadyImported": summary.alreadyImported,
                    "skipped": summary.skipped, "conflict": summary.conflict, "invalid": summary.invalid, "disabled": summary.disabled,
                    "appleGrantsMissing": summary.appleGrantsMissing,
                ])
            } else {
                print((dryRun ? "dry run, nothing written: " : "") + summary.description)
                for entry in result.users where entry.outcome == .conflict || entry.outcome == .invalid {
                    print("  \(entry.outcome.rawValue) \(entry.sourceId.prefix(128)): \(entry.reason ?? "")")
                }
            }
            if strict && (summary.conflict > 0 || summary.invalid > 0) { throw ExitStatus.failure }
        }
    }
}

struct AppleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apple", abstract: "Sign in with Apple tasks that need Apple's REST API.", subcommands: [Transfer.self])

    struct Transfer: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "transfer", abstract: "Carry the app's users through an App Store app transfer to another developer team (Apple's TN3159).",
            discussion: """
                1. Before the transfer, with the SENDING team's apple settings: latchkey apple transfer prepare --target-team RECIPIENT
                2. Accept the transfer; switch apple.teamId, keyId and the key to the RECIPIENT team's.
                3. Within 60 days, with the recipient's settings: users who sign in move on their own; then
                   latchkey apple transfer complete   moves the rest.
                latchkey apple transfer status shows where it stands. docs/migration.md has the runbook.
                Exit codes: 0 done, 1 Apple refused some users or could not be reached, 64 usage or configuration error.
                """,
            subcommands: [Prepare.self, Complete.self, Status.self, Close.self])
    }
}

/// Runs `step` with the transfer run of the configured server's Apple provider (exit 64 when Apple is not configured
/// or a setting is wrong; 1 when Apple could not be reached, to be rerun), then prints what it did under `verb`.
private func runTransfer(
    _ options: StoreOptions, pace: Int, verb: String, _ step: @escaping (AppleTransferRun) async throws -> AppleTransferRun.Report
) async throws {
    let printer = Printer(json: options.json)
    try await options.withServer { server, _ in
        guard let apple = server.providers["apple"] as? AppleIdentityProvider, let clientID = apple.client.configuration.clientIDs.first else {
            throw ExitStatus.configurationError(
                CLIError("Sign in with Apple is not configured: set apple.teamId, apple.keyId, apple.privateKey and apple.clientIds"))
        }
        let run = AppleTransferRun(
            client: apple.client, clientID: clientID, store: server.store, transfers: server.sessions.transfers, pace: .milliseconds(max(0, pace)))
        let report: AppleTransferRun.Report
        do {
            report = try await step(run)
        } catch let error as LatchkeyError where error.code == .invalidConfiguration || error.code == .invalidKey {
            throw ExitStatus.configurationError(error)
        } catch let error as LatchkeyError {
            throw printer.fail(error.errorCode, error.reason + " (rerun to continue where this stopped)")
        }
        try emit(report, verb, printer: printer)
    }
}

private func emit(_ report: AppleTransferRun.Report, _ verb: String, printer: Printer) throws {
    if printer.json {
        printer.emit([
            "dryRun": report.dryRun, verb: report.done,
            "refused": report.refused.map { ["identityId": $0.identityId, "subject": $0.subject, "reason": $0.reason] },
        ])
    } else {
        print("\(report.dryRun ? "dry run: would have " : "")\(verb) \(report.done) Apple identities; Apple refused \(report.refused.count)")
        for refusal in report.refused { print("  refused \(refusal.identityId) (\(refusal.subject)): \(refusal.reason)") }
    }
    if !report.refused.isEmpty { throw ExitStatus.failure }
}

extension AppleCommand.Transfer {
    struct Prepare: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sending team: get a transfer_sub of every Apple identity for the recipient team (resumable).")
        @OptionGroup var options: StoreOptions
        @Option(help: "The RECIPIENT team's id (never this team's own).") var targetTeam: String
        @Flag(help: "Count what would be prepared; call Apple for nothing.") var dryRun = false
        @Option(help: "Milliseconds between two calls to Apple.") var pace = 20

        func run() async throws {
            try await runTransfer(options, pace: pace, verb: "prepared") { try await $0.prepare(targetTeam: targetTeam, dryRun: dryRun) }
        }
    }

    struct Complete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Recipient team: move every Apple identity not moved yet by exchanging its transfer_sub (resumable).")
        @OptionGroup var options: StoreOptions
        @Flag(help: "Count what would be moved; call Apple for nothing.") var dryRun = false
        @Option(help: "Milliseconds between two calls to Apple.") var pace = 20

        func run() async throws {
            try await runTransfer(options, pace: pace, verb: "moved") { try await $0.complete(dryRun: dryRun) }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Prepared, moved and left, and the days left in the 60-day window.")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore { store in
                let summary = try await store.appleTransferSummary()
                let now = Date()
                let daysLeft = summary.windowEndsAt.map { max(0, Int(($0.timeIntervalSince(now) / 86_400).rounded(.up))) }
                if options.json {
                    Printer(json: true).emit([
                        "appleIdentities": summary.appleIdentities, "prepared": summary.prepared, "moved": summary.moved, "left": summary.left,
                        "refused": summary.refused, "closed": summary.closed, "targetTeam": summary.targetTeam as Any,
                        "windowEndsAt": summary.windowEndsAt.map { ISO8601DateFormatter().string(from: $0) } as Any, "daysLeft": daysLeft as Any,
                    ])
                } else {
                    print(Self.describe(summary, daysLeft: daysLeft))
                }
            }
        }

        static func describe(_ summary: AppleTransferSummary, daysLeft: Int?) -> String {
            var lines = [
                "Apple identities: \(summary.appleIdentities); prepared for team \(summary.targetTeam ?? "-"): \(summary.prepared); "
                    + "moved: \(summary.moved); left: \(summary.left); refused by Apple: \(summary.refused); closed: \(summary.closed)"
            ]
            if let daysLeft {
                lines.append(
                    daysLeft > 0
                        ? "window: \(daysLeft) day(s) left (counted from the first move); run `latchkey apple transfer complete` before it ends"
                        : "window: ended; identities left unmoved cannot be moved any more")
            } else if summary.prepared > 0 {
                lines.append("window: not started here (no identity moved yet); it runs 60 days from the transfer's acceptance")
            }
            return lines.joined(separator: "\n")
        }
    }

    struct Close: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "After the window: give up the identities left unmoved, so that unknown Apple accounts may sign up again.")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore { store in
                let closed = try await store.closeAppleTransfers(at: Date())
                if options.json { Printer(json: true).emit(["closed": closed]) } else { print("closed \(closed) unmoved transfer(s)") }
            }
        }
    }
}
