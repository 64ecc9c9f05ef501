import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyServer
import LatchkeyStore

struct AdminKeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin-keys", abstract: "Create, list or revoke the keys of the admin API (/admin/v1).",
        discussion: """
            The admin API answers 404 until a key exists. A key is printed once, by create, alone on standard output; the
            store keeps only its hash. Requests send it as Authorization: Bearer lka_…
            Examples:
              latchkey admin-keys create --name support --read-only
              latchkey admin-keys list
              latchkey admin-keys revoke support
            Exit codes: 0 done, 1 no such key or the name is taken, 64 usage or configuration error.
            """,
        subcommands: [Create.self, List.self, Revoke.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make an admin key and print it (once).")
        @OptionGroup var options: StoreOptions
        @Option(help: "The key's name: 1 to 64 letters, digits, '.', '_' or '-'. Audit events name it.") var name: String
        @Flag(help: "The key may read, never change anything.") var readOnly = false

        func run() async throws {
            let printer = Printer(json: options.json)
            let made: (key: AdminKey, secret: String)? = try await options.withServer { server, _ in
                do {
                    return try await AdminKeys(store: server.store).create(name: name, readOnly: readOnly)
                } catch AuthStoreError.duplicate {
                    return nil
                }
            }
            guard let made else { throw printer.fail("name_taken", "an admin key named \(name) exists already (revoked keys keep their names)") }
            if options.json {
                printer.emit(["name": made.key.name, "key": made.secret, "readOnly": made.key.readOnly])
            } else {
                print(made.secret)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List admin keys: name, read-only, created, revoked (never the keys).")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let keys = try await options.withServer { server, _ in try await server.store.adminKeys() }
            if options.json {
                Printer(json: true).emit([
                    "keys": keys.map { key -> [String: Any] in
                        var object: [String: Any] = ["name": key.name, "readOnly": key.readOnly, "createdAt": Int(key.createdAt.timeIntervalSince1970)]
                        if let revoked = key.revokedAt { object["revokedAt"] = Int(revoked.timeIntervalSince1970) }
                        return object
                    }
                ])
                return
            }
            if keys.isEmpty { print("no admin keys: the admin API answers 404 (latchkey admin-keys create --name NAME)") }
            for key in keys {
                let state = key.revokedAt.map { "revoked \(describeInstant($0))" } ?? "active"
                print("\(key.name)  \(key.readOnly ? "read-only" : "read-write")  created \(describeInstant(key.createdAt))  \(state)")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke an admin key: its requests get 401 from then on.")
        @OptionGroup var options: StoreOptions
        @Argument(help: "The key's name.") var name: String

        func run() async throws {
            let found = try await options.withServer { server, _ in try await server.store.revokeAdminKey(name: name, at: Date()) }
            let printer = Printer(json: options.json)
            guard found else { throw printer.fail("not_found", "no admin key named \(name.prefix(64))") }
            if options.json { printer.emit(["revoked": name]) } else { print("admin key \(name) revoked") }
        }
    }
}
