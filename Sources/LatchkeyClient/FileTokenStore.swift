public import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A ``TokenStore`` in one JSON file, readable only by its owner (mode 0600). On Apple platforms the file is
/// readable after the first unlock (`completeUntilFirstUserAuthentication`) and left out of backups.
///
/// Writes replace the file atomically (a temporary file renamed over it), and each compare-and-swap holds an
/// exclusive `flock` on a `.lock` file beside it, so an app and its extensions can share one file in an
/// app-group container without ever both spending the same refresh token.
///
/// ```swift
/// let store = FileTokenStore(url: container.appendingPathComponent("session.json"))
/// ```
public struct FileTokenStore: TokenStore {
    /// The session file.
    public let url: URL

    /// A store at `url`; the file is created on the first sign-in.
    public init(url: URL) {
        self.url = url
    }

    /// A file that cannot be read throws: it is reported, never taken as "signed out". A file that is read but does not
    /// decode (damaged, or written by a later version) can never become a session: like a damaged Keychain item, it reads
    /// as none, the next sign-in replaces it and the next sign-out deletes it.
    public func load() throws -> StoredSession? {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch CocoaError.fileReadNoSuchFile {
            return nil
        } catch  where (error as NSError).domain == NSPOSIXErrorDomain && (error as NSError).code == Int(ENOENT) {
            return nil
        }
        return try? StoredSession.decoded(from: data)
    }

    public func compareAndSwap(expected: StoredSession?, new: StoredSession?) throws -> Bool {
        let lock = open(url.path + ".lock", O_RDWR | O_CREAT, 0o600)
        guard lock >= 0 else { throw Self.posixError("open lock file") }
        defer { close(lock) }
        guard flock(lock, LOCK_EX) == 0 else { throw Self.posixError("flock") }
        defer { flock(lock, LOCK_UN) }
        guard try load() == expected else { return false }
        guard let new else {
            guard unlink(url.path) == 0 || errno == ENOENT else { throw Self.posixError("unlink") }
            return true
        }
        try replaceFile(with: new.encoded())
        return true
    }

    /// Writes a temporary file with mode 0600, flushes it, then renames it over the session file.
    private func replaceFile(with data: Data) throws {
        let temporary = url.path + ".tmp-\(UUID().uuidString)"
        try Self.writeFlushed(data, to: temporary, creating: "temporary file", writing: "session file")
        guard rename(temporary, url.path) == 0 else {
            let error = Self.posixError("write session file")
            unlink(temporary)
            throw error
        }
        // After the rename: the attributes belong to the file that now has the name.
        Self.protect(url)
    }

    /// Writes `data` to a new file at `path` (mode 0600, created exclusively) and flushes it to storage; a failed write
    /// removes the file. `creating` and `writing` name the file in the errors.
    static func writeFlushed(_ data: Data, to path: String, creating: String, writing: String) throws {
        let file = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard file >= 0 else { throw posixError("create \(creating)") }
        var written = 0
        let ok = data.withUnsafeBytes { bytes -> Bool in
            while written < bytes.count {
                let count = write(file, bytes.baseAddress! + written, bytes.count - written)
                guard count > 0 else { return false }
                written += count
            }
            return fsync(file) == 0
        }
        close(file)
        guard ok else {
            let error = posixError("write \(writing)")
            unlink(path)
            throw error
        }
    }

    static func posixError(_ operation: String) -> any Error {
        NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "\(operation) failed"])
    }

}

#if !canImport(Darwin)
    extension FileTokenStore {
        /// No file protection classes or backups to opt out of here.
        static func protect(_ url: URL) {}
    }
#endif
