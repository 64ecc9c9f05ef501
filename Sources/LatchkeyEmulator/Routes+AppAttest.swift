import Foundation
import Hummingbird
import NIOCore

/// The App Attest stand-in: what `DCAppAttestService` hands an app on a device, offline, with the emulator's own root
/// CA in place of Apple App Attestation Root CA.
extension Emulator {
    func addAppAttestRoutes(to router: Router<BasicRequestContext>) {
        let appAttest = router.group("/emulator/appattest")

        appAttest.get("/root.pem") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/x-pem-file"], body: .init(byteBuffer: ByteBuffer(string: appAttestAuthority.rootPEM)))
        }

        // {appId, clientDataHash (base64url), environment?} → {keyId, attestation}, both standard base64.
        appAttest.post("/attestations") { request, _ in
            struct Body: Decodable {
                var appId: String
                var clientDataHash: String
                var environment: String?
            }
            guard let body = try await readAppAttestBody(Body.self, request) else {
                return controlError("the body is {\"appId\", \"clientDataHash\", \"environment\"?}")
            }
            guard !body.appId.isEmpty else { return controlError("appId is the app's Team ID and bundle id, e.g. TEAMID1234.com.example.app") }
            guard let environment = AppAttestEnvironment(rawValue: body.environment ?? AppAttestEnvironment.development.rawValue) else {
                return controlError("environment is development or production")
            }
            guard let clientDataHash = appAttestClientDataHash(body.clientDataHash) else { return controlError(appAttestClientDataHashRule) }
            let attestation: AppAttestAuthority.Attestation
            do {
                attestation = try appAttestAuthority.attest(
                    appID: body.appId, clientDataHash: clientDataHash, environment: environment, now: await state.now)
            } catch {
                return HTTPAnswer.json(["error": "server_error", "error_description": "could not make the attestation"], status: .internalServerError)
            }
            await state.addAppAttestKey(AppAttestKeyRecord(key: attestation.key, appID: body.appId), keyID: attestation.keyID)
            return HTTPAnswer.json(["keyId": Data(attestation.keyID).base64EncodedString(), "attestation": Data(attestation.object).base64EncodedString()])
        }

        // {keyId (standard base64, as attested), clientDataHash (base64url)} → {assertion}, standard base64.
        appAttest.post("/assertions") { request, _ in
            struct Body: Decodable {
                var keyId: String
                var clientDataHash: String
            }
            guard let body = try await readAppAttestBody(Body.self, request) else { return controlError("the body is {\"keyId\", \"clientDataHash\"}") }
            guard let keyID = Data(base64Encoded: body.keyId).map(Array.init), keyID.count == 32, Data(keyID).base64EncodedString() == body.keyId else {
                return controlError("keyId is the standard base64 of 32 bytes, as an attestation answered it")
            }
            guard let clientDataHash = appAttestClientDataHash(body.clientDataHash) else { return controlError(appAttestClientDataHashRule) }
            let record: AppAttestKeyRecord
            do throws(ControlRefusal) {
                record = try await state.nextAppAttestAssertion(keyID: keyID)
            } catch {
                return controlError(error.message, status: error.notFound ? .notFound : .badRequest)
            }
            do {
                let assertion = try AppAttestAuthority.assertion(
                    key: record.key, appID: record.appID, counter: record.counter, clientDataHash: clientDataHash)
                return HTTPAnswer.json(["assertion": Data(assertion).base64EncodedString()])
            } catch {
                return HTTPAnswer.json(["error": "server_error", "error_description": "could not sign the assertion"], status: .internalServerError)
            }
        }
    }
}

/// What `clientDataHash` must be.
private let appAttestClientDataHashRule = "clientDataHash is 1 to 64 bytes in base64url without padding"

/// A request's JSON body, or nil when it is not that JSON (a body over ``maximumBodySize`` throws, 413).
private func readAppAttestBody<Body: Decodable>(_ type: Body.Type, _ request: Request) async throws -> Body? {
    let buffer = try await request.body.collect(upTo: maximumBodySize)
    return try? JSONDecoder().decode(Body.self, from: Data(Array(buffer: buffer)))
}

/// The bytes of `text` when it is their base64url without padding (and nothing else decodes to them), 1 to 64 of them.
private func appAttestClientDataHash(_ text: String) -> [UInt8]? {
    guard let bytes = base64URLDecode(text), (1...64).contains(bytes.count), base64URL(bytes) == text else { return nil }
    return bytes
}
