import AsyncHTTPClient
import Foundation
import LatchkeyTestSupport
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// Real `latchkey serve --dev` processes on one fresh PostgreSQL database (made from LATCHKEY_TEST_DATABASE_URL's
/// server), or one SQLite file, all with one public URL, like instances behind a load balancer. Instance 0 runs the
/// emulator the others use (and that sends Apple's notifications to instance 0).
final class Fleet: Sendable {
    static var databaseURL: String? { ProcessInfo.processInfo.environment["LATCHKEY_TEST_DATABASE_URL"] }

    let directory: String
    let database: String
    let emulatorURL: String
    let ports: [Int]
    let environment: [String: String]
    private let processes: Mutex<[Int: Process]>
    /// The database this fleet made, and the server it is on: ``stop()`` drops it.
    private let madeDatabase: (server: String, name: String)?

    var urls: [String] { ports.map { "http://127.0.0.1:\($0)" } }

    /// Starts `count` instances one after another (each ready before the next starts), or none when `start` is false.
    /// `server`: the PostgreSQL server to make the database on, instead of LATCHKEY_TEST_DATABASE_URL's.
    init(instances count: Int, environment extra: [String: String] = [:], start: Bool = true, sqlite: Bool = false, server: String? = nil) async throws {
        directory = CLI.directory()
        if sqlite {
            database = directory + "/latchkey.sqlite"
            madeDatabase = nil
        } else {
            guard let base = server ?? Self.databaseURL else { throw HarnessError("LATCHKEY_TEST_DATABASE_URL is not set") }
            let name = "fleet_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
            try await Self.execute("CREATE DATABASE \(name)", on: base, database: nil)
            var components = URLComponents(string: base)!
            components.path = "/" + name
            database = components.string!
            madeDatabase = (base, name)
        }
        ports = (0..<count).map { _ in Self.freePort() }
        let emulatorPort = Self.freePort()
        emulatorURL = "http://127.0.0.1:\(emulatorPort)"
        environment = [
            "LATCHKEY_DATABASE_URL": database, "LATCHKEY_PUBLIC_URL": "http://127.0.0.1:\(ports[0])", "LATCHKEY_LOG_LEVEL": "error",
            "LATCHKEY_RATE_LIMIT_PER_IP": "100000", "LATCHKEY_RATE_LIMIT_PER_SUBJECT": "100000", "LATCHKEY_MAINTENANCE_INTERVAL": "1",
            "LATCHKEY_OUTBOX_LEASE": "15",
        ].merging(extra) { $1 }
        processes = Mutex([:])
        if start { for index in 0..<count { try await self.start(index) } }
    }

    /// Starts (or restarts) instance `index` and waits until it is ready. `ignoringFileSizeSignal`: SIGXFSZ ignored,
    /// so a write past a file size limit fails with EFBIG (as on a full disk) instead of killing the process.
    /// `openFileSoftLimit`: the soft limit on open files the process starts with.
    func start(_ index: Int, environment extra: [String: String] = [:], ignoringFileSizeSignal: Bool = false, openFileSoftLimit: Int? = nil)
        async throws
    {
        let process = Process()
        let emulator = index == 0 ? ["--emulator-port", String(URLComponents(string: emulatorURL)!.port!)] : ["--emulator-url", emulatorURL]
        let arguments = ["serve", "--dev", "--port", String(ports[index])] + emulator
        let prelude = (ignoringFileSizeSignal ? ["trap '' XFSZ"] : []) + (openFileSoftLimit.map { ["ulimit -Sn \($0)"] } ?? [])
        (process.executableURL, process.arguments) = CLI.command(arguments, after: prelude)
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LATCHKEY_") }.merging(environment.merging(extra) { $1 }) { $1 }
        process.standardOutput = FileHandle.nullDevice
        // A capped process must not fail on (or stall over) a log file the cap also applies to.
        process.standardError = ignoringFileSizeSignal ? FileHandle.nullDevice : FileHandle.standardError
        try process.run()
        processes.withLock { $0[index] = process }
        try await poll(until: "instance \(index) to become ready", within: .seconds(30), every: .milliseconds(50)) {
            (try? await get(index, "/readyz").status) == 200
        }
    }

    /// The process id of instance `index`, while it runs.
    func processID(_ index: Int) -> Int32? { processes.withLock { $0[index]?.processIdentifier } }

    /// SIGKILL: no graceful shutdown, no final commit.
    func kill(_ index: Int) {
        guard let process = processes.withLock({ $0.removeValue(forKey: index) }) else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    func stop() {
        for index in processes.withLock({ Array($0.keys) }) {
            guard let process = processes.withLock({ $0.removeValue(forKey: index) }) else { continue }
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
        if let madeDatabase { Self.drop(madeDatabase.name, on: madeDatabase.server) }
    }

    /// Drops a database, best effort (its server may be gone). Blocking, because `stop()` runs in `defer`.
    private static func drop(_ name: String, on server: String) {
        let components = URLComponents(string: server)!
        let configuration = PostgresConnection.Configuration(
            host: components.host!, port: components.port ?? 5432, username: components.user!, password: components.password,
            database: String(components.path.dropFirst()), tls: .disable)
        let connecting = PostgresConnection.connect(on: MultiThreadedEventLoopGroup.singleton.next(), configuration: configuration, id: 2, logger: logger)
        guard let connection = try? connecting.wait() else { return }
        _ = try? connection.simpleQuery("DROP DATABASE IF EXISTS \(name) WITH (FORCE)").wait()
        try? connection.close().wait()
    }

    // MARK: HTTP

    /// A dead instance must fail a request at once (connection refused), not after retrying the connection until the timeout.
    static let http: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    struct Answer: Sendable {
        let status: Int
        let body: Data
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
        var array: [[String: Any]] { (try? JSONSerialization.jsonObject(with: body)) as? [[String: Any]] ?? [] }
    }

    enum Method: String { case GET, POST, DELETE }

    func send(_ method: Method, _ url: String, json: [String: any Sendable]? = nil, bearer: String? = nil) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method.rawValue)
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: json)))
        }
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer " + bearer) }
        let response = try await Self.http.execute(request, timeout: .seconds(45))
        let body = try await response.body.collect(upTo: 1 << 20)
        return Answer(status: Int(response.status.code), body: Data(buffer: body))
    }

    func get(_ index: Int, _ path: String, bearer: String? = nil) async throws -> Answer {
        try await send(.GET, urls[index] + path, bearer: bearer)
    }

    func post(_ index: Int, _ path: String, json: [String: any Sendable] = [:], bearer: String? = nil) async throws -> Answer {
        try await send(.POST, urls[index] + path, json: json, bearer: bearer)
    }

    /// A new emulator user's subject.
    func newAppleUser() async throws -> String {
        let answer = try await send(.POST, emulatorURL + "/emulator/users", json: [:])
        guard answer.status == 201, let sub = answer.json["sub"] as? String else { throw HarnessError("creating a user answered \(answer.status)") }
        return sub
    }

    /// A native Sign in with Apple (identity token and code) at instance `index`; the sign-in answer.
    func signIn(at index: Int, sub: String? = nil) async throws -> (sub: String, access: String, refresh: String) {
        let subject: String
        if let sub { subject = sub } else { subject = try await newAppleUser() }
        let rawNonce = UUID().uuidString
        let authorization = try await send(
            .POST, emulatorURL + "/emulator/authorizations", json: ["sub": subject, "clientId": "com.example.app", "nonce": sha256Hex(rawNonce)])
        guard authorization.status == 201 else { throw HarnessError("authorization answered \(authorization.status)") }
        let answer = try await post(
            index, "/v1/auth/apple",
            json: [
                "identityToken": authorization.json["identityToken"] as? String ?? "",
                "authorizationCode": authorization.json["authorizationCode"] as? String ?? "",
                "rawNonce": rawNonce,
            ])
        guard answer.status == 200, let access = answer.json["accessToken"] as? String, let refresh = answer.json["refreshToken"] as? String else {
            throw HarnessError("sign-in answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))")
        }
        return (subject, access, refresh)
    }

    func refresh(at index: Int, _ token: String) async throws -> Answer {
        try await post(index, "/v1/token", json: ["grant_type": "refresh_token", "refresh_token": token])
    }

    /// The emulator's request log, Apple's token and revocation calls among it.
    func emulatorRequests() async throws -> [[String: Any]] { try await send(.GET, emulatorURL + "/emulator/requests").array }

    // MARK: Database

    /// Runs one statement on the fleet's database.
    func execute(_ statement: String) async throws { try await Self.execute(statement, on: database, database: nil) }

    /// The first column of the first row of `query`, as an integer.
    func count(_ query: String) async throws -> Int {
        try await Self.withConnection(database) { connection in
            for try await value in try await connection.query(PostgresQuery(unsafeSQL: query), logger: Self.logger).decode(Int.self) { return value }
            return 0
        }
    }

    /// Runs `body` while another session holds an exclusive lock on `table` of this fleet's database.
    func whileLocked<T: Sendable>(_ table: String, _ body: () async throws -> T) async throws -> T {
        try await Self.withConnection(database) { connection in
            _ = try await connection.query("BEGIN", logger: Self.logger)
            _ = try await connection.query(PostgresQuery(unsafeSQL: "LOCK TABLE \(table) IN ACCESS EXCLUSIVE MODE"), logger: Self.logger)
            let value = try await body()
            _ = try await connection.query("COMMIT", logger: Self.logger)
            return value
        }
    }

    private static let logger = Logger(label: "latchkey.tests.fleet")

    private static func execute(_ statement: String, on url: String, database: String?) async throws {
        try await withConnection(url) { connection in _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
    }

    private static func withConnection<T: Sendable>(_ url: String, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        let components = URLComponents(string: url)!
        let configuration = PostgresConnection.Configuration(
            host: components.host!, port: components.port ?? 5432, username: components.user!, password: components.password,
            database: String(components.path.dropFirst()), tls: .disable)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        do {
            let value = try await body(connection)
            try await connection.close()
            return value
        } catch {
            try? await connection.close()
            throw error
        }
    }

    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
