import ArgumentParser
import Crypto
import Foundation
import LatchkeyClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `latchkey _sdk-probe` (hidden): a second process running `LatchkeyClient` on a shared ``FileTokenStore``, for the
/// SDK's two-process test. It refreshes `--refreshes` times, each time as if its access token had expired, and
/// prints `presented <SHA-256 of the refresh token>` for every refresh token it sends (never the token itself). With
/// `--die-after-answer` it exits as soon as the server has answered, as an app killed mid-refresh would.
struct SDKProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "_sdk-probe", shouldDisplay: false)

    @Option var baseUrl: String
    @Option var store: String
    @Option var refreshes = 5
    /// Exit (status 3) as soon as the server has answered a refresh, before the client can save the answer.
    @Flag var dieAfterAnswer = false

    /// System time plus an offset the probe moves forward to make its access token due.
    final class SkippingClock: LatchkeyClock, @unchecked Sendable {
        // @unchecked: `offset` is only used while holding `lock`.
        private let lock = NSLock()
        private var offset: TimeInterval = 0
        var now: Date { lock.withLock { Date().addingTimeInterval(offset) } }
        func skip(_ seconds: TimeInterval) { lock.withLock { offset += seconds } }
        func sleep(until deadline: Date) async throws {
            let wait = deadline.timeIntervalSince(now)
            if wait > 0 { try await Task.sleep(nanoseconds: UInt64(min(wait, 3600) * 1e9)) }
        }
    }

    /// Prints the hash of each refresh token sent to `/v1/token`.
    struct ReportingTransport: LatchkeyTransport {
        let inner = URLSessionTransport()
        let dieAfterAnswer: Bool
        func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            if request.url?.path == "/v1/token", let body = request.httpBody,
                let token = String(decoding: body, as: UTF8.self).split(separator: "&").first(where: { $0.hasPrefix("refresh_token=") })
            {
                let hash = SHA256.hash(data: Array(token.dropFirst("refresh_token=".count).utf8)).map { String(format: "%02x", $0) }.joined()
                print("presented \(hash)")
                flushStandardOutput()
            }
            let answer = try await inner.send(request)
            if dieAfterAnswer, request.url?.path == "/v1/token" { Foundation.exit(3) }
            return answer
        }
    }

    func run() async throws {
        guard let url = URL(string: baseUrl) else { throw ValidationError("--base-url is not a URL") }
        let clock = SkippingClock()
        let client = LatchkeyClient(
            baseURL: url, tokenStore: FileTokenStore(url: URL(fileURLWithPath: store)), transport: ReportingTransport(dieAfterAnswer: dieAfterAnswer),
            clock: clock)
        for _ in 0..<refreshes {
            clock.skip(3600)
            _ = try await client.validAccessToken()
        }
    }
}
