import LatchkeyJOSE

/// A configured secret — an encryption key, a private key, a client secret — that never prints.
///
/// Its value is read through ``revealed`` where it is used, and only there. Every way Swift turns a value into text
/// (`description`, `debugDescription`, `String(reflecting:)`, the reflection that prints a struct holding one, as
/// swift-service-lifecycle does for each service at debug level) prints `<redacted>`. It is deliberately not `Codable`,
/// so that no encoder writes it by accident.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable,
    ExpressibleByStringLiteral
{
    /// The secret itself: pass it to what needs it, never to a log, an error or a response.
    public let revealed: String

    public init(_ value: String) { revealed = value }
    public init(stringLiteral value: String) { revealed = value }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}
