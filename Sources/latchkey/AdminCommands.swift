import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyServer
import LatchkeyStore
import Logging

/// Options shared by the commands that work on the configured store.
struct StoreOptions: ParsableArguments {
    @Option(help: "A JSON configuration file (the same as `latchkey serve`).") var config: String?
    @Flag(help: "Work on the database `latchkey serve --dev` keeps in the current folder (no configuration file).") var dev = false
    @Flag(help: "Print JSON instead.") var json = false

    /// Opens the store (and the server wiring, for deletions that must reach Apple), runs `body`, closes.
    /// An SQLite file must exist already: a mistyped path would otherwise get a new, empty database (and in
    /// development a new encryption key beside it), and a `keys rotate` there would report success.
    func withServer<T>(_ body: (LatchkeyServer, ServerConfiguration) async throws -> T) async throws -> T {
        var logger = Logger(label: "latchkey")
        logger.logLevel = .error
        do {
            if dev && config != nil { throw CLIError("--dev works on serve --dev's database; leave out --config") }
            let configuration = try await Runtime.configuration(file: config, overrides: [:], administrationOnly: true)
            if dev && configuration.mode != .development { throw CLIError("--dev is for development mode (mode is \(configuration.mode.rawValue))") }
            if case .sqlite(let path) = configuration.database, !FileManager.default.fileExists(atPath: path) {
                throw CLIError("no database at \(path): check database.url, or create it with `latchkey migrate` (or by starting `latchkey serve`)")
            }
            let key = try Runtime.encryptionKey(configuration, directory: Runtime.dataDirectory(configuration))
            let store = try await Runtime.openStore(configuration, logger: logger)
            do {
                let server = try await LatchkeyServer.make(configuration: configuration, store: store, encryptionKey: key, logger: logger)
                let result = try await body(server, configuration)
                await store.close()
                return result
            } catch {
                await store.close()
                throw error
            }
        } catch  where error is LatchkeyError || error is CLIError {
            throw ExitStatus.configurationError(error)
        }
    }
}

struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys", abstract: "List or rotate the keys that sign Latchkey access tokens.",
        discussion: "Examples:\n  latchkey keys list\n  latchkey keys rotate --config latchkey.json\nExit codes: 0 done, 64 usage or configuration error.",
        subcommands: [List.self, Rotate.self]
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List signing keys and their states (active, retiring, retired).")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withServer { server, _ in
                let keys = try await server.store.signingKeys()
                let printer = Printer(json: options.json)
                if options.json {
                    printer.emit([
                        "keys": keys.map { key -> [String: Any] in
                            var object: [String: Any] = [
                                "keyId": key.keyID, "algorithm": key.algorithm, "state": key.state.rawValue,
                                "createdAt": Int(key.createdAt.timeIntervalSince1970),
                            ]
                            if let retire = key.retireAfter { object["retireAfter"] = Int(retire.timeIntervalSince1970) }
                            return object
                        }
                    ])
                } else {
                    for key in keys {
                        print(
                            "\(key.keyID)  \(key.algorithm)  \(key.state.rawValue)  created \(describeInstant(key.createdAt))\(key.retireAfter.map { "  retires \(describeInstant($0))" } ?? "")"
                        )
                    }
                }
            }
        }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a new active key; the old one keeps verifying until its tokens have expired.")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withServer { server, configuration in
                let key = try await KeyMaintenance.rotate(
                    store: server.store,
                    box: try SecretBox(base64Key: try Runtime.encryptionKey(configuration, directory: Runtime.dataDirectory(configuration))), now: Date(),
                    overlap: configuration.signingKeyOverlap)
                let signsFrom = key.createdAt.addingTimeInterval(configuration.keyPropagationDelay)
                if options.json {
                    Printer(json: true).emit(["activeKeyId": key.keyID, "signsFrom": Int(signsFrom.timeIntervalSince1970)])
                } else {
                    print(
                        "new active key \(key.keyID): running servers publish and accept it within \(Int(configuration.maintenanceInterval)) s and sign with it from \(describeInstant(signsFrom))"
                    )
                }
            }
        }
    }
}

struct UsersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "users", abstract: "List, show, delete or import users in the configured store.",
        discussion:
            "Examples:\n  latchkey users list\n  latchkey users show <id> --json\n  latchkey users delete <id>   # revokes every provider grant first, like DELETE /v1/me\nExit codes: 0 done, 1 no such user, 64 usage or configuration error.",
        subcommands: [List.self, Show.self, Delete.self, Import.self]
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List users, oldest first.")
        @OptionGroup var options: StoreOptions
        @Option(help: "How many at most.") var limit = 100

        func run() async throws {
            try await options.withServer { server, _ in
                let users = try await server.store.users(limit: limit)
                if options.json {
                    Printer(json: true).emit([
                        "users": users.map { ["id": $0.id, "email": $0.email as Any, "createdAt": Int($0.createdAt.timeIntervalSince1970)] }
                    ])
                } else {
                    for user in users { print("\(user.id)  \(user.email ?? "-")  created \(describeInstant(user.createdAt))") }
                    if users.isEmpty { print("no users") }
                }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a user with identities and sessions.")
        @OptionGroup var options: StoreOptions
        @Argument(help: "The user id.") var id: String

        func run() async throws {
            try await options.withServer { server, _ in
                let user = try await requireUser(id, server)
                let identities = try await server.store.identities(userID: id)
                let sessions = try await server.store.sessions(userID: id)
                if options.json {
                    Printer(json: true).emit([
                        "id": user.id, "email": user.email as Any, "givenName": user.givenName as Any, "familyName": user.familyName as Any,
                        "identities": identities.map { ["provider": $0.provider, "subject": $0.subject, "email": $0.email as Any] },
                        "sessions": sessions.map { ["id": $0.id, "clientId": $0.clientID, "revoked": $0.isRevoked] },
                    ])
                } else {
                    print("user \(user.id)  \(user.email ?? "-")  \([user.givenName, user.familyName].compactMap { $0 }.joined(separator: " "))")
                    for identity in identities {
                        print("  identity \(identity.provider) \(identity.subject)\(identity.isPrivateEmail == true ? " (private relay)" : "")")
                    }
                    for session in sessions {
                        print("  session \(session.id) \(session.clientID) \(session.isRevoked ? "revoked (\(session.revocationReason ?? ""))" : "active")")
                    }
                }
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a user the way DELETE /v1/me does: revoke at every provider, then delete.")
        @OptionGroup var options: StoreOptions
        @Argument(help: "The user id.") var id: String

        func run() async throws {
            try await options.withServer { server, _ in
                guard let report = try await server.sessions.administration.deleteUser(id: id, by: .cli) else { throw noSuchUser(id) }
                if options.json {
                    Printer(json: true).emit([
                        "deleted": id, "tokensRevoked": report.revoked, "revocationsPending": report.queued, "appleTokensRevoked": report.revoked,
                        "appleRevocationsPending": report.queued,
                    ])
                } else {
                    print(
                        "deleted \(id); provider tokens revoked: \(report.revoked)\(report.queued > 0 ? ", \(report.queued) revocation(s) queued for retry by the server" : "")"
                    )
                }
            }
        }
    }
}

/// The user with `id`, or exit 1 saying there is none.
private func requireUser(_ id: String, _ server: LatchkeyServer) async throws -> UserAccount {
    guard let user = try await server.store.user(id: id) else { throw noSuchUser(id) }
    return user
}

/// Says there is no user `id` and gives the exit status to throw (1).
private func noSuchUser(_ id: String) -> ExitCode {
    FileHandle.standardError.write(Data("no user \(id)\n".utf8))
    return ExitStatus.failure
}

struct SessionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sessions", abstract: "Revoke sessions in the configured store.",
        discussion: "Example:\n  latchkey sessions revoke --user <id>\nExit codes: 0 done, 1 no such user, 64 usage or configuration error.",
        subcommands: [Revoke.self]
    )

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "End every session of a user; their refresh tokens stop working at once.")
        @OptionGroup var options: StoreOptions
        @Option(help: "The user id.") var user: String

        func run() async throws {
            try await options.withServer { server, _ in
                // As DELETE /admin/v1/users/{id}/sessions does it, audited with the CLI in place of the admin key.
                guard let count = try await server.sessions.administration.revokeSessions(userID: user, by: .cli) else { throw noSuchUser(user) }
                if options.json { Printer(json: true).emit(["user": user, "revokedSessions": count]) } else { print("revoked \(count) session(s) of \(user)") }
            }
        }
    }
}

struct InvitesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invites", abstract: "Create, list or revoke the invite codes new users need while signup.mode is invite.",
        discussion: """
            Examples:
              latchkey invites create --uses 5 --expires-in 604800 --note "beta testers"
              latchkey invites list --json
              latchkey invites revoke <id>
            The code is printed once, by create; the store keeps only its hash. Apps send it as inviteCode in any sign-in body.
            Exit codes: 0 done, 1 no such invite, 64 usage or configuration error.
            """,
        subcommands: [Create.self, List.self, Revoke.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make an invite code and print it (once).")
        @OptionGroup var options: StoreOptions
        @Option(help: "How many new users the code may create.") var uses = 1
        @Option(help: "Seconds until the code expires (none by default).") var expiresIn: Int?
        @Option(help: "A note for the operator, such as who the code is for.") var note: String?

        func validate() throws {
            guard (1...100_000).contains(uses) else { throw ValidationError("--uses must be between 1 and 100000") }
            if let expiresIn, expiresIn <= 0 { throw ValidationError("--expires-in must be a positive number of seconds") }
        }

        func run() async throws {
            try await options.withServer { server, configuration in
                let (invite, code) = try await server.sessions.administration.createInvite(
                    maxUses: uses, expiresAt: expiresIn.map { Date().addingTimeInterval(TimeInterval($0)) }, note: note, by: .cli)
                if options.json {
                    var object: [String: Any] = ["id": invite.id, "code": code, "maxUses": invite.maxUses]
                    if let expiresAt = invite.expiresAt { object["expiresAt"] = Int(expiresAt.timeIntervalSince1970) }
                    Printer(json: true).emit(object)
                } else {
                    print(code)
                    FileHandle.standardError.write(
                        Data(
                            "invite \(invite.id): \(invite.maxUses) use(s)\(invite.expiresAt.map { ", expires \(describeInstant($0))" } ?? ""); shown once\(configuration.signUp == .open ? " (signup.mode is open: codes are not needed yet)" : "")\n"
                                .utf8))
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List invites with their uses and state (codes are not stored).")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withServer { server, _ in
                let invites = try await server.store.invites()
                let now = Date()
                func state(_ invite: Invite) -> String {
                    if invite.revokedAt != nil { return "revoked" }
                    if invite.uses >= invite.maxUses { return "used" }
                    if let expiresAt = invite.expiresAt, expiresAt <= now { return "expired" }
                    return "usable"
                }
                if options.json {
                    Printer(json: true).emit([
                        "invites": invites.map { invite -> [String: Any] in
                            var object: [String: Any] = [
                                "id": invite.id, "uses": invite.uses, "maxUses": invite.maxUses, "state": state(invite),
                                "createdAt": Int(invite.createdAt.timeIntervalSince1970),
                            ]
                            if let expiresAt = invite.expiresAt { object["expiresAt"] = Int(expiresAt.timeIntervalSince1970) }
                            if let note = invite.note { object["note"] = note }
                            return object
                        }
                    ])
                } else {
                    for invite in invites {
                        print(
                            "\(invite.id)  \(state(invite))  \(invite.uses)/\(invite.maxUses) used  created \(describeInstant(invite.createdAt))\(invite.note.map { "  \($0)" } ?? "")"
                        )
                    }
                    if invites.isEmpty { print("no invites") }
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke an invite: its code creates no more users.")
        @OptionGroup var options: StoreOptions
        @Argument(help: "The invite id (from list or create).") var id: String

        func run() async throws {
            try await options.withServer { server, _ in
                guard try await server.sessions.administration.revokeInvite(id: id, by: .cli) else {
                    FileHandle.standardError.write(Data("no invite \(id)\n".utf8))
                    throw ExitStatus.failure
                }
                if options.json { Printer(json: true).emit(["revoked": id]) } else { print("revoked invite \(id)") }
            }
        }
    }
}
