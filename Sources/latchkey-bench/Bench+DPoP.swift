import AsyncHTTPClient
import Crypto
import Foundation
import LatchkeyBenchReport
import LatchkeyEmulator
import LatchkeyModels
import NIOCore
import NIOHTTP1

extension ServerBench {
    /// DPoP-bound rotations (a proof made, sent and checked, its jti spent in the store) against bearer rotations on
    /// the same server, taking turns; and the server's CPU per rotation of each.
    func dpopRows(server: ChildServer, emulator: RunningEmulator, http: HTTPClient) async throws -> [BenchRow] {
        // Proofs name the server's issuer (`http://127.0.0.1:0` for a server on `--port 0`), not the URL it was reached at.
        var request = HTTPClientRequest(url: server.url + "/.well-known/openid-configuration")
        request.method = .GET
        let metadata = try await http.execute(request, timeout: .seconds(10)).body.collect(upTo: 1 << 16)
        guard let issuer = (try JSONSerialization.jsonObject(with: Data(Array(buffer: metadata))) as? [String: Any])?["issuer"] as? String else {
            throw BenchError("no issuer in the server's metadata")
        }
        let minted = try await mintSignIns(emulator: emulator, http: http, count: 128, provider: "google")
        let keys = (0..<64).map { _ in DPoPProofMaker(privateKey: P256.Signing.PrivateKey()) }
        var bound: [String] = []
        for (item, key) in zip(minted.prefix(64), keys) {
            let proof = try key.proof(method: "POST", url: URL(string: issuer + item.path)!)
            let answer = try await json(http, server.url + item.path, item.body, headers: [("DPoP", proof)])
            guard answer["tokenType"] as? String == "DPoP", let refresh = answer["refreshToken"] as? String else {
                throw BenchError("a sign-in with a DPoP proof was not bound: \(answer)")
            }
            bound.append(refresh)
        }
        var bearer = try await signIn(minted.suffix(64), server: server, http: http).1.map(\.refreshToken)
        var (boundCount, boundCPU, boundWall, bearerCount, bearerCPU, bearerWall) = (0, 0.0, 0.0, 0, 0.0, 0.0)
        for _ in 0..<Self.rounds {
            let (boundRun, cpu, wall) = try await server.metered {
                try await rotations(server: server, http: http, tokens: bound, seconds: seconds / Double(Self.rounds), dpop: (issuer, keys))
            }
            (bound, boundCount, boundCPU, boundWall) = (boundRun.tokens, boundCount + boundRun.count, boundCPU + cpu, boundWall + wall)
            let (bearerRun, plainCPU, plainWall) = try await server.metered {
                try await rotations(server: server, http: http, tokens: bearer, seconds: seconds / Double(Self.rounds))
            }
            (bearer, bearerCount, bearerCPU, bearerWall) = (bearerRun.tokens, bearerCount + bearerRun.count, bearerCPU + plainCPU, bearerWall + plainWall)
        }
        return [
            BenchRow(
                name: "refresh_rotation_dpop_bound", opsPerSecond: Double(boundCount) / boundWall, baselineName: "refresh_rotation_bearer_alongside",
                baselineOpsPerSecond: Double(bearerCount) / bearerWall, unit: .operationsPerSecond),
            BenchRow(
                name: "server_cpu_us_per_dpop_bound_rotation", opsPerSecond: boundCPU / Double(boundCount) * 1e6,
                baselineName: "server_cpu_us_per_bearer_rotation_alongside", baselineOpsPerSecond: bearerCPU / Double(bearerCount) * 1e6,
                unit: .microseconds),
        ]
    }
}
