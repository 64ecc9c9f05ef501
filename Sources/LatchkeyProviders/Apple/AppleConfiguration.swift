public import Foundation
public import LatchkeyCore
import LatchkeyJOSE

/// Everything Latchkey needs to talk to Sign in with Apple.
public struct AppleConfiguration: Sendable {
    public var credentials: AppleSigningCredentials
    /// Client ids tokens may be issued to: the app's bundle id(s) and the Services ID(s) used on the web.
    public var clientIDs: [String]
    /// `https://appleid.apple.com`, or the emulator's base URL.
    public var baseURL: String
    /// Lifetime of each client secret Latchkey signs.
    public var clientSecretLifetime: TimeInterval
    public var requestTimeout: Duration
    /// Retries for calls that are safe to repeat (never the code exchange).
    public var retry: RetryPolicy

    public init(
        credentials: AppleSigningCredentials,
        clientIDs: [String],
        baseURL: String = "https://appleid.apple.com",
        clientSecretLifetime: TimeInterval = 3600,
        requestTimeout: Duration = .seconds(10),
        retry: RetryPolicy = .init()
    ) {
        self.credentials = credentials
        self.clientIDs = clientIDs
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.clientSecretLifetime = clientSecretLifetime
        self.requestTimeout = requestTimeout
        self.retry = retry
    }

    /// Where Apple publishes its signing keys.
    public var jwksURL: String { baseURL + "/auth/keys" }

    /// The identity-token policy for these client ids.
    public var identityTokenPolicy: IdentityTokenPolicy { .apple(clientIDs: clientIDs) }
}

/// Exponential backoff with jitter for requests that are safe to repeat.
public struct RetryPolicy: Sendable {
    /// Attempts in all, the first included.
    public var maximumAttempts: Int
    public var initialBackoff: Duration
    public var maximumBackoff: Duration

    public init(maximumAttempts: Int = 3, initialBackoff: Duration = .milliseconds(200), maximumBackoff: Duration = .seconds(2)) {
        self.maximumAttempts = max(1, maximumAttempts)
        self.initialBackoff = initialBackoff
        self.maximumBackoff = maximumBackoff
    }

    /// No retries at all.
    public static let never = RetryPolicy(maximumAttempts: 1)

    func backoff(beforeAttempt attempt: Int) -> Duration {
        let exponential = initialBackoff * (1 << min(attempt - 1, 16))
        let capped = min(exponential, maximumBackoff)
        return capped * Double.random(in: 0.5...1.0)
    }
}
