import Foundation
import LatchkeyModels

/// An e-mail address as the `email` provider keys it: the local part lower-cased, the domain lower-cased in IDNA
/// (ASCII) form, so that one mailbox is one subject however it is typed.
public struct EmailAddress: Sendable, Hashable, CustomStringConvertible {
    /// `local@domain`, normalized.
    public let normalized: String

    /// Nil for text that is no address Latchkey sends to: one `@`, a local part of 1 to 64 bytes and a domain of
    /// dot-separated labels (each 1 to 63 bytes in IDNA form), 254 bytes at most in all, no spaces or control
    /// characters, and no quoted local parts.
    public init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let parts = trimmed.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, let local = parts.first, let domain = parts.last, !local.isEmpty, local.utf8.count <= 64,
            !trimmed.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.isControlCharacter }),
            !local.contains("\""), !local.hasPrefix("."), !local.hasSuffix("."), !local.contains("..")
        else { return nil }
        var labels: [String] = []
        for label in domain.lowercased().split(separator: ".", omittingEmptySubsequences: false) {
            guard !label.isEmpty else { return nil }
            let ascii: String
            if label.unicodeScalars.allSatisfy(\.isASCII) {
                ascii = String(label)
            } else {
                guard let encoded = Punycode.encode(String(label)) else { return nil }
                ascii = "xn--" + encoded
            }
            guard ascii.utf8.count <= 63, ascii.utf8.allSatisfy(Self.isLabelByte), !ascii.hasPrefix("-"), !ascii.hasSuffix("-") else { return nil }
            labels.append(ascii)
        }
        guard labels.count >= 2 else { return nil }
        let normalized = local.lowercased() + "@" + labels.joined(separator: ".")
        guard normalized.utf8.count <= 254 else { return nil }
        self.normalized = normalized
    }

    public var description: String { normalized }

    private static func isLabelByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
    }
}

/// RFC 3492's Punycode, encoding only: what IDNA makes of a non-ASCII domain label (after `xn--`).
enum Punycode {
    private static let base = 36
    private static let tMin = 1
    private static let tMax = 26
    private static let skew = 38
    private static let damp = 700
    private static let initialBias = 72
    private static let initialN = 128

    static func encode(_ label: String) -> String? {
        let input = label.unicodeScalars.map { Int($0.value) }
        var output = input.filter { $0 < 0x80 }.map { Character(Unicode.Scalar(UInt8($0))) }
        let basicCount = output.count
        var handled = basicCount
        if basicCount > 0 { output.append("-") }
        var n = initialN
        var delta = 0
        var bias = initialBias
        while handled < input.count {
            guard let next = input.filter({ $0 >= n }).min() else { return nil }
            let (product, overflow) = (next - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow else { return nil }
            delta += product
            n = next
            for code in input {
                if code < n { delta += 1 }
                if code == n {
                    var q = delta
                    var k = base
                    while true {
                        let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                        if q < t { break }
                        output.append(digit(t + (q - t) % (base - t)))
                        q = (q - t) / (base - t)
                        k += base
                    }
                    output.append(digit(q))
                    bias = adapt(delta, handled + 1, handled == basicCount)
                    delta = 0
                    handled += 1
                }
            }
            delta += 1
            n += 1
        }
        return String(output)
    }

    private static func digit(_ value: Int) -> Character {
        Character(Unicode.Scalar(UInt8(value < 26 ? value + 97 : value + 22)))
    }

    private static func adapt(_ delta: Int, _ count: Int, _ first: Bool) -> Int {
        var delta = first ? delta / damp : delta / 2
        delta += delta / count
        var k = 0
        while delta > ((base - tMin) * tMax) / 2 {
            delta /= base - tMin
            k += base
        }
        return k + (base - tMin + 1) * delta / (delta + skew)
    }
}
