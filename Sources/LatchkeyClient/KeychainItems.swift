#if canImport(Security)
    // Apple-only: a translation of KeychainItemDecisions into Security calls. Every decision is in InstallItems.swift,
    // tested on Linux; AppleShellBudgetTests keeps this file free of its own.
    import Foundation
    import Security

    /// The client's per-install items (the DPoP key, App Attest's key id) as generic-password items of the service
    /// `latchkey`, one account per item and server, readable after the first unlock and never leaving the device.
    struct KeychainItems: InstallItemStore {
        static let isAvailable = true
        let issuer: String
        let accessGroup: String?

        static func store(issuer: String, accessGroup: String?) -> (any InstallItemStore)? {
            KeychainItems(issuer: issuer, accessGroup: accessGroup)
        }

        func read(_ name: String) throws -> Data? {
            var query = baseQuery(name)
            query[kSecReturnData as String] = true  // SecItemCopyMatching(_:_:) returns the item's CFData
            query[kSecMatchLimit as String] = kSecMatchLimitOne
            var result: CFTypeRef?
            let status = SecItemCopyMatching(query as CFDictionary, &result)  // SecItemCopyMatching(_:_:) -> OSStatus
            return try KeychainItemDecisions.read(status: status, data: result as? Data)
        }

        func add(_ name: String, _ data: Data) throws -> Bool {
            let attributes: [String: Any] = [
                kSecValueData as String: data, kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly,
            ]
            // SecItemAdd(_:_:) -> OSStatus: errSecDuplicateItem when the item exists
            return try KeychainItemDecisions.added(status: SecItemAdd(baseQuery(name).merging(attributes) { $1 } as CFDictionary, nil))
        }

        func replace(_ name: String, with data: Data?) throws {
            try KeychainItemDecisions.deleted(status: SecItemDelete(baseQuery(name) as CFDictionary))  // SecItemDelete(_:) -> OSStatus
            _ = try data.map { try add(name, $0) }
        }

        private func baseQuery(_ name: String) -> [String: Any] {
            var query: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword,
                kSecAttrService as String: KeychainItemDecisions.service,
                kSecAttrAccount as String: KeychainItemDecisions.account(name, issuer: issuer),
                // macOS: the iOS-style Keychain (no file-based keychain prompts); ignored on iOS.
                kSecUseDataProtectionKeychain as String: true,
            ]
            if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
            return query
        }
    }
#endif
