import Crypto
import Foundation
import LatchkeyTestSupport
import Testing
import _CryptoExtras

@testable import LatchkeyCore
@testable import LatchkeyJOSE
@testable import LatchkeyWebAuthn

@Suite("CBOR and COSE keys: the strict reader of passkey data")
struct CBORTests {
    @Test(
        "RFC 8949 Appendix A examples in the subset decode as the RFC says",
        arguments: [
            ("00", CBORValue.unsigned(0)), ("17", .unsigned(23)), ("1818", .unsigned(24)), ("1903e8", .unsigned(1000)),
            ("1b000000e8d4a51000", .unsigned(1_000_000_000_000)), ("1bffffffffffffffff", .unsigned(UInt64.max)), ("20", .negative(0)),
            ("3863", .negative(99)), ("40", .bytes([])), ("4401020304", .bytes([1, 2, 3, 4])), ("60", .text("")), ("6161", .text("a")),
            ("62c3bc", .text("ü")), ("64f0908591", .text("𐅑")), ("80", .array([])), ("83010203", .array([.unsigned(1), .unsigned(2), .unsigned(3)])),
            ("a0", .map([])), ("a201020304", .map([CBORMapEntry(.unsigned(1), .unsigned(2)), CBORMapEntry(.unsigned(3), .unsigned(4))])),
            ("a26161016162820203", .map([CBORMapEntry(.text("a"), .unsigned(1)), CBORMapEntry(.text("b"), .array([.unsigned(2), .unsigned(3)]))])),
            ("f4", .bool(false)), ("f5", .bool(true)), ("f6", .null),
        ])
    func appendixA(hex: String, expected: CBORValue) throws {
        #expect(try CBORReader.value(hexBytes(hex)) == expected)
        #expect(TestCBOR.encode(expected) == hexBytes(hex))
    }

    @Test(
        "refused: indefinite lengths, longer-than-needed heads, tags, floats, undefined, bad UTF-8, repeated or odd keys, lengths past the end, trailing bytes",
        arguments: [
            ("5f42010243030405ff", "indefinite"), ("9fff", "indefinite"), ("bf6161ff", "indefinite"), ("1817", "shortest"), ("190017", "shortest"),
            ("1a0000ffff", "shortest"), ("1b00000000ffffffff", "shortest"), ("c11a514b67b0", "tags"), ("f93c00", "float"), ("fb3ff199999999999a", "float"),
            ("f7", "simple"), ("62c328", "UTF-8"), ("a201020103", "twice"), ("a1400a", "neither"), ("a1f50a", "neither"), ("5a00010000", "past the end"),
            ("9a00010000", "past the end"), ("bb0000000100000000", "past the end"), ("0000", "follow"), ("1c", "reserved"), ("", "ends"),
            ("82", "past the end"), ("18", "ends"), ("8118", "ends"),
        ])
    func refusals(hex: String, mention: String) {
        #expect {
            try CBORReader.value(hexBytes(hex))
        } throws: {
            ($0 as? LatchkeyError)?.code == .malformedRequest && ($0 as? LatchkeyError)?.reason.contains(mention) == true
        }
    }

    /// A map of `count` entries with distinct two-byte integer keys and one-byte values: the largest map 64 KiB holds.
    static func largeMap(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = [0xB9, UInt8(count >> 8), UInt8(count & 0xFF)]
        for key in 0..<count { bytes += [0x19, UInt8((key + 256) >> 8), UInt8((key + 256) & 0xFF), 0x00] }
        return bytes
    }

    @Test("the largest map 64 KiB holds is read, a repeated key is found however far apart, and K and KELVIN SIGN are one key")
    func largeMapsAndRepeatedKeys() throws {
        // Reading it in time linear in its size is a benchmark row (`cbor_map_16000_entries_bytes_parsed`), not a
        // timed assertion here.
        let large = Self.largeMap(16_000)
        #expect(large.count < CBORReader.maximumSize)
        guard case .map(let entries) = try CBORReader.value(large) else {
            Issue.record("16,000 entries did not read as a map")
            return
        }
        #expect(entries.count == 16_000)
        // The set still finds a repeated key (the last entry's key made the 6th's), and text keys that are one Swift
        // string (K and U+212A KELVIN SIGN) are one key, as look-ups by name compare them.
        var repeated = Self.largeMap(300)
        repeated.replaceSubrange(repeated.count - 4..<repeated.count - 1, with: [0x19, 0x01, 0x05])
        for bytes in [repeated, [0xA2, 0x61, 0x4B, 0x00, 0x63, 0xE2, 0x84, 0xAA, 0x01]] {
            #expect {
                _ = try CBORReader.value(bytes)
            } throws: {
                ($0 as? LatchkeyError)?.reason.contains("a key twice") == true
            }
        }
    }

    @Test("nesting deeper than 16 and items over 64 KiB are refused; a prefix read says where the item ends")
    func bounds() throws {
        let deep = Array(repeating: UInt8(0x81), count: 17) + [0x00]
        #expect(throws: LatchkeyError.self) { try CBORReader.value(deep) }
        #expect(try CBORReader.value(Array(repeating: UInt8(0x81), count: 16) + [0x00]) != .null)
        #expect(throws: LatchkeyError.self) { try CBORReader.value(TestCBOR.encode(.bytes(Array(repeating: 1, count: 70_000)))) }
        let (value, end) = try CBORReader.prefix(hexBytes("a1010203"))
        #expect(value == .map([CBORMapEntry(.unsigned(1), .unsigned(2))]) && end == 3)
    }

    // MARK: - COSE keys

    static let message = Array("authenticatorData || SHA-256(clientDataJSON)".utf8)

    @Test("an ES256 key verifies its DER signatures, and no other's")
    func es256() throws {
        let signer = P256.Signing.PrivateKey()
        let point = Array(signer.publicKey.x963Representation)
        let key = try COSEKey(
            TestCBOR.key([(1, .unsigned(2)), (3, TestCBOR.int(-7)), (-1, .unsigned(1)), (-2, .bytes(Array(point[1...32]))), (-3, .bytes(Array(point[33...])))]))
        #expect(key.algorithm == .es256)
        let signature = Array(try signer.signature(for: Self.message).derRepresentation)
        #expect(key.isValidSignature(signature, for: Self.message))
        #expect(!key.isValidSignature(signature, for: Self.message + [0]))
        #expect(!key.isValidSignature(Array(try P256.Signing.PrivateKey().signature(for: Self.message).derRepresentation), for: Self.message))
        #expect(!key.isValidSignature(Array(try signer.signature(for: Self.message).rawRepresentation), for: Self.message), "raw r||s is not WebAuthn's form")
    }

    @Test("an RS256 key verifies PKCS #1 v1.5 signatures; a key under 2048 bits is refused")
    func rs256() throws {
        let signer = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let (n, e) = try TestCBOR.modulusAndExponent(signer.publicKey)
        let key = try COSEKey(TestCBOR.key([(1, .unsigned(3)), (3, TestCBOR.int(-257)), (-1, .bytes(n)), (-2, .bytes(e))]))
        let signature = Array(try signer.signature(for: Self.message, padding: .insecurePKCS1v1_5).rawRepresentation)
        #expect(key.isValidSignature(signature, for: Self.message))
        #expect(!key.isValidSignature(Array(try signer.signature(for: Self.message, padding: .PSS).rawRepresentation), for: Self.message))
        #expect(throws: LatchkeyError.self) {
            try COSEKey(TestCBOR.key([(1, .unsigned(3)), (3, TestCBOR.int(-257)), (-1, .bytes(Array(n.prefix(128)))), (-2, .bytes(e))]))
        }
    }

    @Test("an EdDSA key verifies Ed25519 signatures")
    func edDSA() throws {
        let signer = Curve25519.Signing.PrivateKey()
        let key = try COSEKey(
            TestCBOR.key([(1, .unsigned(1)), (3, TestCBOR.int(-8)), (-1, .unsigned(6)), (-2, .bytes(Array(signer.publicKey.rawRepresentation)))]))
        #expect(key.isValidSignature(Array(try signer.signature(for: Self.message)), for: Self.message))
        #expect(!key.isValidSignature(Array(repeating: 0, count: 64), for: Self.message))
    }

    @Test(
        "COSE keys refused: another algorithm, a key type that does not go with it, another curve, short coordinates, a point off the curve",
        arguments: [
            [(1, CBORValue.unsigned(2)), (3, TestCBOR.int(-35))], [(1, .unsigned(3)), (3, TestCBOR.int(-7))],
            [
                (1, .unsigned(2)), (3, TestCBOR.int(-7)), (-1, .unsigned(2)), (-2, .bytes(Array(repeating: 1, count: 32))),
                (-3, .bytes(Array(repeating: 1, count: 32))),
            ],
            [(1, .unsigned(2)), (3, TestCBOR.int(-7)), (-1, .unsigned(1)), (-2, .bytes([1])), (-3, .bytes([2]))],
            [
                (1, .unsigned(2)), (3, TestCBOR.int(-7)), (-1, .unsigned(1)), (-2, .bytes(Array(repeating: 1, count: 32))),
                (-3, .bytes(Array(repeating: 1, count: 32))),
            ],
            [(1, .unsigned(1)), (3, TestCBOR.int(-8)), (-1, .unsigned(4)), (-2, .bytes(Array(repeating: 1, count: 32)))], [(3, TestCBOR.int(-7))],
        ] as [[(Int, CBORValue)]])
    func keyRefusals(entries: [(Int, CBORValue)]) {
        #expect(throws: LatchkeyError.self) { try COSEKey(TestCBOR.key(entries)) }
    }

    /// The modulus and exponent of an RSA public key, from its PKCS #1 DER (two INTEGERs in a SEQUENCE).
}
