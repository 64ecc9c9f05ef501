// Stand-in for UIKit (iOS, visionOS): exactly the symbols the Apple-only files of LatchkeyClient use, with the Swift
// declarations Apple documents (https://developer.apple.com/documentation/uikit), for scripts/check-apple-shells.sh.
// Only type-checked, never linked: every body traps.
//
// Built with -D LATCHKEY_STANDIN_APP_EXTENSION it models a target built with APPLICATION_EXTENSION_API_ONLY (an app
// extension or widget linking the package): what Apple marks `NS_EXTENSION_UNAVAILABLE_IOS`, Swift's
// `@available(iOSApplicationExtension, unavailable)`, is then deprecated with the message "unavailable in app
// extensions". Deprecation, not unavailability, because Swift lets a declaration that is deprecated the same way use
// it without a word (as Xcode lets an extension-unavailable declaration use another), which `@available(*,
// unavailable)` does not; the check fails on the warning.
public import Foundation

// https://developer.apple.com/documentation/uikit/uiresponder: `@MainActor class UIResponder : NSObject`.
@MainActor
open class UIResponder: NSObject {}

// https://developer.apple.com/documentation/uikit/uiview: `@MainActor class UIView : UIResponder`. Its `init()` (from
// NSObject) is main-actor isolated like every member of the class.
@MainActor
open class UIView: UIResponder {
    override public init() { super.init() }
}

// https://developer.apple.com/documentation/uikit/uiwindow: `@MainActor class UIWindow : UIView`.
@MainActor
open class UIWindow: UIView {}

// https://developer.apple.com/documentation/uikit/uiscene: `@MainActor class UIScene : UIResponder` (iOS 13).
@available(iOS 13.0, visionOS 1.0, *)
@MainActor
open class UIScene: UIResponder {}

// https://developer.apple.com/documentation/uikit/uiwindowscene: `@MainActor class UIWindowScene : UIScene` (iOS 13).
@available(iOS 13.0, visionOS 1.0, *)
@MainActor
open class UIWindowScene: UIScene {
    // https://developer.apple.com/documentation/uikit/uiwindowscene/keywindow: `var keyWindow: UIWindow? { get }`.
    @available(iOS 15.0, visionOS 1.0, *)
    open var keyWindow: UIWindow? { standIn() }
}

// https://developer.apple.com/documentation/uikit/uiapplication: `@MainActor class UIApplication : UIResponder`.
@MainActor
open class UIApplication: UIResponder {
    #if LATCHKEY_STANDIN_APP_EXTENSION
        // UIApplication.h: `@property(class, nonatomic, readonly) UIApplication *sharedApplication
        // NS_EXTENSION_UNAVAILABLE_IOS("Use view controller based solutions where appropriate instead.")`.
        @available(*, deprecated, message: "unavailable in app extensions")
        open class var shared: UIApplication { standIn() }
    #else
        // https://developer.apple.com/documentation/uikit/uiapplication/shared: `class var shared: UIApplication { get }`,
        // unavailable in app extensions (UIApplication.h, NS_EXTENSION_UNAVAILABLE_IOS).
        @available(iOSApplicationExtension, unavailable)
        @available(visionOSApplicationExtension, unavailable)
        @available(macCatalystApplicationExtension, unavailable)
        open class var shared: UIApplication { standIn() }
    #endif

    // https://developer.apple.com/documentation/uikit/uiapplication/connectedscenes: `var connectedScenes: Set<UIScene>
    // { get }` (iOS 13).
    @available(iOS 13.0, visionOS 1.0, *)
    open var connectedScenes: Set<UIScene> { standIn() }
}

@inline(never) func standIn() -> Never { fatalError("Apple stand-in: type-checking only") }
