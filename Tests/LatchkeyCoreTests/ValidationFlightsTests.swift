import Foundation
import Testing

@testable import LatchkeyCore
@testable import LatchkeyJOSE

@Suite("Provider validation: grants remembered as not due")
struct ValidationFlightsTests {
    let now = Date(timeIntervalSince1970: 1_767_225_600)

    @Test("a grant is not due until the remembered time, and due from then on")
    func notDueUntil() {
        let flights = ValidationFlights()
        #expect(!flights.isNotDue("identity", now: now))
        flights.remember("identity", notDueUntil: now.addingTimeInterval(60), now: now)
        #expect(flights.isNotDue("identity", now: now.addingTimeInterval(59)))
        #expect(!flights.isNotDue("identity", now: now.addingTimeInterval(60)))
        #expect(!flights.isNotDue("other", now: now))
    }

    @Test("at most the bound is remembered: entries already due go first, and a table of live ones is forgotten whole")
    func bounded() {
        let flights = ValidationFlights()
        let later = now.addingTimeInterval(3600)
        for index in 0..<ValidationFlights.remembered / 2 { flights.remember("past-\(index)", notDueUntil: now, now: now) }
        for index in 0..<ValidationFlights.remembered / 2 { flights.remember("live-\(index)", notDueUntil: later, now: now) }
        #expect(flights.rememberedCount == ValidationFlights.remembered)
        // Full: at a time when the first half is due, that half goes and the live half stays.
        flights.remember("new", notDueUntil: later, now: now.addingTimeInterval(1))
        #expect(flights.rememberedCount == ValidationFlights.remembered / 2 + 1)
        #expect(flights.isNotDue("live-0", now: now.addingTimeInterval(1)))
        for index in 0..<ValidationFlights.remembered { flights.remember("more-\(index)", notDueUntil: later, now: now) }
        // Full of live entries: forgotten whole (a forgotten grant is only read again, never skipped).
        #expect(flights.rememberedCount < ValidationFlights.remembered)
        #expect(!flights.isNotDue("live-0", now: now.addingTimeInterval(1)))
    }

    @Test("identifiers are remembered exactly: one held as 16 bytes is told from its other spellings and from text ids")
    func identities() {
        let flights = ValidationFlights()
        let id = newIdentifier()
        guard case .hex = RememberedIdentity(id) else {
            Issue.record("\(id) is not held as 16 bytes")
            return
        }
        flights.remember(id, notDueUntil: now.addingTimeInterval(60), now: now)
        #expect(flights.isNotDue(id, now: now))
        #expect(!flights.isNotDue(id.uppercased(), now: now))
        #expect(!flights.isNotDue(id.replacingOccurrences(of: "-", with: ""), now: now))
        #expect(!flights.isNotDue(newIdentifier(), now: now))
        // The same 128 bits, written another way, are another identity.
        #expect(RememberedIdentity(id) != RememberedIdentity(id.uppercased()))
        #expect(RememberedIdentity("00000000-0000-7000-8000-00000000000g") == .text("00000000-0000-7000-8000-00000000000g"))
        #expect(RememberedIdentity("0123456789ab-cdef-0123-4567-89abcdef") == .text("0123456789ab-cdef-0123-4567-89abcdef"))
        #expect(RememberedIdentity("01234567-89ab-cdef-0123-456789abcdef") == .hex(0x0123_4567_89ab_cdef, 0x0123_4567_89ab_cdef))
        let imported = "auth0|5f7c8ec7c33c6c004bbafe82"
        flights.remember(imported, notDueUntil: now.addingTimeInterval(60), now: now)
        #expect(flights.isNotDue(imported, now: now))
    }
}
