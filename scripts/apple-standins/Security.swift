// Stand-in for Security: exactly the symbols KeychainTokenStore.swift, KeychainItems.swift and SecureEnclaveKeys.swift use, with the Swift declarations Apple documents
// (https://developer.apple.com/documentation/security), for scripts/check-apple-shells.sh. Only type-checked, never
// linked: every body traps.
//
// The CoreFoundation types come first. On Apple platforms they are CoreFoundation's (which Security and Foundation
// re-export) and toll-free bridged: `[String: Any] as CFDictionary` and `kSecClass as String` compile through that
// bridging. Here each is an alias of the Foundation class it bridges to, so the same casts compile.
public import Foundation

// CFBase.h: `typedef const void *CFTypeRef`, imported as `typealias CFTypeRef = AnyObject`.
// https://developer.apple.com/documentation/corefoundation/cftyperef
public typealias CFTypeRef = AnyObject
// CFBase.h `CFStringRef`, imported as `class CFString`, toll-free bridged to NSString.
// https://developer.apple.com/documentation/corefoundation/cfstring
public typealias CFString = NSString
// CFDictionary.h `CFDictionaryRef`, imported as `class CFDictionary`, toll-free bridged to NSDictionary.
// https://developer.apple.com/documentation/corefoundation/cfdictionary
public typealias CFDictionary = NSDictionary
// MacTypes.h: `typedef SInt32 OSStatus`, imported as `typealias OSStatus = Int32`.
// https://developer.apple.com/documentation/kernel/osstatus
public typealias OSStatus = Int32

// SecBase.h: `errSecSuccess = 0`, imported as `var errSecSuccess: OSStatus { get }`.
// https://developer.apple.com/documentation/security/errsecsuccess
public var errSecSuccess: OSStatus { 0 }

// SecItem.h: `OSStatus SecItemCopyMatching(CFDictionaryRef query, CFTypeRef * __nullable CF_RETURNS_RETAINED result)`.
// https://developer.apple.com/documentation/security/secitemcopymatching(_:_:)
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
public func SecItemCopyMatching(_ query: CFDictionary, _ result: UnsafeMutablePointer<CFTypeRef?>?) -> OSStatus { standIn() }

// SecItem.h: `OSStatus SecItemAdd(CFDictionaryRef attributes, CFTypeRef * __nullable CF_RETURNS_RETAINED result)`.
// https://developer.apple.com/documentation/security/secitemadd(_:_:)
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
public func SecItemAdd(_ attributes: CFDictionary, _ result: UnsafeMutablePointer<CFTypeRef?>?) -> OSStatus { standIn() }

// SecItem.h: `OSStatus SecItemUpdate(CFDictionaryRef query, CFDictionaryRef attributesToUpdate)`.
// https://developer.apple.com/documentation/security/secitemupdate(_:_:)
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
public func SecItemUpdate(_ query: CFDictionary, _ attributesToUpdate: CFDictionary) -> OSStatus { standIn() }

// SecItem.h: `OSStatus SecItemDelete(CFDictionaryRef query)`.
// https://developer.apple.com/documentation/security/secitemdelete(_:)
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
public func SecItemDelete(_ query: CFDictionary) -> OSStatus { standIn() }

// SecItem.h: `extern const CFStringRef kSec…`, each imported as `let kSec…: CFString`. The values here are placeholders;
// only the types matter. (`nonisolated(unsafe)`: imported C constants carry no isolation either.)
// https://developer.apple.com/documentation/security/ksecclass
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecClass: CFString = "class"
// https://developer.apple.com/documentation/security/ksecclassgenericpassword
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecClassGenericPassword: CFString = "genp"
// https://developer.apple.com/documentation/security/ksecattrservice
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecAttrService: CFString = "svce"
// https://developer.apple.com/documentation/security/ksecattraccount
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecAttrAccount: CFString = "acct"
// https://developer.apple.com/documentation/security/ksecattraccessgroup
@available(iOS 3.0, macOS 10.9, visionOS 1.0, *)
nonisolated(unsafe) public let kSecAttrAccessGroup: CFString = "agrp"
// https://developer.apple.com/documentation/security/ksecattraccessible
@available(iOS 4.0, macOS 10.9, visionOS 1.0, *)
nonisolated(unsafe) public let kSecAttrAccessible: CFString = "pdmn"
// https://developer.apple.com/documentation/security/ksecattraccessibleafterfirstunlockthisdeviceonly
@available(iOS 4.0, macOS 10.9, visionOS 1.0, *)
nonisolated(unsafe) public let kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly: CFString = "cku"
// https://developer.apple.com/documentation/security/ksecvaluedata
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecValueData: CFString = "v_Data"
// https://developer.apple.com/documentation/security/ksecreturndata
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecReturnData: CFString = "r_Data"
// https://developer.apple.com/documentation/security/ksecmatchlimit
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecMatchLimit: CFString = "m_Limit"
// https://developer.apple.com/documentation/security/ksecmatchlimitone
@available(iOS 2.0, macOS 10.6, visionOS 1.0, *)
nonisolated(unsafe) public let kSecMatchLimitOne: CFString = "m_LimitOne"
// https://developer.apple.com/documentation/security/ksecusedataprotectionkeychain
@available(iOS 13.0, macOS 10.15, visionOS 1.0, *)
nonisolated(unsafe) public let kSecUseDataProtectionKeychain: CFString = "nleg"

// SecAccessControl.h, for the Secure Enclave key (SecureEnclaveKeys.swift):
// https://developer.apple.com/documentation/security/secaccesscontrol: `class SecAccessControl` (a CF type).
public final class SecAccessControl {}
// CFBase.h `CFAllocatorRef` and CFError.h `CFErrorRef`, imported as classes; only passed as nil here.
public final class CFAllocator {}
public final class CFError {}
// https://developer.apple.com/documentation/security/secaccesscontrolcreateflags:
// `struct SecAccessControlCreateFlags: OptionSet` with `static var privateKeyUsage` (iOS 9, macOS 10.12).
public struct SecAccessControlCreateFlags: OptionSet, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    @available(iOS 9.0, macOS 10.12, visionOS 1.0, *)
    public static var privateKeyUsage: SecAccessControlCreateFlags { SecAccessControlCreateFlags(rawValue: 1 << 30) }
}
// https://developer.apple.com/documentation/security/secaccesscontrolcreatewithflags(_:_:_:_:):
// `func SecAccessControlCreateWithFlags(_ allocator: CFAllocator?, _ protection: CFTypeRef, _ flags:
// SecAccessControlCreateFlags, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?) -> SecAccessControl?`.
@available(iOS 8.0, macOS 10.10, visionOS 1.0, *)
public func SecAccessControlCreateWithFlags(
    _ allocator: CFAllocator?, _ protection: CFTypeRef, _ flags: SecAccessControlCreateFlags, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> SecAccessControl? { standIn() }

@inline(never) func standIn() -> Never { fatalError("Apple stand-in: type-checking only") }
