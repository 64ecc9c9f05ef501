import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle

/// POSTs `{"payload": JWT}` to apps' notification URLs, retrying with backoff until one answers 200.
struct NotificationDeliveryService: Service, CustomStringConvertible {
    let state: EmulatorState
    let configuration: EmulatorConfiguration
    let logger: Logger

    /// The name swift-service-lifecycle logs: nothing of the configuration, which holds the emulated team's keys.
    var description: String { "NotificationDeliveryService" }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                for await pending in state.pendingNotifications {
                    group.addTask { await deliver(pending) }
                }
            }
        }
    }

    private func deliver(_ pending: PendingNotification) async {
        var backoff = configuration.notificationInitialBackoff
        for attempt in 1...max(1, configuration.notificationMaximumAttempts) {
            var status: Int?
            do {
                let payload = try await state.signNotification(pending.claims)
                var request = HTTPClientRequest(url: pending.url)
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                let body = try JSONEncoder.sorted.encode(["payload": payload])
                request.body = .bytes(ByteBuffer(bytes: body))
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                _ = try? await response.body.collect(upTo: 64 * 1024)
                status = Int(response.status.code)
            } catch {
                logger.debug("notification delivery failed", metadata: ["attempt": "\(attempt)"])
            }
            let delivered = status == 200
            await state.recordDelivery(id: pending.id, status: status, delivered: delivered)
            if delivered || Task.isCancelled { return }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(60))
        }
    }
}
