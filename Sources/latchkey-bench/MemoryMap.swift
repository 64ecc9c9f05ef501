import Foundation

/// Where a process's resident memory is: `/proc/<pid>/smaps` summed by kind of mapping, in megabytes.
struct MemoryMap {
    /// What a mapping holds, as far as its path and neighbours tell.
    enum Kind: String, CaseIterable {
        /// The executable's machine code, and its data (relocated tables, Swift metadata).
        case executableCode = "executable_code", executableData = "executable_data"
        /// ICU's code and data (Foundation's internationalisation).
        case icu
        /// The Swift runtime, Foundation and Dispatch, which a static build links into the executable.
        case swiftLibraries = "swift_and_foundation_libraries"
        case otherLibraries = "other_libraries"
        /// `[heap]` and anonymous mappings: malloc's arenas, with SQLite's page caches, NIO's buffers and every cache in it.
        case heap = "heap_and_anonymous"
        /// The threads' stacks: anonymous mappings right above a guard page.
        case threadStacks = "thread_stacks"
        case other
    }

    var megabytes: [Kind: Double] = [:]
    var threads = 0

    /// Reads `/proc/<pid>/smaps`; empty when it cannot be read.
    init(pid: Int32) {
        // Read to the end: the file's size says 0, and a read sized by it stops after the first pages.
        guard let handle = FileHandle(forReadingAtPath: "/proc/\(pid)/smaps") else { return }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd(), let text = String(data: data, encoding: .utf8),
            let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        else { return }
        threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").count) ?? 0
        var previous: Mapping?
        var current: Mapping?
        func close() {
            guard let mapping = current else { return }
            megabytes[mapping.kind(executable: executable, previous: previous), default: 0] += Double(mapping.residentKiB) / 1024
            previous = mapping
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if let mapping = Mapping(header: line) {
                close()
                current = mapping
            } else if line.hasPrefix("Rss:") {
                current?.residentKiB = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
            }
        }
        close()
    }

    /// One line of smaps' headers: `start-end perms offset device inode [path]`, and its `Rss`.
    private struct Mapping {
        let start: UInt64
        let end: UInt64
        let permissions: Substring
        let path: String
        var residentKiB = 0

        init?(header line: Substring) {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5, let dash = fields[0].firstIndex(of: "-"), let start = UInt64(fields[0][..<dash], radix: 16),
                let end = UInt64(fields[0][fields[0].index(after: dash)...], radix: 16)
            else { return nil }
            (self.start, self.end, permissions) = (start, end, fields[1])
            path = fields.count > 5 ? fields[5].trimmingCharacters(in: .whitespaces) : ""
        }

        func kind(executable: String, previous: Mapping?) -> Kind {
            if path == executable { return permissions.contains("x") ? .executableCode : .executableData }
            if path == "[heap]" { return .heap }
            if path.hasPrefix("[") { return .other }
            if !path.isEmpty {
                let name = (path as NSString).lastPathComponent.lowercased()
                if name.contains("icu") { return .icu }
                if path.contains("/swift/") || name.hasPrefix("libfoundation") || name.hasPrefix("libdispatch") || name.hasPrefix("libswift") {
                    return .swiftLibraries
                }
                return .otherLibraries
            }
            // glibc reserves a thread's stack with a PROT_NONE guard page at its low end, in the same reservation.
            if let previous, previous.path.isEmpty, previous.permissions.hasPrefix("---"), previous.end == start, previous.end - previous.start <= 1 << 16,
                (1 << 20...16 << 20).contains(end - start)
            {
                return .threadStacks
            }
            return .heap
        }
    }
}
