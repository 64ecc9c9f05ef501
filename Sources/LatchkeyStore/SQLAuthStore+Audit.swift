import Foundation
public import LatchkeyCore
import LatchkeyJOSE
import SQLKit

/// What happened to accounts (``AuditStore``).
extension SQLAuthStore {
    public func audit(_ event: AuditEvent) async throws {
        try await write { try await $0.audit(event) }
    }

    public func auditEvents(userID: String?, limit: Int) async throws -> [AuditEvent] {
        try await read { db in
            let rows =
                if let userID {
                    try await db.raw("SELECT * FROM audit_events WHERE user_id = \(bind: userID) ORDER BY at DESC LIMIT \(bind: limit)").all()
                } else {
                    try await db.raw("SELECT * FROM audit_events ORDER BY at DESC LIMIT \(bind: limit)").all()
                }
            return try rows.map(Self.auditEvent).reversed()
        }
    }

    static func auditEvent(_ row: any SQLRow) throws -> AuditEvent {
        AuditEvent(
            id: try row.decode(column: "id", as: String.self), at: try row.date("at"), userID: try row.decode(column: "user_id", as: String?.self),
            kind: try row.decode(column: "kind", as: String.self), detail: try row.decode(column: "detail", as: String.self))
    }
}
