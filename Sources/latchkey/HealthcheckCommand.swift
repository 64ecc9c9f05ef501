import ArgumentParser
import AsyncHTTPClient
import Foundation
import LatchkeyServer
import NIOCore
import NIOHTTP1
import NIOPosix

/// `latchkey healthcheck`: asks the server this configuration describes for `/healthz`; the container image's
/// HEALTHCHECK, which has no curl.
struct HealthcheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "healthcheck",
        abstract: "Ask the configured server for GET /healthz; exit 0 when it answers 200 {\"status\":\"ok\"}, 1 otherwise.",
        discussion: """
            It reads the same configuration as `latchkey serve`: --config, LATCHKEY_* variables, --host and --port.
            A server that listens on every address (0.0.0.0 or ::) is asked on loopback.
            On failure one line on standard error says why: nothing listening, no answer within --timeout, another status or another body.
            Examples:
              latchkey healthcheck                       # the container image's HEALTHCHECK
              latchkey healthcheck --config /etc/latchkey.json --timeout 1
            Exit codes: 0 healthy, 1 not, 64 usage.
            """
    )

    @Option(help: "A JSON configuration file (the one `serve` runs with).") var config: String?
    @Option(help: "The port the server listens on (default: the configuration's).") var port: Int?
    @Option(help: "The address the server listens on (default: the configuration's).") var host: String?
    @Option(help: "Seconds to wait for the answer.") var timeout: Double = 3

    func validate() throws {
        guard timeout > 0, timeout <= 300 else { throw ValidationError("--timeout is a number of seconds above 0, at most 300") }
        if let port, !(1...65_535).contains(port) { throw ValidationError("--port is a port from 1 to 65535") }
    }

    func run() async throws {
        var overrides: [String: String] = [:]
        if let port { overrides["port"] = String(port) }
        if let host { overrides["host"] = host }
        let configuration: ServerConfiguration
        do {
            configuration = try await Runtime.configuration(file: config, overrides: overrides, administrationOnly: true)
        } catch {
            throw Self.unhealthy("cannot read the configuration: \(Runtime.describe(error))")
        }
        guard configuration.port != 0 else { throw Self.unhealthy("the configured port is 0 (any free port): pass the port the server took with --port") }
        let url = Self.healthURL(host: configuration.host, port: configuration.port)
        if let problem = await Self.check(url, timeout: timeout) { throw Self.unhealthy(problem) }
        print("healthy: \(url) answered 200 {\"status\":\"ok\"}")
    }

    /// `http://HOST:PORT/healthz`, on loopback for a server that listens on every address.
    static func healthURL(host: String, port: Int) -> String {
        let address: String
        switch host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")) {
        case "", "0.0.0.0", "*": address = "127.0.0.1"
        case "::", "::0": address = "[::1]"
        case let literal where literal.contains(":"): address = "[\(literal)]"
        case let name: address = name
        }
        return "http://\(address):\(port)/healthz"
    }

    /// What is wrong with the server at `url`, or nil when it is healthy.
    static func check(_ url: String, timeout: Double) async -> String? {
        var configuration = HTTPClient.Configuration()
        // Connection refused is an answer: fail at once rather than retry until the timeout.
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.redirectConfiguration = .disallow
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let within = timeout == timeout.rounded() ? "\(Int(timeout)) s" : "\(timeout) s"
        let problem: String?
        do {
            problem = try await withThrowingTaskGroup(of: String?.self) { group in
                group.addTask {
                    let response = try await client.execute(HTTPClientRequest(url: url), timeout: .milliseconds(Int64(timeout * 1000) + 1000))
                    let body = String(buffer: try await response.body.collect(upTo: 4096))
                    let shown = body.count > 120 ? String(body.prefix(120)) + "…" : body
                    guard response.status == .ok else {
                        return "\(url) answered \(response.status.code) \(shown)".trimmingCharacters(in: .whitespacesAndNewlines)
                    }
                    let object = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
                    guard object?["status"] as? String == "ok" else { return "\(url) answered 200 but not {\"status\":\"ok\"}: \(shown)" }
                    return nil
                }
                group.addTask {
                    try await Task.sleep(for: .milliseconds(Int64(timeout * 1000)))
                    return "\(url) did not answer within \(within)"
                }
                let first = try await group.next() ?? nil
                group.cancelAll()
                return first
            }
        } catch {
            problem = describe(error, url: url, within: within)
        }
        try? await client.shutdown()
        return problem
    }

    /// A failed request in words.
    static func describe(_ error: any Error, url: String, within: String) -> String {
        if let error = error as? HTTPClientError, [.deadlineExceeded, .connectTimeout, .readTimeout].contains(error) {
            return "\(url) did not answer within \(within)"
        }
        let refused: Bool
        switch error {
        case let error as NIOConnectionError: refused = error.connectionErrors.contains { ($0.error as? IOError)?.errnoCode == ECONNREFUSED }
        case let error as IOError: refused = error.errnoCode == ECONNREFUSED
        default: refused = false
        }
        if refused { return "nothing is listening at \(url) (connection refused)" }
        return "could not reach \(url): \(error)"
    }

    /// One line on standard error, and exit 1.
    static func unhealthy(_ reason: String) -> ExitCode {
        FileHandle.standardError.write(Data("latchkey healthcheck: \(reason.replacingOccurrences(of: "\n", with: " "))\n".utf8))
        return ExitStatus.failure
    }
}
