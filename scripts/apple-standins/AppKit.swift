// Stand-in for AppKit (macOS): exactly the symbols the Apple-only files of LatchkeyClient use, with the Swift
// declarations Apple documents (https://developer.apple.com/documentation/appkit), for scripts/check-apple-shells.sh.
// Only type-checked, never linked: every body traps.
public import Foundation

// https://developer.apple.com/documentation/appkit/nsresponder: `@MainActor class NSResponder : NSObject`.
@MainActor
open class NSResponder: NSObject {
    override public init() { super.init() }
}

// https://developer.apple.com/documentation/appkit/nswindow: `@MainActor class NSWindow : NSResponder`.
@MainActor
open class NSWindow: NSResponder {}

// https://developer.apple.com/documentation/appkit/nsapplication: `@MainActor class NSApplication : NSResponder`.
@MainActor
open class NSApplication: NSResponder {
    // https://developer.apple.com/documentation/appkit/nsapplication/shared: `class var shared: NSApplication { get }`
    // (not marked unavailable in app extensions).
    open class var shared: NSApplication { standIn() }

    // https://developer.apple.com/documentation/appkit/nsapplication/keywindow: `var keyWindow: NSWindow? { get }`.
    open var keyWindow: NSWindow? { standIn() }
}

@inline(never) func standIn() -> Never { fatalError("Apple stand-in: type-checking only") }
