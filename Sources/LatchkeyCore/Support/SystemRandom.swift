import CSystemRandom

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `count` bytes from the operating system's random generator (`getrandom`), the source `SystemRandomNumberGenerator`
/// and swift-crypto's `SymmetricKey(size:)` draw on, in one system call: those take one per 8 bytes, about twenty
/// for a sign-in.
func systemRandomBytes(_ count: Int) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        // Like SystemRandomNumberGenerator: without randomness nothing safe can go on.
        guard latchkey_system_random(buffer.baseAddress, count) == 0 else { fatalError("getrandom failed with errno \(errno)") }
        initialized = count
    }
}
