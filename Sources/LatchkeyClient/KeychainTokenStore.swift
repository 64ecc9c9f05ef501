#if canImport(Security)
    // Apple-only: a translation of KeychainDecisions into Security calls. Every decision is in KeychainDecisions.swift,
    // tested on Linux; AppleShellBudgetTests keeps this file free of its own.
    import Foundation
    import Security

    /// A ``TokenStore`` in the Keychain, readable after the first unlock so background refreshes work
    /// (`kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly`), in the data-protection Keychain on macOS too.
    ///
    /// Pass an `accessGroup` to share the session with extensions signed with the same Keychain group.
    /// Compare-and-swap is atomic within one process; an app and an extension that may refresh at the same
    /// time share a ``FileTokenStore`` in their app-group container instead, whose lock works across processes.
    /// Errors are ``KeychainStoreError``s carrying the `OSStatus`.
    ///
    /// ```swift
    /// let store = KeychainTokenStore(service: "com.example.app.session", accessGroup: nil)
    /// ```
    public final class KeychainTokenStore: TokenStore, @unchecked Sendable {
        // @unchecked: every stored property is a constant; the Keychain item is only read and written holding `lock`.
        private let service: String
        private let accessGroup: String?
        private let lock: NSLock
        private let canary = ProtectedDataCanary.standard
        private static let account = "latchkey.session"

        /// A store in the generic-password item of `service` (and `accessGroup`, when given).
        public init(service: String, accessGroup: String?) {
            self.service = service
            self.accessGroup = accessGroup
            lock = KeychainDecisions.lock(service: service, accessGroup: accessGroup)
        }

        /// Throws ``KeychainStoreError`` while the device is locked before its first unlock, and for any other refusal.
        public func load() throws -> StoredSession? {
            try lock.withLock { try read().session }
        }

        public func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
            try lock.withLock {
                guard let write = KeychainDecisions.write(current: try read(), expected: expected, new: new) else { return false }
                return try KeychainDecisions.written(write, status: try perform(write))
            }
        }

        private func read() throws -> KeychainDecisions.Item {
            var query = baseQuery()
            query[kSecReturnData as String] = true  // SecItemCopyMatching(_:_:) returns the item's CFData
            query[kSecMatchLimit as String] = kSecMatchLimitOne
            var result: CFTypeRef?
            let status = SecItemCopyMatching(query as CFDictionary, &result)
            return try KeychainDecisions.item(status: status, data: result as? Data, canary: canary, protect: FileTokenStore.protect)
        }

        /// The Security call for `write`: SecItemAdd(_:_:), SecItemUpdate(_:_:), SecItemDelete(_:), each returning an OSStatus.
        private func perform(_ write: KeychainDecisions.Write) throws -> OSStatus {
            switch write {
            case .nothing: return errSecSuccess
            case .delete: return SecItemDelete(baseQuery() as CFDictionary)
            case .add(let session): return SecItemAdd(baseQuery().merging(try attributes(session)) { $1 } as CFDictionary, nil)
            case .update(let session): return SecItemUpdate(baseQuery() as CFDictionary, try attributes(session) as CFDictionary)
            }
        }

        private func attributes(_ session: StoredSession) throws -> [String: Any] {
            [kSecValueData as String: try session.encoded(), kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly]
        }

        private func baseQuery() -> [String: Any] {
            var query: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword,
                kSecAttrService as String: service,
                kSecAttrAccount as String: Self.account,
                // macOS: the iOS-style Keychain (no file-based keychain prompts); ignored on iOS.
                kSecUseDataProtectionKeychain as String: true,
            ]
            if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
            return query
        }
    }
#endif
