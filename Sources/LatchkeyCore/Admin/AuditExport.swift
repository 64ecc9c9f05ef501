import Foundation
import LatchkeyJOSE
public import LatchkeyModels

/// The audit trail out, for a SIEM: every event a search matches, oldest first, as NDJSON (one
/// ``AuditEventResponse`` per line). `GET /admin/v1/audit?format=ndjson` and `latchkey audit export` write it.
public enum AuditExport {
    /// Events are read this many at a time, so that an export of any size holds one page in memory.
    public static let pageSize = 500

    /// Calls `body` with each page of the events `search` matches (its `limit` and `cursor` are this function's), oldest
    /// first.
    public static func pages(of search: AuditSearch, in store: any AuditStore, _ body: ([AuditEvent]) async throws -> Void) async throws {
        var page = search
        page.oldestFirst = true
        page.limit = pageSize
        page.cursor = nil
        while true {
            let events = try await store.auditEvents(page)
            if !events.isEmpty { try await body(events) }
            guard events.count == pageSize, let last = events.last else { return }
            page.cursor = last.id
        }
    }

    /// The event as the admin API shows it.
    public static func response(_ event: AuditEvent) -> AuditEventResponse {
        AuditEventResponse(id: event.id, at: event.at, userId: event.userID, type: event.kind, detail: event.detail)
    }

    /// One NDJSON line per event.
    public static func lines(_ events: [AuditEvent]) -> [UInt8] {
        var bytes: [UInt8] = []
        for event in events {
            bytes += (try? LeanJSONEncoder().encode(response(event))) ?? []
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }
}
