public import Foundation
import LatchkeyModels

/// Apple's App Attest as the client uses it: `DCAppAttestService` on Apple platforms (``AppAttest/enabled``), a fake in
/// tests. Errors are best thrown as ``AppAttestServiceError``; DeviceCheck's own `DCError`s are understood too.
public protocol AppAttestService: Sendable {
    /// Whether this device can attest keys (`DCAppAttestService.isSupported`).
    var isSupported: Bool { get }
    /// A new App Attest key's identifier (`generateKey()`), standard base64.
    func generateKey() async throws -> String
    /// Apple's attestation of the key `keyId` over `clientDataHash` (`attestKey(_:clientDataHash:)`); a call to Apple.
    func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data
    /// An assertion by the key `keyId` over `clientDataHash` (`generateAssertion(_:clientDataHash:)`).
    func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data
}

/// Why an ``AppAttestService`` call failed, by DeviceCheck's `DCError.Code`.
public struct AppAttestServiceError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Int, Sendable {
        case unknownSystemFailure = 0
        case featureUnsupported = 1
        case invalidInput = 2
        case invalidKey = 3
        case serverUnavailable = 4
    }

    private let code: Code

    /// A failure without a better description (`DCError.unknownSystemFailure`), and any error that is not a `DCError`.
    public static let unknownSystemFailure = Self(code: .unknownSystemFailure)
    /// App Attest is not available here (`DCError.featureUnsupported`).
    public static let featureUnsupported = Self(code: .featureUnsupported)
    /// The service was given something it does not take (`DCError.invalidInput`).
    public static let invalidInput = Self(code: .invalidInput)
    /// The key cannot be used: unknown, or deleted with the app (`DCError.invalidKey`).
    public static let invalidKey = Self(code: .invalidKey)
    /// Apple's server could not be reached, or throttles this app (`DCError.serverUnavailable`): try later, same key.
    public static let serverUnavailable = Self(code: .serverUnavailable)

    /// The error `error` stands for: itself when it is one, a `DCError` (domain `com.apple.devicecheck.error`) by its
    /// code, anything else ``unknownSystemFailure``.
    public init(_ error: any Error) {
        if let error = error as? AppAttestServiceError {
            self = error
            return
        }
        let bridged = error as NSError
        code = bridged.domain == "com.apple.devicecheck.error" ? Code(rawValue: bridged.code) ?? .unknownSystemFailure : .unknownSystemFailure
    }

    private init(code: Code) { self.code = code }

    public var description: String { "App Attest: DCError \(code.rawValue) (\(code))" }
}

/// Whether a ``LatchkeyClient`` proves, at sign-in, that it is the app itself on a genuine Apple device (App Attest).
///
/// With ``enabled``, the install's first sign-in makes an App Attest key (once per install), has Apple attest it over a
/// challenge of the server's (`POST /v1/attest/challenge`) and sends the attestation in the sign-in's `appAttest`;
/// later sign-ins send an assertion by that key. Where App Attest is unsupported the client signs in without it; while
/// Apple's service is unavailable or throttles (`DCError.serverUnavailable`) it signs in without it too, and waits
/// longer after each such failure (from a minute up to a day) before it tries again. When the server refuses the
/// attestation or an assertion (`invalid_attestation`), the sign-in fails and the next one attests a new key.
///
/// The client data is tied to the DPoP key of ``DeviceBinding/dpop``, when there is one (`AppAttestClientData.hash(challenge:dpopThumbprint:)` of LatchkeyModels).
/// The app needs the App Attest capability (the `com.apple.developer.devicecheck.appattest-environment` entitlement).
public struct AppAttest: Sendable {
    let service: (any AppAttestService)?

    /// No App Attest (the default).
    public static let disabled = AppAttest(service: nil)

    /// App Attest through DeviceCheck's `DCAppAttestService.shared`; nothing where DeviceCheck is missing (Linux).
    public static var enabled: AppAttest { AppAttest(service: DeviceCheckAppAttest.platform) }

    /// App Attest through `service`.
    public static func enabled(service: any AppAttestService) -> AppAttest { AppAttest(service: service) }
}

/// What the client remembers of App Attest for one install and server.
struct AppAttestState: Codable, Sendable, Equatable {
    /// The install's App Attest key.
    var keyID: String?
    /// Whether the server accepted a sign-in with the key's attestation: later sign-ins assert.
    var attested = false
    /// Service failures in a row, and until when no call is made.
    var failures = 0
    var retryAfter: Date?
}

/// How long App Attest waits after failures: `base * 2^(failures - 1)`, at most `maximum`.
struct AppAttestPolicy: Sendable {
    var backoffBase: TimeInterval = 60
    var backoffMaximum: TimeInterval = 86_400
}

/// App Attest's decisions, free of I/O: what to do before a sign-in, and what a failure or the server's answer changes.
enum AppAttestDecisions {
    enum Step: Equatable {
        case skip
        case generateKey
        case attest(keyID: String)
        case assert(keyID: String)
    }

    static func step(_ state: AppAttestState, isSupported: Bool, now: Date) -> Step {
        guard isSupported else { return .skip }
        if let retryAfter = state.retryAfter, now < retryAfter { return .skip }
        guard let keyID = state.keyID else { return .generateKey }
        return state.attested ? .assert(keyID: keyID) : .attest(keyID: keyID)
    }

    static func keyGenerated(_ state: AppAttestState, keyID: String) -> AppAttestState {
        var state = state
        state.keyID = keyID
        state.attested = false
        return state
    }

    /// After a service call failed with `error`. Apple: after `serverUnavailable` try again later with the same key;
    /// after any other error, make a new key. Either way the next try waits, longer after each failure in a row.
    static func failed(_ state: AppAttestState, _ error: AppAttestServiceError, now: Date, policy: AppAttestPolicy) -> AppAttestState {
        var state = state
        if error != .serverUnavailable {
            state.keyID = nil
            state.attested = false
        }
        state.failures += 1
        let delay = min(policy.backoffMaximum, policy.backoffBase * pow(2, Double(min(state.failures - 1, 30))))
        state.retryAfter = now.addingTimeInterval(delay)
        return state
    }

    /// After the server answered `status` (with `error`, for a refusal) to a sign-in carrying `evidence`: an accepted
    /// attestation makes later sign-ins assert; `invalid_attestation` forgets the key, so the next sign-in attests a
    /// new one. Any other answer changes nothing (an attestation not accepted yet is made again next time).
    static func answered(_ state: AppAttestState, evidence: AppAttestEvidence, status: Int, error: String?) -> AppAttestState {
        var state = state
        guard state.keyID == evidence.keyId else { return state }
        if (200..<300).contains(status) {
            state.failures = 0
            state.retryAfter = nil
            if evidence.attestation != nil { state.attested = true }
        } else if status == 401, error == "invalid_attestation" {
            state.keyID = nil
            state.attested = false
        }
        return state
    }
}

/// Attests or asserts before each sign-in, one sign-in at a time, and keeps the install's state in `items`.
actor AppAttestor {
    static let itemName = "app-attest"

    let service: any AppAttestService
    let items: any InstallItemStore
    let clock: any LatchkeyClock
    let policy: AppAttestPolicy
    /// The sign-in before this one; each waits for the previous, so two never make a key each.
    private var previous: Task<Void, Never>?

    init(service: any AppAttestService, items: any InstallItemStore, clock: any LatchkeyClock, policy: AppAttestPolicy = AppAttestPolicy()) {
        self.service = service
        self.items = items
        self.clock = clock
        self.policy = policy
    }

    /// The `appAttest` member of a sign-in, or nil when this one goes without (unsupported, backing off, no challenge,
    /// a failure, which is remembered, or a store that cannot be read now).
    func evidence(dpopThumbprint: String?, challenge: @escaping @Sendable () async throws -> String) async -> AppAttestEvidence? {
        let before = previous
        let task = Task { () -> AppAttestEvidence? in
            await before?.value
            return await self.makeEvidence(dpopThumbprint: dpopThumbprint, challenge: challenge)
        }
        previous = Task { _ = await task.value }
        return await task.value
    }

    /// Records the server's answer to a sign-in that carried `evidence`.
    func answered(_ evidence: AppAttestEvidence, status: Int, error: String?) {
        guard let state = try? load() else { return }
        save(AppAttestDecisions.answered(state, evidence: evidence, status: status, error: error))
    }

    private func makeEvidence(dpopThumbprint: String?, challenge: @Sendable () async throws -> String) async -> AppAttestEvidence? {
        guard var state = try? load() else { return nil }
        let step = AppAttestDecisions.step(state, isSupported: service.isSupported, now: clock.now)
        let keyID: String
        switch step {
        case .skip:
            return nil
        case .generateKey:
            do {
                keyID = try await service.generateKey()
            } catch {
                save(AppAttestDecisions.failed(state, AppAttestServiceError(error), now: clock.now, policy: policy))
                return nil
            }
            state = AppAttestDecisions.keyGenerated(state, keyID: keyID)
            save(state)
        case .attest(let key), .assert(let key):
            keyID = key
        }
        guard let challenge = try? await challenge() else { return nil }
        let hash = AppAttestClientData.hash(challenge: challenge, dpopThumbprint: dpopThumbprint)
        do {
            if case .assert = step {
                let assertion = try await service.generateAssertion(keyID, clientDataHash: hash)
                return AppAttestEvidence(keyId: keyID, assertion: assertion.base64EncodedString(), challenge: challenge)
            }
            let attestation = try await service.attestKey(keyID, clientDataHash: hash)
            return AppAttestEvidence(keyId: keyID, attestation: attestation.base64EncodedString(), challenge: challenge)
        } catch {
            save(AppAttestDecisions.failed(state, AppAttestServiceError(error), now: clock.now, policy: policy))
            return nil
        }
    }

    /// The remembered state (a new one when there is none, or it does not decode); throws when the store cannot be read.
    func load() throws -> AppAttestState {
        guard let data = try items.read(Self.itemName) else { return AppAttestState() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return (try? decoder.decode(AppAttestState.self, from: data)) ?? AppAttestState()
    }

    /// Best effort: a state that cannot be saved now is decided again at the next sign-in.
    private func save(_ state: AppAttestState) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        guard let data = try? encoder.encode(state) else { return }
        try? items.replace(Self.itemName, with: data)
    }
}

#if !canImport(DeviceCheck)
    /// No DeviceCheck here.
    enum DeviceCheckAppAttest {
        static let platform: (any AppAttestService)? = nil
    }
#endif
