import CSystemRandom
import LatchkeyJOSE
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `count` bytes from the operating system's random generator (`getrandom`), the source `SystemRandomNumberGenerator`
/// and swift-crypto's `SymmetricKey(size:)` draw on. Small draws come from a pool filled by one system call: a
/// sign-in makes seven (five identifiers, a refresh token, a request id), and each was a system call of its own.
func systemRandomBytes(_ count: Int) -> [UInt8] {
    guard count <= RandomPool.largestDraw else { return RandomPool.fresh(count) }
    return RandomPool.shared.withLock { $0.draw(count) }
}

/// Bytes from `getrandom`, handed out once each and wiped from the pool as they go.
private struct RandomPool {
    static let shared = Mutex(RandomPool())
    static let capacity = 1024
    static let largestDraw = 64

    private var bytes = [UInt8](repeating: 0, count: RandomPool.capacity)
    /// Bytes before this index are used (and zero).
    private var next = RandomPool.capacity

    mutating func draw(_ count: Int) -> [UInt8] {
        if next + count > Self.capacity {
            bytes.withUnsafeMutableBytes { Self.fill($0.baseAddress, $0.count) }
            next = 0
        }
        defer { next += count }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            bytes.withUnsafeMutableBufferPointer { pool in
                for index in 0..<count {
                    buffer[index] = pool[next + index]
                    pool[next + index] = 0
                }
            }
            initialized = count
        }
    }

    static func fresh(_ count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            fill(buffer.baseAddress, count)
            initialized = count
        }
    }

    private static func fill(_ address: UnsafeMutableRawPointer?, _ count: Int) {
        // Like SystemRandomNumberGenerator: without randomness nothing safe can go on.
        guard latchkey_system_random(address, count) == 0 else { fatalError("getrandom failed with errno \(errno)") }
    }
}
