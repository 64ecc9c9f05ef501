import Foundation

/// Calls `action` when the app becomes active or protected data becomes available, so a session read while the
/// device was locked (or a refresh that came due in the background) is taken care of without the app's help.
///
/// The notifications are named by their raw values, so this needs neither UIKit nor AppKit (and works in app
/// extensions, where `UIApplication.shared` is unavailable); on other platforms nothing posts them.
final class AppLifecycleObserver: @unchecked Sendable {
    // @unchecked: `tokens` is written once in init and read in deinit only.
    private let center: NotificationCenter
    private var tokens: [any NSObjectProtocol] = []

    static let notifications: [Notification.Name] = [
        // UIKit: `UIApplication.didBecomeActiveNotification` (UIApplicationDidBecomeActiveNotification).
        Notification.Name("UIApplicationDidBecomeActiveNotification"),
        // UIKit: `UIApplication.protectedDataDidBecomeAvailableNotification` (UIApplicationProtectedDataDidBecomeAvailable).
        Notification.Name("UIApplicationProtectedDataDidBecomeAvailable"),
        // AppKit: `NSApplication.didBecomeActiveNotification` (NSApplicationDidBecomeActiveNotification).
        Notification.Name("NSApplicationDidBecomeActiveNotification"),
    ]

    init(center: NotificationCenter, action: @escaping @Sendable () async -> Void) {
        self.center = center
        tokens = Self.notifications.map { name in
            center.addObserver(forName: name, object: nil, queue: nil) { _ in Task { await action() } }
        }
    }

    deinit {
        for token in tokens { center.removeObserver(token) }
    }
}
