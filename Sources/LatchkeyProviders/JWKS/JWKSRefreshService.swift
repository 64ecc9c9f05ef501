import Foundation
import LatchkeyCore
public import LatchkeyJOSE
public import Logging
public import ServiceLifecycle

/// Keeps JWKS caches warm: refreshes each one shortly before its keys go stale, so no sign-in waits for a fetch.
public struct JWKSRefreshService: Service, CustomStringConvertible {
    public let caches: [JWKSCache]
    /// How often the caches are looked at.
    public let checkInterval: Duration
    private let logger: Logger

    public init(caches: [JWKSCache], checkInterval: Duration = .seconds(60), logger: Logger = Logger(label: "latchkey.jwks")) {
        self.caches = caches
        self.checkInterval = checkInterval
        self.logger = logger
    }

    /// The name swift-service-lifecycle logs for this service: nothing of the providers' configuration.
    public var description: String { "JWKSRefreshService" }

    public func run() async throws {
        // A graceful shutdown also cuts short a refresh under way: a provider that does not answer would otherwise hold
        // the shutdown for the whole request timeout.
        await cancelWhenGracefulShutdown { await refreshDue() }
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: checkInterval) }
            } catch {
                return
            }
            await cancelWhenGracefulShutdown { await refreshDue() }
        }
    }

    /// Refreshes every cache whose keys go stale within the next check interval.
    func refreshDue() async {
        for cache in caches where cache.url != nil {
            let dueBy = cache.expiresAt.addingTimeInterval(-checkInterval.seconds * 2)
            guard dueBy <= .now else { continue }
            do {
                try await cache.refresh()
            } catch {
                if Task.isCancelled { return }
                logger.warning("could not refresh signing keys; the cached keys keep serving", metadata: ["error": "\(error.errorCode)"])
            }
        }
    }
}
