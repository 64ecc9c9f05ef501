#if canImport(Darwin)
    // Apple-only: FileTokenStore's file attributes. AppleShellBudgetTests keeps this file free of decisions.
    import Foundation

    extension FileTokenStore {
        /// Protects a session file: readable after the first unlock, like the Keychain item
        /// (`FileProtectionType.completeUntilFirstUserAuthentication`, so background refreshes work), and left out of
        /// backups (`URLResourceValues.isExcludedFromBackup`: a restored session on another device is only a stale copy).
        /// Best effort: a volume without data protection keeps the file as it is (mode 0600).
        static func protect(_ url: URL) {
            try? FileManager.default.setAttributes([.protectionKey: FileProtectionType.completeUntilFirstUserAuthentication], ofItemAtPath: url.path)
            var values = URLResourceValues()
            values.isExcludedFromBackup = true
            var url = url
            try? url.setResourceValues(values)
        }
    }
#endif
