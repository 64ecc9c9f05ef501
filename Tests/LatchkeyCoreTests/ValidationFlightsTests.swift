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
}
