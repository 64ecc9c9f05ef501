import Foundation

/// Why `KeychainTokenStore` could not use the Keychain: the `OSStatus` and what it most likely means, so a missing
/// entitlement is not mistaken for a locked device.
public struct KeychainStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `OSStatus` that Security returned.
    public let status: Int32
    /// What the status means here.
    public let reason: String

    public var description: String { "Keychain OSStatus \(status): \(reason)" }
}

/// The `KeychainTokenStore` decisions, kept out of the Apple-only shell so they are tested everywhere: what a read
/// means, which write a compare-and-swap needs, whether a write's status means it lost a race.
enum KeychainDecisions {
    // Security's OSStatus values (SecBase.h).
    static let success: Int32 = 0
    static let itemNotFound: Int32 = -25300
    static let duplicateItem: Int32 = -25299
    static let interactionNotAllowed: Int32 = -25308
    static let missingEntitlement: Int32 = -34018

    /// The session item as read.
    enum Item: Equatable {
        case none
        case session(StoredSession)
        /// An item that does not decode (written by a later version, or damaged). It can never become a session: it
        /// reads as none, and the next sign-in replaces it (or the next sign-out deletes it).
        case damaged

        var session: StoredSession? {
            if case .session(let session) = self { return session }
            return nil
        }
    }

    /// The item a `SecItemCopyMatching` read found.
    ///
    /// - Parameter protectedDataAvailable: whether protected data is readable now (nil: unknown). While the app is
    ///   prewarmed before the first unlock, iOS can answer `errSecItemNotFound` for an item that exists; that answer is
    ///   trusted only when protected data is known to be readable or not known to be unreadable.
    static func item(status: Int32, data: Data?, protectedDataAvailable: Bool?) throws(KeychainStoreError) -> Item {
        switch status {
        case success:
            guard let data, let session = try? StoredSession.decoded(from: data) else { return .damaged }
            return .session(session)
        case itemNotFound:
            if protectedDataAvailable == false {
                throw KeychainStoreError(status: status, reason: "not found while protected data is unavailable (before the first unlock); read again later")
            }
            return .none
        default:
            throw error(status)
        }
    }

    /// ``item(status:data:protectedDataAvailable:)`` judged with `canary`, which a successful read marks (its file
    /// protected by `protect`): from then on, a "not found" while protected data is unreadable is not believed.
    static func item(status: Int32, data: Data?, canary: ProtectedDataCanary?, protect: (URL) -> Void) throws(KeychainStoreError) -> Item {
        // Only a "not found" needs the canary read: every other answer means the same whatever it says.
        let item = try item(status: status, data: data, protectedDataAvailable: status == itemNotFound ? canary?.isAvailable() : nil)
        if status == success { canary?.markAvailable(protect: protect) }
        return item
    }

    /// What a compare-and-swap writes, or nil when the item is not `expected` (nothing is written).
    enum Write: Equatable {
        case nothing
        case add(StoredSession)
        case update(StoredSession)
        case delete
    }

    static func write(current: Item, expected: StoredSession?, new: StoredSession?) -> Write? {
        guard current.session == expected else { return nil }
        switch (current, new) {
        case (.none, nil): return .nothing
        case (_, nil): return .delete
        case (.none, let new?): return .add(new)
        case (_, let new?): return .update(new)
        }
    }

    /// Whether the write happened (false: another process changed the item between the read and the write, so the
    /// compare-and-swap failed), or the error.
    static func written(_ write: Write, status: Int32) throws(KeychainStoreError) -> Bool {
        switch (write, status) {
        case (_, success): return true
        case (.delete, itemNotFound): return true
        case (.add, duplicateItem), (.update, itemNotFound): return false
        default: throw error(status)
        }
    }

    static func error(_ status: Int32) -> KeychainStoreError {
        let reason =
            switch status {
            case interactionNotAllowed: "the device is locked (before its first unlock); the session is kept and read again later"
            case missingEntitlement: "missing entitlement: the app is not signed with the keychain-access-groups entitlement it asks for"
            case duplicateItem: "the item exists already"
            default: "the Keychain refused the operation"
            }
        return KeychainStoreError(status: status, reason: reason)
    }

    /// One lock per Keychain item in the process: two stores of the same item must not interleave their
    /// read-compare-write.
    static func lock(service: String, accessGroup: String?) -> NSLock {
        locks.withLock {
            let key = "\(service)\u{0}\(accessGroup ?? "")"
            if let lock = byItem[key] { return lock }
            let lock = NSLock()
            byItem[key] = lock
            return lock
        }
    }

    private static let locks = NSLock()
    // Only read and written while holding `locks`.
    nonisolated(unsafe) private static var byItem: [String: NSLock] = [:]
}

/// Whether protected data (files and Keychain items readable after the first unlock) can be read now, learnt from a
/// small file written with that protection class: readable means yes, refused means no, absent means unknown.
struct ProtectedDataCanary: Sendable {
    let url: URL

    /// In the app's Application Support folder.
    static var standard: ProtectedDataCanary? {
        FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first.map {
            ProtectedDataCanary(url: $0.appendingPathComponent("latchkey-protected-data-canary"))
        }
    }

    /// True, false, or nil when the canary has not been written yet (or cannot be judged).
    func isAvailable() -> Bool? {
        do {
            _ = try Data(contentsOf: url)
            return true
        } catch {
            return Self.availability(afterReadError: error as NSError)
        }
    }

    static func availability(afterReadError error: NSError) -> Bool? {
        let underlying = (error.userInfo[NSUnderlyingErrorKey] as? NSError) ?? error
        if underlying.domain == NSPOSIXErrorDomain, underlying.code == Int(EPERM) || underlying.code == Int(EACCES) { return false }
        if error.domain == NSCocoaErrorDomain, error.code == CocoaError.fileReadNoPermission.rawValue { return false }
        return nil
    }

    /// Writes the canary (when missing) once protected data is known to be readable; `protect` sets its protection class.
    func markAvailable(protect: (URL) -> Void) {
        guard !FileManager.default.fileExists(atPath: url.path) else { return }
        try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        guard (try? Data("latchkey".utf8).write(to: url, options: .atomic)) != nil else { return }
        protect(url)
    }
}
