import Crypto

/// A key the App Attest stand-in attested, and the counter of its assertions.
struct AppAttestKeyRecord: Sendable {
    let key: P256.Signing.PrivateKey
    let appID: String
    /// The counter of the last assertion (0 after the attestation).
    var counter: UInt32 = 0
}

extension EmulatorState {
    /// Keeps an attested key for its assertions.
    func addAppAttestKey(_ record: AppAttestKeyRecord, keyID: [UInt8]) { appAttestKeys[keyID] = record }

    /// The key and app of `keyID`, with the next counter of its assertions (1 for the first), counted now.
    func nextAppAttestAssertion(keyID: [UInt8]) throws(ControlRefusal) -> AppAttestKeyRecord {
        guard var record = appAttestKeys[keyID] else { throw ControlRefusal("no App Attest key with this keyId", notFound: true) }
        guard record.counter < .max else { throw ControlRefusal("this key's assertion counter is spent") }
        record.counter += 1
        appAttestKeys[keyID] = record
        return record
    }
}
