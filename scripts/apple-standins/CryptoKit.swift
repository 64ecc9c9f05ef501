// Stand-in for CryptoKit: exactly the Secure Enclave symbols SecureEnclaveKeys.swift uses, with the Swift declarations
// Apple documents (https://developer.apple.com/documentation/cryptokit/secureenclave), for
// scripts/check-apple-shells.sh. Only type-checked, never linked: every body traps.
//
// Left out: the `authenticationContext: LAContext?` parameters (LocalAuthentication; they default to nil and the shell
// never passes them), and Sendable on the key types, which the shell does not rely on (the safe side).
public import Foundation
public import Security

// https://developer.apple.com/documentation/cryptokit/p256/signing/publickey and …/ecdsasignature: the public key and
// signature types a Secure Enclave key hands out, each with `var rawRepresentation: Data { get }`.
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
public enum P256 {
    public enum Signing {
        public struct PublicKey {
            public var rawRepresentation: Data { standIn() }
        }

        public struct ECDSASignature {
            public var rawRepresentation: Data { standIn() }
        }
    }
}

// https://developer.apple.com/documentation/cryptokit/secureenclave: `enum SecureEnclave` with
// `static var isAvailable: Bool { get }`.
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
public enum SecureEnclave {
    public static var isAvailable: Bool { standIn() }

    public enum P256 {
        public enum Signing {
            // https://developer.apple.com/documentation/cryptokit/secureenclave/p256/signing/privatekey
            public struct PrivateKey {
                // init(compactRepresentable:accessControl:authenticationContext:) throws
                public init(compactRepresentable: Bool = true, accessControl: SecAccessControl) throws { standIn() }
                // init(dataRepresentation:authenticationContext:) throws
                public init(dataRepresentation: Data) throws { standIn() }
                public var dataRepresentation: Data { standIn() }
                public var publicKey: CryptoKit.P256.Signing.PublicKey { standIn() }
                // func signature<D>(for data: D) throws -> P256.Signing.ECDSASignature where D : DataProtocol
                public func signature<D: DataProtocol>(for data: D) throws -> CryptoKit.P256.Signing.ECDSASignature { standIn() }
            }
        }
    }
}

@inline(never) func standIn() -> Never { fatalError("Apple stand-in: type-checking only") }
