#if canImport(DeviceCheck)
    // Apple-only: DeviceCheck's App Attest service as an AppAttestService. When to attest or assert, what a failure
    // means and how long to wait are decided in AppAttest.swift (AppAttestDecisions, AppAttestServiceError), tested on
    // Linux; AppleShellBudgetTests keeps this file free of its own decisions.
    import DeviceCheck
    import Foundation

    /// `DCAppAttestService.shared`; its `DCError`s become ``AppAttestServiceError``s by their code.
    struct DeviceCheckAppAttest: AppAttestService {
        static let platform: (any AppAttestService)? = DeviceCheckAppAttest()

        var isSupported: Bool { DCAppAttestService.shared.isSupported }  // var isSupported: Bool { get }

        func generateKey() async throws -> String {
            try await translated { try await DCAppAttestService.shared.generateKey() }  // generateKey() async throws -> String
        }

        func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
            // attestKey(_:clientDataHash:) async throws -> Data: a call to Apple's server
            try await translated { try await DCAppAttestService.shared.attestKey(keyId, clientDataHash: clientDataHash) }
        }

        func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
            // generateAssertion(_:clientDataHash:) async throws -> Data
            try await translated { try await DCAppAttestService.shared.generateAssertion(keyId, clientDataHash: clientDataHash) }
        }

        private func translated<Value>(_ call: () async throws -> Value) async throws -> Value {
            do {
                return try await call()
            } catch {
                throw AppAttestServiceError(error)  // DCError bridges to an NSError of DCErrorDomain with its code
            }
        }
    }
#endif
