public import Foundation
import LatchkeyModels

/// A P-256 key only this device holds: what a DPoP-bound session (RFC 9449) is bound to. Every request to Latchkey
/// carries a proof signed with it, so the session's tokens are useless on another device.
///
/// ``DeviceBinding/dpop`` picks one (see there); implement this protocol for a key kept elsewhere and pass it to
/// ``DeviceBinding/dpop(key:)``.
public protocol DeviceKey: Sendable {
    /// The public key, x ‖ y: 64 bytes, as CryptoKit's `P256.Signing.PublicKey.rawRepresentation`.
    var publicKey: Data { get }
    /// The ES256 signature of `bytes` (ECDSA P-256 over their SHA-256), raw r ‖ s: 64 bytes, as CryptoKit's
    /// `P256.Signing.ECDSASignature.rawRepresentation`.
    func sign(_ bytes: Data) throws -> Data
}

/// Whether a ``LatchkeyClient`` binds its session to a key of the device (DPoP, RFC 9449).
///
/// With ``dpop``, every request to Latchkey carries a proof by the device's key; the server binds the session to that
/// key at sign-in (its answers then say `tokenType` `DPoP`), and refreshes and `/v1/me*` need a proof by it. The key:
///
/// - on an iPhone, iPad, Mac or Vision Pro: a Secure Enclave key (CryptoKit), usable after the first unlock and never
///   exported; its data representation (useless on another device) is kept in the Keychain, this device only;
/// - in the Simulator and in app extensions, which have no Secure Enclave key of the app's: a software key kept in the
///   Keychain (this device only, readable after the first unlock);
/// - elsewhere (Linux): a software key in a file beside a ``FileTokenStore``'s (`<file>.dpop-key`, mode 0600), or in
///   memory with any other store. An in-memory key dies with the process, and a session bound to it can no longer be
///   refreshed: pass your own key with ``dpop(key:)`` when the session outlives the process.
///
/// An app and its extensions that share a session must sign with the same key: give them all
/// ``dpop(keychainAccessGroup:)`` with a Keychain group they share (a software key in the Keychain, for all of them).
///
/// ```swift
/// let store = FileTokenStore(url: container.appendingPathComponent("session.json"))
/// let client = LatchkeyClient(baseURL: server, tokenStore: store, deviceBinding: .dpop, appAttest: .enabled)
/// ```
public struct DeviceBinding: Sendable {
    enum Mode: Sendable {
        case none
        case dpop(keychainAccessGroup: String?)
        case key(any DeviceKey)
    }

    let mode: Mode

    /// No binding: bearer tokens, and no DPoP header on any request.
    public static let none = DeviceBinding(mode: .none)
    /// DPoP with the device's own key (see ``DeviceBinding``).
    public static let dpop = DeviceBinding(mode: .dpop(keychainAccessGroup: nil))

    /// DPoP with a software key in the Keychain group `keychainAccessGroup`, for an app and extensions sharing a session.
    public static func dpop(keychainAccessGroup: String) -> DeviceBinding {
        DeviceBinding(mode: .dpop(keychainAccessGroup: keychainAccessGroup))
    }

    /// DPoP with `key`, kept by the app.
    public static func dpop(key: any DeviceKey) -> DeviceBinding {
        DeviceBinding(mode: .key(key))
    }
}

/// A ``DeviceKey`` in software: the Keychain's or a file's bytes, or memory.
struct SoftwareDeviceKey: DeviceKey {
    let key: SoftwareSigningKey

    var publicKey: Data { key.rawPublicKey }
    func sign(_ bytes: Data) throws -> Data { try key.signature(for: bytes) }

    /// A new key and the bytes to keep.
    static func make() -> (any DeviceKey, Data) {
        let key = SoftwareSigningKey()
        return (SoftwareDeviceKey(key: key), key.rawRepresentation)
    }

    static func restore(_ data: Data) throws -> any DeviceKey {
        SoftwareDeviceKey(key: try SoftwareSigningKey(rawRepresentation: data))
    }
}

/// Where a device's key, and App Attest's key id, are kept: the choice made from what the platform offers.
struct DeviceKeyPlan: Equatable {
    enum Items: Equatable {
        case keychain(accessGroup: String?)
        /// Files beside the session file.
        case files(beside: URL)
        case memory
    }

    /// Where the key's bytes (or the Secure Enclave key's data representation) and App Attest's state are kept.
    var items: Items
    /// Whether the key is made in the Secure Enclave; a software key otherwise.
    var secureEnclave: Bool

    /// - Parameters:
    ///   - hasKeychain: whether there is a Keychain (Apple platforms).
    ///   - hasSecureEnclave: whether a Secure Enclave key can be made (not in the Simulator).
    ///   - isAppExtension: whether this process is an app extension.
    ///   - accessGroup: the Keychain group shared with extensions, when one was given.
    ///   - sessionFile: the session's file, when the token store is a ``FileTokenStore``.
    static func choose(hasKeychain: Bool, hasSecureEnclave: Bool, isAppExtension: Bool, accessGroup: String?, sessionFile: URL?) -> DeviceKeyPlan {
        guard hasKeychain else { return DeviceKeyPlan(items: sessionFile.map { .files(beside: $0) } ?? .memory, secureEnclave: false) }
        // A key shared through a Keychain group must be one every process can use: a software key.
        return DeviceKeyPlan(items: .keychain(accessGroup: accessGroup), secureEnclave: hasSecureEnclave && !isAppExtension && accessGroup == nil)
    }

    /// The plan for this process.
    static func current(accessGroup: String?, tokenStore: any TokenStore) -> DeviceKeyPlan {
        choose(
            hasKeychain: KeychainItems.isAvailable, hasSecureEnclave: SecureEnclaveKeys.isAvailable,
            isAppExtension: Bundle.main.bundleURL.pathExtension == "appex",
            accessGroup: accessGroup, sessionFile: (tokenStore as? FileTokenStore)?.url)
    }

    /// The store this plan keeps items in, for the server `issuer`.
    func store(issuer: String) -> any InstallItemStore {
        switch items {
        case .keychain(let accessGroup): KeychainItems.store(issuer: issuer, accessGroup: accessGroup) ?? MemoryInstallItems()
        case .files(let sessionFile): FileInstallItems(sessionFile: sessionFile)
        case .memory: MemoryInstallItems()
        }
    }
}

/// Makes and restores keys of one kind (software, or the Secure Enclave's).
struct DeviceKeyFactory: Sendable {
    /// The name the key's bytes are kept under.
    let itemName: String
    let make: @Sendable () throws -> (any DeviceKey, Data)
    let restore: @Sendable (Data) throws -> any DeviceKey

    static let software = DeviceKeyFactory(itemName: "dpop-key", make: SoftwareDeviceKey.make, restore: SoftwareDeviceKey.restore)

    /// The kept key, or a new one kept for next time.
    ///
    /// A kept key that cannot be restored (damaged, or a Secure Enclave key restored from another device's backup) is
    /// replaced. A store that cannot be read now (a Keychain locked before the first unlock) throws: the key is not
    /// replaced, or the session bound to it would be lost.
    func load(from items: any InstallItemStore) throws -> any DeviceKey {
        for _ in 0..<2 {
            if let kept = try items.read(itemName) {
                if let key = try? restore(kept) { return key }
                let (key, data) = try make()
                try items.replace(itemName, with: data)
                return key
            }
            let (key, data) = try make()
            if try items.add(itemName, data) { return key }
            // Another process added its key between the read and the add: use that one.
        }
        throw LatchkeyClientError.storageUnavailable("the device key's store keeps answering that the key exists and then that it does not")
    }
}

/// The device key, loaded when first needed (the Keychain may be locked at launch) and then kept.
final class DeviceKeySource: @unchecked Sendable {
    // @unchecked: `loaded` is only read and written while holding `lock`; the other properties are constants.
    private let lock = NSLock()
    private var loaded: (any DeviceKey)?
    private let load: @Sendable () throws -> any DeviceKey

    init(load: @escaping @Sendable () throws -> any DeviceKey) {
        self.load = load
    }

    init(key: any DeviceKey) {
        loaded = key
        load = { key }
    }

    /// The source for `binding`, or nil without one; `items` replaces the platform's store (and its Secure Enclave).
    static func make(_ binding: DeviceBinding, issuer: String, tokenStore: any TokenStore, items: (any InstallItemStore)? = nil) -> DeviceKeySource? {
        switch binding.mode {
        case .none:
            return nil
        case .key(let key):
            return DeviceKeySource(key: key)
        case .dpop(let accessGroup):
            guard let items else {
                let plan = DeviceKeyPlan.current(accessGroup: accessGroup, tokenStore: tokenStore)
                let items = plan.store(issuer: issuer)
                let factory = plan.secureEnclave ? SecureEnclaveKeys.factory ?? .software : .software
                return DeviceKeySource { try factory.load(from: items) }
            }
            return DeviceKeySource { try DeviceKeyFactory.software.load(from: items) }
        }
    }

    /// The key; throws ``LatchkeyClientError/storageUnavailable`` while it cannot be read (and tries again next time).
    func key() throws -> any DeviceKey {
        try lock.withLock {
            if let loaded { return loaded }
            do {
                let key = try load()
                loaded = key
                return key
            } catch let error as LatchkeyClientError {
                throw error
            } catch {
                throw LatchkeyClientError.storageUnavailable("the device key cannot be read or made now (\(type(of: error)))")
            }
        }
    }
}

#if !(canImport(CryptoKit) && canImport(Security))
    /// No Secure Enclave here.
    enum SecureEnclaveKeys {
        static let isAvailable = false
        static let factory: DeviceKeyFactory? = nil
    }
#endif
