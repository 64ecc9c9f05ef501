#if canImport(CryptoKit) && canImport(Security)
    // Apple-only: Secure Enclave keys through CryptoKit. Which key a client uses, and how it is kept and restored, is
    // decided in DeviceKey.swift (DeviceKeyPlan, DeviceKeyFactory), tested on Linux; AppleShellBudgetTests keeps this
    // file free of its own decisions.
    import CryptoKit
    import Foundation
    import Security

    /// P-256 keys made in the Secure Enclave, usable after the first unlock (so background refreshes sign), this device only.
    enum SecureEnclaveKeys {
        static var isAvailable: Bool { SecureEnclave.isAvailable }  // SecureEnclave.isAvailable: false in the Simulator

        static let factory: DeviceKeyFactory? = DeviceKeyFactory(itemName: "dpop-key.secure-enclave", make: make, restore: restore)

        static func make() throws -> (any DeviceKey, Data) {
            // SecAccessControlCreateWithFlags(_:_:_:_:) -> SecAccessControl?: the key may sign once the device has been unlocked
            let access = SecAccessControlCreateWithFlags(nil, kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly, .privateKeyUsage, nil)
            guard let access else { throw LatchkeyClientError.storageUnavailable("the Secure Enclave key's access control could not be made") }
            // SecureEnclave.P256.Signing.PrivateKey.init(compactRepresentable:accessControl:authenticationContext:) throws
            let key = try SecureEnclave.P256.Signing.PrivateKey(accessControl: access)
            return (SecureEnclaveDeviceKey(key: key), key.dataRepresentation)  // var dataRepresentation: Data
        }

        static func restore(_ data: Data) throws -> any DeviceKey {
            // init(dataRepresentation:authenticationContext:) throws: fails for another device's key
            SecureEnclaveDeviceKey(key: try SecureEnclave.P256.Signing.PrivateKey(dataRepresentation: data))
        }
    }

    /// A Secure Enclave key as a ``DeviceKey``.
    struct SecureEnclaveDeviceKey: DeviceKey, @unchecked Sendable {
        // @unchecked: `key` is a constant handle to a key the Secure Enclave holds; signing does not mutate it.
        let key: SecureEnclave.P256.Signing.PrivateKey

        var publicKey: Data { key.publicKey.rawRepresentation }  // P256.Signing.PublicKey.rawRepresentation: x ‖ y
        // signature(for:) throws -> P256.Signing.ECDSASignature; rawRepresentation: r ‖ s
        func sign(_ bytes: Data) throws -> Data { try key.signature(for: bytes).rawRepresentation }
    }
#endif
