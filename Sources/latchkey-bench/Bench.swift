import ArgumentParser
import Crypto
import CryptoExtras
import Foundation
import JWTKit
import LatchkeyBenchReport
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyProviders
import LatchkeyWebAuthn

/// `latchkey-bench`: hot paths measured against baselines in the same run, reported as ratios.
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latchkey-bench",
        abstract: "Measure Latchkey's hot paths against baselines measured in the same run.",
        discussion: """
            Build every product in release mode first: the server rows start the `latchkey` built beside this \
            binary (or LATCHKEY_BENCH_SERVER), the SDK rows `latchkey-sdk-probe`.
              swift build -c release
              swift run -c release latchkey-bench
              swift run -c release latchkey-bench --json > bench.jsonl
              swift run -c release latchkey-bench --soak 10   # 10 minutes of mixed traffic
              swift run -c release latchkey-bench --only instructions --profiles profiles   # under valgrind
            Each row is Latchkey's figure and the baseline's, both in the row's unit, and their ratio. \
            BENCHMARKS.md says what each row measures and its target.
            """
    )

    @Flag(
        help: "One JSON object per line: name, opsPerSecond, baselineOpsPerSecond, baselineName, ratio, unit (opsPerSecond holds the row's figure in its unit)."
    )
    var json = false

    @Option(help: "Seconds to measure each side of each row.")
    var seconds: Double = 2

    @Option(
        help:
            "Which rows: all, core (token verification, client secret), server (HTTP, rotations, sign-ins, memory), emulator (authorizations with many users), instructions (the server under valgrind's callgrind: instructions per operation; not part of all), or memory (the server's memory rows alone, a server of their own; LATCHKEY_BENCH_LAUNCHER runs it under a heap profiler)."
    )
    var only = "all"

    @Option(help: "With --only instructions: N, the operations of each path's first counted batch (its second has 2N; /healthz and rotations 4N and 8N).")
    var operations = 100

    @Option(help: "With --only instructions: a directory for each path's top 15 functions by inclusive instructions (callgrind_annotate).")
    var profiles: String?

    @Option(
        help:
            "Instead of the rows: mixed traffic (sign-ins, refreshes, /v1/me, logouts) for this many minutes on SQLite, sampling RSS, descriptors, database size and p99 every 10 s."
    )
    var soak: Double?

    @Option(help: ArgumentHelp("Print the Markdown profile of a callgrind dump of --operations operations, and nothing else.", visibility: .hidden))
    var annotate: String?

    @Option(help: ArgumentHelp("Run only Latchkey's token verification this many times (for a profiler).", visibility: .hidden))
    var profileIterations: Int?

    func run() async throws {
        guard ["all", "core", "server", "emulator", "instructions", "memory"].contains(only) else {
            throw ValidationError("--only is all, core, server, emulator, instructions or memory")
        }
        if let annotate {
            print(try Callgrind.profile(Callgrind.Cost(perOperation: 0, profile: annotate, operations: operations), name: annotate), terminator: "")
            return
        }
        if only == "memory" {
            printRows(try await ServerBench(seconds: seconds).memoryRows())
            return
        }
        if only == "instructions" {
            guard operations > 0 else { throw ValidationError("--operations takes a number above 0") }
            printRows(try await ServerBench(seconds: seconds).instructionRows(operations: operations, profiles: profiles))
            return
        }
        if let soak {
            guard soak > 0 else { throw ValidationError("--soak takes a number of minutes above 0") }
            let rows = try await SoakBench(minutes: soak).rows { line in
                if !json { print(line) }
                flushStandardOutput()
            }
            printRows(rows)
            return
        }
        let fixture = try await BenchFixture()
        if let profileIterations {
            for _ in 0..<profileIterations { try await fixture.verifyWithLatchkey() }
            return
        }
        var rows: [BenchRow] = []
        if ["all", "core"].contains(only) { rows += try await coreRows(fixture) }
        if ["all", "server"].contains(only) { rows += try await ServerBench(seconds: seconds).rows() }
        if ["all", "emulator"].contains(only) { rows += try await EmulatorBench(seconds: seconds).rows() }
        printRows(rows)
    }

    private func printRows(_ rows: [BenchRow]) {
        for line in json ? rows.map(\.jsonLine) : BenchRow.humanLines(rows) { print(line) }
    }

    private func coreRows(_ fixture: BenchFixture) async throws -> [BenchRow] {
        var rows: [BenchRow] = []

        let ours = try await measure(seconds: seconds) { try await fixture.verifyWithLatchkey() }
        let jwtKit = try await measure(seconds: seconds) { try await fixture.verifyWithJWTKit() }
        rows.append(
            BenchRow(
                name: "apple_id_token_verify", opsPerSecond: ours, baselineName: "jwtkit_apple_identity_token_verify", baselineOpsPerSecond: jwtKit,
                unit: .operationsPerSecond))

        let rawRSA = try await measure(seconds: seconds) { try fixture.verifyRawRSA() }
        rows.append(
            BenchRow(
                name: "apple_id_token_verify", opsPerSecond: ours, baselineName: "raw_rsa2048_pkcs1_sha256_verify", baselineOpsPerSecond: rawRSA,
                unit: .operationsPerSecond))

        let cached = try await measure(seconds: seconds) { _ = try await fixture.secrets.secret() }
        let fresh = try await measure(seconds: seconds) { try fixture.signFreshSecret() }
        rows.append(
            BenchRow(
                name: "apple_client_secret_cached", opsPerSecond: cached, baselineName: "apple_client_secret_sign", baselineOpsPerSecond: fresh,
                unit: .operationsPerSecond))

        // Header parsing (duplicate-member check included) runs before any signature check, so its cost per header
        // byte must not grow with the header: header bytes per second for a 16 KiB header of distinct members
        // against Apple's usual two-member header, with the same payload and signature.
        let (large, normal) = (BenchFixture.tokenWithHeader(bytes: 16 * 1024), BenchFixture.tokenWithHeader(bytes: 0))
        let largeRate = try await measure(seconds: seconds) { _ = try CompactJWS(parsing: large.token, maximumSize: 64 * 1024) } * Double(large.headerBytes)
        let normalRate = try await measure(seconds: seconds) { _ = try CompactJWS(parsing: normal.token, maximumSize: 64 * 1024) } * Double(normal.headerBytes)
        rows.append(
            BenchRow(
                name: "jws_header_16kib_bytes_parsed", opsPerSecond: largeRate, baselineName: "jws_header_apple_bytes_parsed", baselineOpsPerSecond: normalRate,
                unit: .bytesPerSecond))

        // A passkey's CBOR map is checked for repeated keys as it is read: that must cost the same per entry however
        // many entries came before (a scan of the entries so far made 4 times the entries cost 16 times as much).
        let (bigMap, smallMap) = (Self.cborMap(entries: 16_000), Self.cborMap(entries: 4000))
        let bigRate = try await measure(seconds: seconds) { _ = try CBORReader.value(bigMap) } * Double(bigMap.count)
        let smallRate = try await measure(seconds: seconds) { _ = try CBORReader.value(smallMap) } * Double(smallMap.count)
        rows.append(
            BenchRow(
                name: "cbor_map_16000_entries_bytes_parsed", opsPerSecond: bigRate, baselineName: "cbor_map_4000_entries_bytes_parsed",
                baselineOpsPerSecond: smallRate, unit: .bytesPerSecond))
        return rows
    }

    /// A CBOR map of `entries` distinct two-byte integer keys with one-byte values (16,000 fill 64 KiB, the most a
    /// passkey's data may hold).
    static func cborMap(entries: Int) -> [UInt8] {
        var bytes: [UInt8] = [0xB9, UInt8(entries >> 8), UInt8(entries & 0xFF)]
        for key in 0..<entries { bytes += [0x19, UInt8((key + 256) >> 8), UInt8((key + 256) & 0xFF), 0x00] }
        return bytes
    }

    /// Runs `body` repeatedly for about `seconds` after a short warm-up and returns operations per second.
    private func measure(seconds: Double, _ body: () async throws -> Void) async throws -> Double {
        let clock = ContinuousClock()
        let warmUpEnd = clock.now.advanced(by: .milliseconds(200))
        while clock.now < warmUpEnd { try await body() }
        var operations = 0
        let start = clock.now
        let end = start.advanced(by: .nanoseconds(Int64(seconds * 1e9)))
        while clock.now < end {
            for _ in 0..<16 { try await body() }
            operations += 16
        }
        let elapsed = clock.now - start
        return Double(operations) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
}

/// One Apple-style RS256 identity token, the keys to check it three ways, and a client-secret provider.
struct BenchFixture: Sendable {
    let token: String
    let latchkey: IdentityTokenVerifier
    let jwtKit: JWTKeyCollection
    let rawKey: _RSA.Signing.PublicKey
    let signingInput: [UInt8]
    let signature: _RSA.Signing.RSASignature
    let secrets: AppleClientSecretProvider
    let credentials: AppleSigningCredentials
    let nonce = "bench-raw-nonce-0123456789"
    static let clientID = "com.example.app"

    init() async throws {
        let privateKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let now = Int(Date().timeIntervalSince1970)
        let nonceHash = hashedNonce(nonce)
        let header = #"{"kid":"W6WcOKB","alg":"RS256"}"#
        let claims = """
            {"iss":"https://appleid.apple.com","aud":"\(Self.clientID)","exp":\(now + 86_400),"iat":\(now),\
            "sub":"000123.0123456789abcdef0123456789abcdef.0456","nonce":"\(nonceHash)","c_hash":"x1b2c3d4e5f6g7h8i9j0kA",\
            "email":"ab12cd34ef@privaterelay.appleid.com","email_verified":"true","is_private_email":"true",\
            "auth_time":\(now),"nonce_supported":true,"real_user_status":2}
            """
        let input = base64URL(Array(header.utf8)) + "." + base64URL(Array(claims.utf8))
        let signature = try privateKey.signature(for: SHA256.hash(data: Array(input.utf8)), padding: .insecurePKCS1v1_5)
        token = input + "." + base64URL(Array(signature.rawRepresentation))
        signingInput = Array(input.utf8)
        self.signature = signature
        rawKey = privateKey.publicKey

        let primitives = try privateKey.publicKey.getKeyPrimitives()
        let jwks =
            #"{"keys":[{"kty":"RSA","kid":"W6WcOKB","use":"sig","alg":"RS256","n":"\#(base64URL(Array(primitives.modulus)))","e":"\#(base64URL(Array(primitives.publicExponent)))"}]}"#
        let cache = JWKSCache(url: "http://127.0.0.1:9/auth/keys", transport: NoNetwork())
        try await cache.preload(jwksJSON: Array(jwks.utf8))
        latchkey = IdentityTokenVerifier(policy: .apple(clientIDs: [Self.clientID, "com.example.web"]), keys: cache)

        jwtKit = JWTKeyCollection()
        try await jwtKit.add(rsa: Insecure.RSA.PublicKey(pem: privateKey.publicKey.pemRepresentation), digestAlgorithm: .sha256, kid: "W6WcOKB")

        let p256 = P256.Signing.PrivateKey()
        credentials = try AppleSigningCredentials(teamID: "TEAMID1234", keyID: "KEYID12345", privateKeyPEM: p256.pemRepresentation)
        secrets = try AppleClientSecretProvider(credentials: credentials, clientID: Self.clientID)
    }

    /// A token whose header is Apple's two members padded with distinct ones (`"m0":0,"m1":1,…`) to about `bytes`
    /// bytes, with its header's size.
    static func tokenWithHeader(bytes: Int) -> (token: String, headerBytes: Int) {
        var header = #"{"alg":"RS256","kid":"W6WcOKB""#
        var index = 0
        while header.utf8.count < bytes - 16 {
            header += #","m\#(index)":\#(index)"#
            index += 1
        }
        header += "}"
        return (base64URL(Array(header.utf8)) + "." + base64URL(Array(#"{"sub":"x"}"#.utf8)) + "." + base64URL([1, 2, 3]), header.utf8.count)
    }

    func verifyWithLatchkey() async throws {
        _ = try await latchkey.verify(token, expecting: IdentityTokenExpectations(rawNonce: nonce))
    }

    func verifyWithJWTKit() async throws {
        _ = try await jwtKit.verify(token, as: AppleIdentityToken.self, expectedAudiences: [Self.clientID, "com.example.web"])
    }

    func verifyRawRSA() throws {
        guard rawKey.isValidSignature(signature, for: SHA256.hash(data: signingInput), padding: .insecurePKCS1v1_5) else {
            throw LatchkeyError(.invalidSignature, "raw RSA baseline failed")
        }
    }

    func signFreshSecret() throws {
        _ = try AppleClientSecretProvider.makeSecret(credentials: credentials, clientID: Self.clientID, issuedAt: Date(), lifetime: 3600)
    }
}

/// The benchmark never touches the network; the cache is preloaded.
struct NoNetwork: HTTPTransport {
    func send(_ request: OutboundRequest) async throws(LatchkeyError) -> OutboundResponse {
        throw LatchkeyError(.providerUnavailable, "the benchmark does not use the network")
    }
}
