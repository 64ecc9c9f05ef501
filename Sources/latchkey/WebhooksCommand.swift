import ArgumentParser
import Foundation
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyServer

struct WebhooksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhooks", abstract: "Make webhook secrets, see and retry deliveries, and test an endpoint.",
        discussion: """
            Examples:
              latchkey webhooks secret
              latchkey webhooks list --config latchkey.json
              latchkey webhooks test 0 --config latchkey.json
              latchkey webhooks retry msg_0190c7a2-….0 --config latchkey.json
            Exit codes: 0 done, 1 the endpoint or delivery failed, 64 usage or configuration error.
            """,
        subcommands: [Secret.self, List.self, Test.self, Retry.self]
    )

    struct Secret: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a new endpoint secret: whsec_ and the base64 of 32 random bytes.")

        func run() { print(WebhookEndpoint.generateSecret()) }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the configured endpoints with their pending and failed deliveries.")
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withServer { server, configuration in
                let counts = try await server.store.webhookDeliveryCounts()
                func count(_ url: String, _ status: WebhookDelivery.Status) -> Int {
                    counts.filter { $0.endpoint == url && $0.status == status }.reduce(0) { $0 + $1.count }
                }
                let endpoints = configuration.webhooks.enumerated().map { index, endpoint -> [String: Any] in
                    [
                        "index": index, "url": endpoint.url, "events": endpoint.events.map { $0.map(\.rawValue).sorted() } ?? ["*"],
                        "pending": count(endpoint.url, .pending), "failed": count(endpoint.url, .failed), "delivered": count(endpoint.url, .delivered),
                    ]
                }
                // Deliveries to endpoints no longer configured stay in the store until swept.
                let configured = Set(configuration.webhooks.map(\.url))
                let orphaned = counts.filter { !configured.contains($0.endpoint) && $0.status != .delivered }.reduce(0) { $0 + $1.count }
                if options.json {
                    Printer(json: true).emit(["endpoints": endpoints, "unconfiguredPendingOrFailed": orphaned])
                    return
                }
                if endpoints.isEmpty { print("no webhook endpoints configured (settings: webhooks[].url, .secret, .events)") }
                for endpoint in endpoints {
                    let events = (endpoint["events"] as? [String] ?? []).joined(separator: ",")
                    print("\(endpoint["index"]!)  \(endpoint["url"]!)  events \(events)  pending \(endpoint["pending"]!)  failed \(endpoint["failed"]!)")
                }
                if orphaned > 0 { print("\(orphaned) pending or failed deliveries are for endpoints no longer configured") }
            }
        }
    }

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send a signed webhook.test event to one endpoint now, and say what it answered.",
            discussion: "URL_INDEX is the endpoint's position in webhooks (0 for the first), as `latchkey webhooks list` shows it.")
        @OptionGroup var options: StoreOptions
        @Argument(help: "The endpoint's position in webhooks.") var urlIndex: Int

        func run() async throws {
            let configuration: ServerConfiguration
            do {
                configuration = try await Runtime.configuration(file: options.config, overrides: [:], administrationOnly: true)
                try configuration.validateWebhooks()
            } catch {
                throw ExitStatus.configurationError(error)
            }
            let printer = Printer(json: options.json)
            guard configuration.webhooks.indices.contains(urlIndex) else {
                throw ExitStatus.configurationError(
                    CLIError("there is no webhooks[\(urlIndex)]: \(configuration.webhooks.count) endpoint(s) configured (latchkey webhooks list)"))
            }
            let endpoint = configuration.webhooks[urlIndex]
            guard case .success(let key) = WebhookSignature.key(fromSecret: endpoint.secret.revealed) else { return }
            let event = LifecycleEvent.test(at: Date())
            let started = ContinuousClock.now
            let outcome = await WebhookDispatcher.post(
                messageID: event.id, body: event.body(), to: endpoint.url, key: key, at: Date(),
                timeout: .milliseconds(Int64(configuration.webhookTimeout * 1000)))
            let elapsed = ContinuousClock.now - started
            let milliseconds = Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
            switch outcome {
            case .answered(let status) where (200..<300).contains(status):
                if options.json {
                    printer.emit(["delivered": true, "status": status, "webhookId": event.id, "milliseconds": milliseconds])
                } else {
                    print(printer.green("delivered") + ": \(endpoint.url) answered \(status) in \(milliseconds) ms (webhook-id \(event.id))")
                }
            case .answered(let status):
                throw printer.fail("endpoint_refused", "\(endpoint.url) answered \(status); a delivery needs a 2xx (is the secret the same at both ends?)")
            case .noAnswer(let reason):
                throw printer.fail("endpoint_unreachable", "\(endpoint.url) did not answer: \(reason)")
            }
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a failed delivery due again now, with a fresh retry schedule; the running server sends it.")
        @OptionGroup var options: StoreOptions
        @Argument(help: "The delivery id (GET /admin/v1/webhooks/deliveries, or the server's log).") var id: String

        func run() async throws {
            let found = try await options.withServer { server, _ in try await server.sessions.administration.retryDelivery(id: id, by: .cli) }
            let printer = Printer(json: options.json)
            guard found else {
                throw printer.fail("not_found", "no failed delivery \(id.prefix(80)) (a pending one is sent on its schedule, a delivered one not again)")
            }
            if options.json { printer.emit(["retrying": id]) } else { print("delivery \(id) is due again; the server sends it within a few seconds") }
        }
    }
}
