import Foundation
import Hummingbird
import LatchkeyCore
import LatchkeyJOSE
import LatchkeyModels
import Logging

/// App Attest at sign-in: `POST /v1/attest/challenge`, and the `appAttest` member of native sign-ins, verified as
/// `appAttest.mode` says.
extension LatchkeyServer {
    func addAppAttestRoutes(to router: Router<LatchkeyRequestContext>) {
        router.post("/v1/attest/challenge") { _, _ in
            guard let appAttestation else {
                throw APIError(status: .notFound, code: "not_found", description: "App Attest is off on this server (appAttest.mode)")
            }
            let (challenge, expiresIn) = appAttestation.challenge()
            return JSONBody.response(AttestChallengeResponse(challenge: challenge, expiresIn: expiresIn), headers: [.cacheControl: "no-store"])
        }
    }

    private struct AttestChallengeResponse: Encodable {
        let challenge: String
        let expiresIn: Int
    }

    /// The `appAttest` member of a sign-in body; the rest is the sign-in's own.
    private struct AppAttestMember: Decodable {
        var appAttest: AppAttestEvidence?
    }

    /// Runs a native sign-in under App Attest: its body's `appAttest` is verified (`report` counts, `require` also
    /// refuses), its session marked attested when it passed, and the install's key given the signed-in user.
    func attesting(_ body: [UInt8], _ signIn: () async throws -> SignInService.SignInOutcome) async throws -> SignInService.SignInOutcome {
        // Every sign-in body was read as JSON before this; a malformed member is refused whether App Attest is on or not.
        let evidence: AppAttestEvidence?
        do {
            evidence = body.isEmpty ? nil : try LeanJSONDecoder().decode(AppAttestMember.self, from: body).appAttest
        } catch {
            throw APIError.invalidRequest("appAttest is not {keyId, attestation or assertion, challenge} (strings)")
        }
        guard let appAttestation else { return try await signIn() }
        let requires = appAttestation.policy.mode == .require
        var verified: AppAttestation.Outcome?
        if let evidence {
            do {
                verified = try await appAttestation.verify(evidence, dpopThumbprint: SessionBinding.current.dpopThumbprint)
                metrics.appAttest(outcome: verified?.attested == true ? "attestation" : "assertion")
            } catch let error as LatchkeyError where error.code == .invalidAttestation {
                metrics.appAttest(outcome: "invalid")
                if requires { throw error }
                logger.info("App Attest refused (appAttest.mode report: the sign-in goes on)", metadata: ["reason": "\(error.reason)"])
            }
        } else {
            metrics.appAttest(outcome: "missing")
            if requires {
                throw LatchkeyError(
                    .invalidAttestation, "this server requires App Attest: send appAttest {keyId, attestation or assertion, challenge} with the sign-in")
            }
        }
        var binding = SessionBinding.current
        binding.attested = verified != nil
        let outcome = try await SessionBinding.$current.withValue(binding) { try await signIn() }
        if let verified { try await store.assignAppAttestKey(keyID: verified.keyID, userID: outcome.user.id) }
        return outcome
    }
}
