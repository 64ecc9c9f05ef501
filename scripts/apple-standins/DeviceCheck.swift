// Stand-in for DeviceCheck: exactly the App Attest symbols AppAttest+DeviceCheck.swift uses, with the Swift
// declarations Apple documents (https://developer.apple.com/documentation/devicecheck/dcappattestservice), for
// scripts/check-apple-shells.sh. Only type-checked, never linked: every body traps.
//
// The async methods are how Swift imports the completion-handler methods (`generateKeyWithCompletionHandler:`, …).
// The class is neither Sendable nor main-actor isolated here (the safe side).
public import Foundation

// https://developer.apple.com/documentation/devicecheck/dcappattestservice: `class DCAppAttestService` (NSObject).
@available(iOS 14.0, macOS 11.0, visionOS 1.0, *)
open class DCAppAttestService: NSObject {
    // `class var shared: DCAppAttestService { get }`
    open class var shared: DCAppAttestService { standIn() }
    // `var isSupported: Bool { get }`
    open var isSupported: Bool { standIn() }
    // `func generateKey() async throws -> String`
    open func generateKey() async throws -> String { standIn() }
    // `func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data`
    open func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data { standIn() }
    // `func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data`
    open func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data { standIn() }
}

@inline(never) func standIn() -> Never { fatalError("Apple stand-in: type-checking only") }
