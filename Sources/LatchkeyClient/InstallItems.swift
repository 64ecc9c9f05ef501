import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A few small items the client keeps for this install beside the session: the DPoP device key and App Attest's key id.
protocol InstallItemStore: Sendable {
    /// The item `name`, or nil when there is none; throws when the store cannot be read now.
    func read(_ name: String) throws -> Data?
    /// Adds `data` as `name` unless an item has that name; false when one has (another process added it first).
    func add(_ name: String, _ data: Data) throws -> Bool
    /// Replaces the item `name` (nil deletes it).
    func replace(_ name: String, with data: Data?) throws
}

/// Items in memory: nothing survives the process.
final class MemoryInstallItems: InstallItemStore, @unchecked Sendable {
    // @unchecked: `items` is only read and written while holding `lock`.
    private let lock = NSLock()
    private var items: [String: Data] = [:]

    func read(_ name: String) throws -> Data? { lock.withLock { items[name] } }

    func add(_ name: String, _ data: Data) throws -> Bool {
        lock.withLock {
            guard items[name] == nil else { return false }
            items[name] = data
            return true
        }
    }

    func replace(_ name: String, with data: Data?) throws { lock.withLock { items[name] = data } }
}

/// Items as files beside a ``FileTokenStore``'s file (`session.json.dpop-key`, …), each readable only by its owner
/// (mode 0600), written whole: a temporary file linked (add) or renamed (replace) into place.
struct FileInstallItems: InstallItemStore {
    let sessionFile: URL

    func path(_ name: String) -> String { sessionFile.path + "." + name }

    func read(_ name: String) throws -> Data? {
        do {
            return try Data(contentsOf: URL(fileURLWithPath: path(name)))
        } catch CocoaError.fileReadNoSuchFile {
            return nil
        } catch  where (error as NSError).domain == NSPOSIXErrorDomain && (error as NSError).code == Int(ENOENT) {
            return nil
        }
    }

    func add(_ name: String, _ data: Data) throws -> Bool {
        let temporary = try writeTemporary(data, for: name)
        defer { unlink(temporary) }
        // link(2) fails with EEXIST when the name is taken: the add is atomic across processes.
        guard link(temporary, path(name)) == 0 else {
            if errno == EEXIST { return false }
            throw FileTokenStore.posixError("link \(name)")
        }
        FileTokenStore.protect(URL(fileURLWithPath: path(name)))
        return true
    }

    func replace(_ name: String, with data: Data?) throws {
        guard let data else {
            guard unlink(path(name)) == 0 || errno == ENOENT else { throw FileTokenStore.posixError("unlink \(name)") }
            return
        }
        let temporary = try writeTemporary(data, for: name)
        guard rename(temporary, path(name)) == 0 else {
            let error = FileTokenStore.posixError("rename \(name)")
            unlink(temporary)
            throw error
        }
        FileTokenStore.protect(URL(fileURLWithPath: path(name)))
    }

    private func writeTemporary(_ data: Data, for name: String) throws -> String {
        let temporary = path(name) + ".tmp-\(UUID().uuidString)"
        try FileTokenStore.writeFlushed(data, to: temporary, creating: name, writing: name)
        return temporary
    }
}

/// The decisions of the Keychain's item store (`KeychainItems`, Apple-only): what a status means.
enum KeychainItemDecisions {
    /// The Keychain service of every item the client keeps per install; the account names the item and the server.
    static let service = "latchkey"

    static func account(_ name: String, issuer: String) -> String { name + " " + issuer }

    /// What a `SecItemCopyMatching` read found: the data, nil when there is no such item, or the error.
    static func read(status: Int32, data: Data?) throws(KeychainStoreError) -> Data? {
        switch status {
        case KeychainDecisions.success: return data ?? Data()
        case KeychainDecisions.itemNotFound: return nil
        default: throw KeychainDecisions.error(status)
        }
    }

    /// Whether a `SecItemAdd` added the item (false: it exists already).
    static func added(status: Int32) throws(KeychainStoreError) -> Bool {
        switch status {
        case KeychainDecisions.success: return true
        case KeychainDecisions.duplicateItem: return false
        default: throw KeychainDecisions.error(status)
        }
    }

    /// What a replace does after its delete answered `status`: whether it goes on (adds the new data), or the error.
    static func deleted(status: Int32) throws(KeychainStoreError) {
        guard status == KeychainDecisions.success || status == KeychainDecisions.itemNotFound else { throw KeychainDecisions.error(status) }
    }
}

#if !canImport(Security)
    /// No Keychain here.
    enum KeychainItems {
        static let isAvailable = false
        static func store(issuer: String, accessGroup: String?) -> (any InstallItemStore)? { nil }
    }
#endif
