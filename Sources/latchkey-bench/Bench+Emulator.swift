import AsyncHTTPClient
import Foundation
import LatchkeyBenchReport
import LatchkeyEmulator
import Logging
import NIOCore
import NIOHTTP1

/// The emulator row of `latchkey-bench`: native sign-ins minted through `POST /emulator/authorizations` on
/// loopback, as test suites do, with 100,000 users against 100 users. The cost of a request must not grow with
/// the number of users, so the ratio should stay near 1.
struct EmulatorBench {
    let seconds: Double
    let concurrency = 16
    static let clientID = "com.example.app"

    func rows() async throws -> [BenchRow] {
        let (logger, directory, _, configuration) = try BenchSetUp.quietEmulator(clientID: Self.clientID)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        defer { _ = http.shutdown() }

        let few = try await Emulator.start(configuration: configuration, logger: logger)
        let many: RunningEmulator
        do {
            many = try await Emulator.start(configuration: configuration, logger: logger)
        } catch {
            await few.stop()
            throw error
        }
        do {
            let fewSubjects = try await createUsers(100, at: few, http: http)
            let manySubjects = try await createUsers(100_000, at: many, http: http)
            // Alternating halves, so that drift in the machine's speed weighs on both sides alike.
            var fewRates: [Double] = []
            var manyRates: [Double] = []
            for _ in 0..<2 {
                fewRates.append(try await authorizations(at: few, subjects: fewSubjects, http: http, seconds: seconds / 2))
                manyRates.append(try await authorizations(at: many, subjects: manySubjects, http: http, seconds: seconds / 2))
            }
            await few.stop()
            await many.stop()
            return [
                BenchRow(
                    name: "emulator_authorization_100000_users", opsPerSecond: manyRates.reduce(0, +) / 2,
                    baselineName: "emulator_authorization_100_users", baselineOpsPerSecond: fewRates.reduce(0, +) / 2, unit: .operationsPerSecond)
            ]
        } catch {
            await few.stop()
            await many.stop()
            throw error
        }
    }

    /// Creates `count` users through `POST /emulator/users/batch`; returns their subjects.
    private func createUsers(_ count: Int, at emulator: RunningEmulator, http: HTTPClient) async throws -> [String] {
        var request = HTTPClientRequest(url: emulator.baseURL + "/emulator/users/batch")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: #"{"count":\#(count)}"#))
        let response = try await http.execute(request, timeout: .seconds(600))
        let body = try await response.body.collect(upTo: 64 << 20)
        struct Created: Decodable {
            struct User: Decodable { let sub: String }
            let users: [User]
        }
        guard response.status == .created, let created = try? JSONDecoder().decode(Created.self, from: Data(Array(buffer: body))), created.users.count == count
        else {
            throw BenchError("creating \(count) emulator users answered \(response.status.code)")
        }
        return created.users.map(\.sub)
    }

    /// `concurrency` workers minting native sign-ins for random users until the time is up (after a short
    /// warm-up); returns authorizations per second.
    private func authorizations(at emulator: RunningEmulator, subjects: [String], http: HTTPClient, seconds: Double) async throws -> Double {
        let url = emulator.baseURL + "/emulator/authorizations"
        @Sendable func authorize() async throws {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: #"{"sub":"\#(subjects.randomElement()!)","clientId":"\#(Self.clientID)"}"#))
            let response = try await http.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 16)
            guard response.status == .created else { throw BenchError("POST /emulator/authorizations answered \(response.status.code)") }
        }
        func run(for duration: Double) async throws -> (count: Int, elapsed: Double) {
            let start = ContinuousClock.now
            let deadline = start.advanced(by: .nanoseconds(Int64(duration * 1e9)))
            let total = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<concurrency {
                    group.addTask {
                        var count = 0
                        while ContinuousClock.now < deadline {
                            try await authorize()
                            count += 1
                        }
                        return count
                    }
                }
                return try await group.reduce(0, +)
            }
            return (total, (ContinuousClock.now - start).seconds)
        }
        _ = try await run(for: 0.2)
        let (count, elapsed) = try await run(for: seconds)
        return Double(count) / elapsed
    }
}
