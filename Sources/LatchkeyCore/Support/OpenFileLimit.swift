import LatchkeyJOSE

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's limit on open files. Every connection is one: a server under the usual soft limit of 1,024 (Linux,
/// and systemd's default) refuses connections well before its hard limit, which is usually far higher.
public enum OpenFileLimit {
    /// Raises the soft limit to the hard limit (at most 65,536), once per process; later calls do nothing.
    public static let raised: Void = {
        #if canImport(Glibc)
            let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
            let resource = RLIMIT_NOFILE
        #endif
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return }
        let wanted = min(limit.rlim_max, 65_536)
        guard limit.rlim_cur < wanted else { return }
        limit.rlim_cur = wanted
        _ = setrlimit(resource, &limit)
    }()
}
