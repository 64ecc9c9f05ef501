import AsyncHTTPClient
import Crypto
import Foundation
import LatchkeyBenchReport
import LatchkeyCore
import LatchkeyEmulator
import LatchkeyJOSE
import NIOCore
import NIOHTTP1

/// A platform authenticator cut to what the bench needs: one ES256 passkey with attestation `none` and no signature
/// counter (zero, which a relying party takes as "keeps none", so concurrent sign-ins with one passkey are fine).
struct BenchPasskey: Sendable {
    static let origin = "http://localhost"
    let key = P256.Signing.PrivateKey()
    let credentialID = (0..<16).map { _ in UInt8.random(in: 0...255) }
    let userHandle: String

    /// `authenticatorData`: the rpId hash, UP | UV | BE | BS (| AT with the attested credential), a zero counter.
    func authenticatorData(attested: Bool) -> [UInt8] {
        var data = Array(SHA256.hash(data: Array("localhost".utf8))) + [attested ? 0x5D : 0x1D, 0, 0, 0, 0]
        guard attested else { return data }
        let point = Array(key.publicKey.x963Representation)
        // COSE_Key {1: 2 (EC2), 3: -7 (ES256), -1: 1 (P-256), -2: x, -3: y}, shortest heads.
        let coseKey = [0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20] + point[1...32] + [0x22, 0x58, 0x20] + point[33...]
        data += [UInt8](repeating: 0, count: 16) + [0, UInt8(credentialID.count)] + credentialID + coseKey
        return data
    }

    static func clientData(_ type: String, _ challenge: String) -> [UInt8] {
        Array(#"{"type":"\#(type)","challenge":"\#(challenge)","origin":"\#(origin)","crossOrigin":false}"#.utf8)
    }

    func registration(challenge: String) -> [String: Any] {
        let authData = authenticatorData(attested: true)
        // {"fmt": "none", "attStmt": {}, "authData": bytes}; the authenticator data is 148 bytes, under 256.
        let attestation =
            [0xA3, 0x63] + Array("fmt".utf8) + [0x64] + Array("none".utf8) + [0x67] + Array("attStmt".utf8) + [0xA0, 0x68]
            + Array("authData".utf8) + [0x58, UInt8(authData.count)] + authData
        let id = base64URL(credentialID)
        return [
            "id": id, "rawId": id, "type": "public-key",
            "response": [
                "clientDataJSON": base64URL(Self.clientData("webauthn.create", challenge)), "attestationObject": base64URL(attestation),
            ],
        ]
    }

    func assertion(challenge: String) throws -> [String: Any] {
        let authData = authenticatorData(attested: false)
        let clientData = Self.clientData("webauthn.get", challenge)
        let signature = try key.signature(for: authData + Array(SHA256.hash(data: clientData)))
        let id = base64URL(credentialID)
        return [
            "id": id, "rawId": id, "type": "public-key",
            "response": [
                "clientDataJSON": base64URL(clientData), "authenticatorData": base64URL(authData),
                "signature": base64URL(Array(signature.derRepresentation)), "userHandle": userHandle,
            ],
        ]
    }
}

extension ServerBench {
    /// The settings that turn passkeys on for ``BenchPasskey``.
    static let passkeySettings = ["LATCHKEY_PASSKEYS_RP_ID": "localhost", "LATCHKEY_PASSKEYS_ORIGINS": BenchPasskey.origin]

    /// Passkey sign-ins (options, then the assertion: two requests each) beside the Google ID-token sign-ins measured on
    /// the same server: each of `sessions`' users adds a passkey, then they sign in with them, `concurrency` at a time.
    func passkeyRows(
        server: ChildServer, emulator: RunningEmulator, http: HTTPClient, sessions: [Session], google: (rate: Double, cpuMicroseconds: Double)
    ) async throws -> [BenchRow] {
        let passkeys = try await registerPasskeys(server: server, http: http, sessions: sessions)
        try await passkeySignIns(server, http, passkeys, count: Self.warmUp)
        let count = max(400, Int(600 * seconds))
        let (_, cpu, wall) = try await server.metered { try await passkeySignIns(server, http, passkeys, count: count) }
        let atEqualRate = try await atEqualRate(
            "passkey_sign_in", server: server, emulator: emulator, http: http, count: count, pathRate: Double(count) / wall
        ) { try await Self.passkeySignIn(server: server, http: http, passkey: passkeys[$0 % passkeys.count]) }
        return [
            BenchRow(
                name: "passkey_sign_in", opsPerSecond: Double(count) / wall, baselineName: "google_id_token_sign_in", baselineOpsPerSecond: google.rate,
                unit: .operationsPerSecond),
            BenchRow(
                name: "server_cpu_us_per_passkey_sign_in", opsPerSecond: cpu / Double(count) * 1e6, baselineName: "server_cpu_us_per_google_sign_in",
                baselineOpsPerSecond: google.cpuMicroseconds, unit: .microseconds),
            atEqualRate,
        ]
    }

    /// Each of `sessions`' users adds a passkey.
    func registerPasskeys(server: ChildServer, http: HTTPClient, sessions: [Session]) async throws -> [BenchPasskey] {
        var passkeys: [BenchPasskey] = []
        for session in sessions {
            let options = try await post(http, server.url + "/v1/me/passkeys/options", [:], bearer: session.accessToken)
            guard let challenge = options["challenge"] as? String, let user = options["user"] as? [String: Any], let handle = user["id"] as? String else {
                throw BenchError("no passkey creation options: \(options)")
            }
            let passkey = BenchPasskey(userHandle: handle)
            let added = try await post(
                http, server.url + "/v1/me/passkeys", ["credential": passkey.registration(challenge: challenge)], bearer: session.accessToken)
            guard added["id"] != nil else { throw BenchError("the passkey was not added: \(added)") }
            passkeys.append(passkey)
        }
        return passkeys
    }

    /// `count` passkey sign-ins, ``concurrency`` at a time, taking `passkeys` in turn.
    func passkeySignIns(_ server: ChildServer, _ http: HTTPClient, _ passkeys: [BenchPasskey], count: Int) async throws {
        try await inParallel(count) { index in
            try await Self.passkeySignIn(server: server, http: http, passkey: passkeys[index % passkeys.count])
        }
    }

    /// One passkey sign-in: request options, then the assertion.
    static func passkeySignIn(server: ChildServer, http: HTTPClient, passkey: BenchPasskey) async throws {
        let options = try await post(http, server.url + "/v1/auth/passkey/options", [:])
        guard let challenge = options["challenge"] as? String, let challengeID = options["challengeId"] as? String else {
            throw BenchError("no passkey request options: \(options)")
        }
        let answer = try await post(
            http, server.url + "/v1/auth/passkey", ["challengeId": challengeID, "credential": try passkey.assertion(challenge: challenge)])
        guard answer["accessToken"] != nil else { throw BenchError("passkey sign-in failed: \(answer)") }
    }
}

/// POSTs a JSON object, with a bearer token when given; the answer's JSON object (empty when it is none).
func post(_ http: HTTPClient, _ url: String, _ body: [String: Any], bearer: String? = nil, headers: [(String, String)] = []) async throws -> [String: Any] {
    var request = HTTPClientRequest(url: url)
    request.method = .POST
    request.headers.add(name: "Content-Type", value: "application/json")
    if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    request.body = .bytes(ByteBuffer(bytes: Array(try JSONSerialization.data(withJSONObject: body))))
    let response = try await http.execute(request, timeout: .seconds(30))
    let bytes = try await response.body.collect(upTo: 1 << 20)
    return (try JSONSerialization.jsonObject(with: Data(Array(buffer: bytes))) as? [String: Any]) ?? [:]
}
