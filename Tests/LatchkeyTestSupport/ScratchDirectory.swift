import Foundation
import LatchkeyCore
import LatchkeyJOSE
import Synchronization

/// Directories for a test's files, removed when the test process exits: the SQLite files, session files (which hold
/// tokens) and configuration files that tests write would otherwise pile up in the temporary directory.
public enum ScratchDirectory {
    private static let made = Mutex<[String]>([])
    private static let removalAtExit: Void = {
        atexit { ScratchDirectory.removeAll() }
    }()

    /// A new, empty directory in the system's temporary directory, named `prefix-<UUID>`.
    public static func make(_ prefix: String) -> String {
        _ = removalAtExit
        // The suite runs every test at once: about 650 descriptors at its peak, near the usual soft limit of 1,024.
        _ = OpenFileLimit.raised
        let path = NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        made.withLock { $0.append(path) }
        return path
    }

    private static func removeAll() {
        for path in made.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
    }
}
