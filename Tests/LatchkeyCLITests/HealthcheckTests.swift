import Foundation
import LatchkeyTestSupport
import Testing

@Suite("CLI: healthcheck asks the configured server for /healthz")
struct HealthcheckTests {
    @Test("a healthy server: exit 0, found through LATCHKEY_PORT (0.0.0.0 asked on loopback) or the configuration file")
    func healthy() async throws {
        let fleet = try await Fleet(instances: 1, sqlite: true)
        defer { fleet.stop() }
        let port = fleet.ports[0]
        let byEnvironment = try await CLI.run(["healthcheck"], environment: ["LATCHKEY_PORT": String(port), "LATCHKEY_HOST": "0.0.0.0"])
        #expect(byEnvironment.status == 0, "\(byEnvironment.stderr)")
        #expect(byEnvironment.stdout == "healthy: http://127.0.0.1:\(port)/healthz answered 200 {\"status\":\"ok\"}\n")
        #expect(byEnvironment.stderr.isEmpty, "\(byEnvironment.stderr)")

        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try CLI.write(["port": port, "host": "0.0.0.0"], to: directory + "/latchkey.json")
        let byFile = try await CLI.run(["healthcheck", "--config", directory + "/latchkey.json", "--timeout", "2"])
        #expect(byFile.status == 0, "\(byFile.stderr)")
    }

    @Test("nothing listening, a server that never answers, an unreadable configuration: exit 1 and one line saying why")
    func unhealthy() async throws {
        let port = Fleet.freePort()
        let refused = try await CLI.run(["healthcheck", "--port", String(port)])
        #expect(refused.status == 1)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr == "latchkey healthcheck: nothing is listening at http://127.0.0.1:\(port)/healthz (connection refused)\n", "\(refused.stderr)")

        // A socket that accepts connections and never reads them.
        let socket = try ListeningSocket()
        let start = ContinuousClock.now
        let silent = try await CLI.run(["healthcheck", "--port", String(socket.port), "--timeout", "1"])
        #expect(silent.status == 1)
        #expect(silent.stderr == "latchkey healthcheck: http://127.0.0.1:\(socket.port)/healthz did not answer within 1 s\n", "\(silent.stderr)")
        #expect(ContinuousClock.now - start < .seconds(10))

        let directory = CLI.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let missing = try await CLI.run(["healthcheck", "--config", directory + "/missing.json"])
        #expect(missing.status == 1)
        #expect(
            missing.stderr == "latchkey healthcheck: cannot read the configuration: configuration file \(directory)/missing.json does not exist\n",
            "\(missing.stderr)")

        // serve --port 0 takes any free port, which the configuration cannot tell.
        let anyPort = try await CLI.run(["healthcheck"], environment: ["LATCHKEY_PORT": "0"])
        #expect(anyPort.status == 1)
        #expect(
            anyPort.stderr == "latchkey healthcheck: the configured port is 0 (any free port): pass the port the server took with --port\n",
            "\(anyPort.stderr)")

        let usage = try await CLI.run(["healthcheck", "--timeout", "0"])
        #expect(usage.status == 64, "\(usage.stderr)")
    }
}
