public import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// Events owed to the app's webhook endpoints (``WebhookStore``).
extension SQLAuthStore {
    public func enqueueWebhookDeliveries(_ deliveries: [WebhookDelivery]) async throws {
        guard !deliveries.isEmpty else { return }
        try await sqlWrite { db in try await Self.insertWebhookDeliveries(deliveries, db) }
    }

    /// Writes deliveries in the caller's transaction (the change they tell of), in one statement.
    static func insertWebhookDeliveries(_ deliveries: [WebhookDelivery], _ db: any SQLDatabase) async throws {
        // At most 256 rows (3,072 values) a statement: a group of sign-ins times several endpoints stays within
        // SQLite's and PostgreSQL's limits on bound values.
        for start in stride(from: 0, to: deliveries.count, by: 256) {
            try await insertWebhookDeliveryRows(deliveries[start..<min(start + 256, deliveries.count)], db)
        }
    }

    private static func insertWebhookDeliveryRows(_ deliveries: ArraySlice<WebhookDelivery>, _ db: any SQLDatabase) async throws {
        let statement: BoundStatement = """
            INSERT INTO webhook_deliveries (id, message_id, endpoint, kind, user_id, payload, status, attempts, next_attempt_at, last_error, created_at,
              finished_at)
            VALUES \(rows: deliveries.map { delivery -> [any StatementValue] in
                [
                    delivery.id, delivery.messageID, delivery.endpoint, delivery.kind, delivery.userID, delivery.payload, delivery.status.rawValue,
                    delivery.attempts, delivery.nextAttemptAt.millis, delivery.lastError, delivery.createdAt.millis, delivery.finishedAt?.millis,
                ]
            })
            """
        try await statement.run(on: db)
    }

    public func claimDueWebhookDeliveries(now: Date, limit: Int, leaseUntil: Date, endpoints: [String]) async throws -> [WebhookDelivery] {
        guard !endpoints.isEmpty else { return [] }
        // PostgreSQL: rows another instance is claiming right now are skipped, not waited for. SQLite has one writer.
        let skipLocked = backend.isPostgres ? " FOR UPDATE SKIP LOCKED" : ""
        // Asked about once a second per instance: a read finds most rounds have nothing due, without taking the writer.
        let due = try await read { db in
            try await db.raw(
                """
                SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= \(bind: now.millis)
                  AND endpoint IN (\(binds: endpoints)) LIMIT 1
                """
            ).first() != nil
        }
        guard due else { return [] }
        return try await sqlWrite { db in
            let claimed = try await db.raw(
                """
                UPDATE webhook_deliveries SET next_attempt_at = \(bind: leaseUntil.millis)
                WHERE id IN (SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= \(bind: now.millis)
                  AND endpoint IN (\(binds: endpoints)) ORDER BY next_attempt_at, id LIMIT \(bind: max(0, limit))\(unsafeRaw: skipLocked))
                RETURNING *
                """
            ).all().map(Self.webhookDelivery)
            // Handed out as they were due, with the time they were due (the lease is the store's business).
            return claimed.map { delivery in
                var delivery = delivery
                delivery.nextAttemptAt = now
                return delivery
            }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        }
    }

    public func updateWebhookDeliveries(_ deliveries: [WebhookDelivery]) async throws {
        guard !deliveries.isEmpty else { return }
        // A delivery no longer pending stays as it is: an instance whose lease ran out mid-call may report late.
        try await sqlWrite { db in
            for delivery in deliveries {
                try await db.raw(
                    """
                    UPDATE webhook_deliveries SET status = \(bind: delivery.status.rawValue), attempts = \(bind: delivery.attempts),
                      next_attempt_at = \(bind: delivery.nextAttemptAt.millis), last_error = \(bind: delivery.lastError),
                      finished_at = \(bind: delivery.finishedAt?.millis)
                    WHERE id = \(bind: delivery.id) AND status = 'pending'
                    """
                ).run()
            }
        }
    }

    public func webhookDeliveries(status: WebhookDelivery.Status?, limit: Int) async throws -> [WebhookDelivery] {
        try await read { db in
            let filter: SQLQueryString = status.map { "WHERE status = \(bind: $0.rawValue)" } ?? ""
            return try await db.raw("SELECT * FROM webhook_deliveries \(filter) ORDER BY created_at DESC, id DESC LIMIT \(bind: max(0, limit))").all()
                .map(Self.webhookDelivery)
        }
    }

    public func webhookDeliveries(userID: String, limit: Int) async throws -> [WebhookDelivery] {
        try await read { db in
            try await db.raw("SELECT * FROM webhook_deliveries WHERE user_id = \(bind: userID) ORDER BY created_at DESC, id DESC LIMIT \(bind: max(0, limit))")
                .all().map(Self.webhookDelivery)
        }
    }

    public func webhookDelivery(id: String) async throws -> WebhookDelivery? {
        try await read { db in
            try await db.raw("SELECT * FROM webhook_deliveries WHERE id = \(bind: id)").first().map(Self.webhookDelivery)
        }
    }

    public func webhookDeliveryCounts() async throws -> [WebhookDeliveryCount] {
        try await read { db in
            try await db.raw("SELECT endpoint, status, COUNT(*) AS count FROM webhook_deliveries GROUP BY endpoint, status ORDER BY endpoint, status").all()
                .compactMap { row in
                    guard let status = WebhookDelivery.Status(rawValue: try row.decode(column: "status", as: String.self)) else { return nil }
                    return WebhookDeliveryCount(
                        endpoint: try row.decode(column: "endpoint", as: String.self), status: status, count: try row.decode(column: "count", as: Int.self))
                }
        }
    }

    static func webhookDelivery(_ row: any SQLRow) throws -> WebhookDelivery {
        WebhookDelivery(
            id: try row.decode(column: "id", as: String.self), messageID: try row.decode(column: "message_id", as: String.self),
            endpoint: try row.decode(column: "endpoint", as: String.self), kind: try row.decode(column: "kind", as: String.self),
            userID: try row.decode(column: "user_id", as: String?.self), payload: try row.decode(column: "payload", as: String.self),
            status: WebhookDelivery.Status(rawValue: try row.decode(column: "status", as: String.self)) ?? .failed,
            attempts: try row.decode(column: "attempts", as: Int.self), nextAttemptAt: try row.date("next_attempt_at"),
            lastError: try row.decode(column: "last_error", as: String?.self), createdAt: try row.date("created_at"),
            finishedAt: try row.optionalDate("finished_at"))
    }
}
