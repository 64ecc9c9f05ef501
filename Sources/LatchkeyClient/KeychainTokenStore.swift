#if canImport(Security)
    public import Foundation
    import Security

    /// A ``TokenStore`` in the Keychain, readable after the first unlock so background refreshes work
    /// (`kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly`).
    ///
    /// Pass an `accessGroup` to share the session with extensions signed with the same Keychain group.
    /// Compare-and-swap is atomic within one process; an app and an extension that may refresh at the same
    /// time share a ``FileTokenStore`` in their app-group container instead, whose lock works across processes.
    ///
    /// ```swift
    /// let store = KeychainTokenStore(service: "com.example.app.session", accessGroup: nil)
    /// ```
    public final class KeychainTokenStore: TokenStore, @unchecked Sendable {
        // @unchecked: the only mutable state is the Keychain itself, and every read-compare-write holds `lock`.
        private let service: String
        private let accessGroup: String?
        private let lock = NSLock()
        private static let account = "latchkey.session"

        /// A store in the generic-password item of `service` (and `accessGroup`, when given).
        public init(service: String, accessGroup: String?) {
            self.service = service
            self.accessGroup = accessGroup
        }

        /// Throws while the device is locked before its first unlock (`errSecInteractionNotAllowed`).
        public func load() throws -> StoredSession? {
            try lock.withLock { try read() }
        }

        public func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
            try lock.withLock {
                let current = try read()
                guard current == expected else { return false }
                switch (current, new) {
                case (nil, nil):
                    return true
                case (_?, nil):
                    try check(SecItemDelete(baseQuery() as CFDictionary), allowing: errSecItemNotFound)
                case (nil, let new?):
                    var item = baseQuery()
                    item[kSecValueData as String] = try new.encoded()
                    item[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
                    try check(SecItemAdd(item as CFDictionary, nil))
                case (_?, let new?):
                    let changes: [String: Any] = [
                        kSecValueData as String: try new.encoded(),
                        kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly,
                    ]
                    try check(SecItemUpdate(baseQuery() as CFDictionary, changes as CFDictionary))
                }
                return true
            }
        }

        private func read() throws -> StoredSession? {
            var query = baseQuery()
            query[kSecReturnData as String] = true
            query[kSecMatchLimit as String] = kSecMatchLimitOne
            var result: CFTypeRef?
            let status = SecItemCopyMatching(query as CFDictionary, &result)
            if status == errSecItemNotFound { return nil }
            try check(status)
            guard let data = result as? Data else { throw NSError(domain: NSOSStatusErrorDomain, code: Int(errSecDecode)) }
            return try StoredSession.decoded(from: data)
        }

        private func baseQuery() -> [String: Any] {
            var query: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword,
                kSecAttrService as String: service,
                kSecAttrAccount as String: Self.account,
            ]
            if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
            return query
        }

        private func check(_ status: OSStatus, allowing allowed: OSStatus = errSecSuccess) throws {
            guard status == errSecSuccess || status == allowed else { throw NSError(domain: NSOSStatusErrorDomain, code: Int(status)) }
        }

    }
#endif
