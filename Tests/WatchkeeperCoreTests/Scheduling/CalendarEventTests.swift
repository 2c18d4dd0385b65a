import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Pins `calendar = ...`: the normal forms systemd-analyze prints, the refusals with their
/// reasons, and fires across daylight-saving changes as systemd 252 computes them. The
/// generated differential test against systemd itself is CalendarEventOracleTests.
final class CalendarEventTests: XCTestCase {
    private func event(_ text: String, line: UInt = #line) -> CalendarEvent? {
        do {
            return try CalendarEvent(parsing: text)
        } catch {
            XCTFail("\"\(text)\" was refused: \(error.message) (column \(error.column))", line: line)
            return nil
        }
    }

    private func fires(_ text: String, after start: Int64, in zone: TimeZoneRules = .utc, count: Int, line: UInt = #line) -> [String] {
        guard let event = event(text, line: line) else { return [] }
        var result: [String] = []
        var cursor = start
        while result.count < count, let next = event.nextFire(after: cursor, in: zone) {
            let offset = zone.offset(at: next)
            result.append("\(zone.localTime(utcSeconds: next)) \(offset.abbreviation)")
            cursor = next
        }
        return result
    }

    func testNormalForms_areSystemdAnalyzes() {
        let cases: [(String, String)] = [
            ("Mon..Fri 02:30", "Mon..Fri *-*-* 02:30:00"),
            ("mon,tuesday 1:0:0", "Mon,Tue *-*-* 01:00:00"),
            ("fri,mon..wed", "Mon..Wed,Fri *-*-* 00:00:00"),
            ("Mon..Sun", "*-*-* 00:00:00"),
            ("*:0..59/15,7", "*-*-* *:00..45/15,07:00"),
            ("*-*~03/2", "*-*~03/2 00:00:00"),
            ("5..5/4:00", "*-*-* 05:00:00"),
            ("*:10..20/50", "*-*-* *:10:00"),
            ("26-03-05", "2026-03-05 00:00:00"),
            ("69-03-05", "2069-03-05 00:00:00"),
            ("12-25 10:00", "*-12-25 10:00:00"),
            ("quarterly", "*-01,04,07,10-01 00:00:00"),
            ("semiannually", "*-01,07-01 00:00:00"),
            ("weekly Europe/Berlin", "Mon *-*-* 00:00:00 Europe/Berlin"),
            ("Daily utc", "*-*-* 00:00:00 UTC"),
            ("*:*:*", "*-*-* *:*:*"),
            ("@1700000000", "2023-11-14 22:13:20 UTC"),
        ]
        for (text, normal) in cases {
            XCTAssertEqual(event(text)?.normalized, normal, text)
        }
    }

    func testRefusals_areSystemdsOwn_withAReason() {
        let refused: [(String, String)] = [
            ("*:*/5", "expected ':' after the minute"),
            ("*:5/0", "a repetition of 0 never repeats"),
            ("*:50..10", "starts after it ends"),
            ("*-*-* 24:00", "out of range 0 to 23"),
            ("*-*~29", "days from the month's end are 1 to 28"),
            ("*-*~1/2", "repeats past the month's end"),
            ("*-*~28,03", "days from the month's end are 1 to 25"),
            ("*-*-31/2", "never repeats in 1 to 31"),
            ("Fri..Mon", "from Monday towards Sunday"),
            ("Mo 1:00", "expected a number or '*'"),
            ("2200-01-01", "out of range 1970 to 2199"),
            ("*:*:5..5", "a range of seconds must end after it starts"),
            ("*:*:0/0.5", "fractions of a second are not supported"),
            ("*-*-*T02:30", "expected a space after the date"),
            ("", "an empty calendar event"),
        ]
        for (text, reason) in refused {
            XCTAssertThrowsError(try CalendarEvent(parsing: text), text) { error in
                XCTAssertTrue((error as? CalendarParseError)?.message.contains(reason) == true, "\(text): \(error)")
            }
        }
    }

    func testFires_strictlyAfter_withRepetitionsCarryingIntoTheNextDay_asSystemdDoes() {
        // 2026-03-31 21:29:00 UTC: hour 31 normalizes to 07:00 on April 1, so 01:29 is skipped there.
        XCTAssertEqual(fires("1/10:29", after: 1_774_992_540, count: 3),
                       ["2026-04-01 11:29:00 UTC", "2026-04-01 21:29:00 UTC", "2026-04-02 01:29:00 UTC"])
        // From 2026-02-05: day 31 of February moves to March 1, not March 3.
        XCTAssertEqual(fires("*-*-01,31", after: 1_770_249_600, count: 3),
                       ["2026-03-01 00:00:00 UTC", "2026-03-31 00:00:00 UTC", "2026-04-01 00:00:00 UTC"])
        XCTAssertEqual(fires("*-*~01", after: 1_767_225_600, count: 2), ["2026-01-31 00:00:00 UTC", "2026-02-28 00:00:00 UTC"])
        XCTAssertEqual(fires("2026-01-01", after: 1_767_225_600, count: 1), [])
    }

    func testFires_acrossBerlinsChanges_skipTheGapAndWalkTheRepeatedHourOnce() throws {
        let berlin = try TimeZoneRules.load(identifier: "Europe/Berlin")
        // 2026-03-28 23:00 UTC: 02:30 does not exist on March 29 and does not fire.
        XCTAssertEqual(fires("*-*-* 02:30", after: 1_774_738_800, in: berlin, count: 1), ["2026-03-30 02:30:00 CEST"])
        // 02:40 is skipped too: the search goes on from 03:40, past hour 2.
        XCTAssertEqual(fires("*-*-* 01,02:40", after: 1_774_738_800, in: berlin, count: 2), ["2026-03-29 01:40:00 CET", "2026-03-30 01:40:00 CEST"])
        // From 02:30 CEST on October 25: 02:00-02:59 is shown twice; the first pass only.
        XCTAssertEqual(fires("*:0/20", after: 1_792_888_200, in: berlin, count: 4),
                       ["2026-10-25 02:40:00 CEST", "2026-10-25 03:00:00 CET", "2026-10-25 03:20:00 CET", "2026-10-25 03:40:00 CET"])
        // From inside the second pass (01:10 UTC = 02:10 CET) it goes on in the second.
        XCTAssertEqual(fires("*:0/20", after: 1_792_890_600 - 600, in: berlin, count: 2), ["2026-10-25 02:20:00 CET", "2026-10-25 02:40:00 CET"])
        // An event's own zone wins over the task's.
        XCTAssertEqual(fires("*-*-* 02:30 Europe/Berlin", after: 1_774_738_800, count: 1), ["2026-03-30 00:30:00 UTC"])
    }

    func testFires_dayRepetitionPastTheMonthsEnd_intoAMonthWithAChange_asSystemdAnalyzeSays() {
        // Day 36 of October normalizes to November 5 (standard time), so systemd's next
        // mktime reads November 1 00:00 as standard time: 01:00 daylight time, and hour 0
        // has passed. systemd-analyze calendar --base-time=@1793145600 skips November 1.
        XCTAssertEqual(fires("*-*-01/7 America/New_York", after: 1_793_145_600, count: 3),
                       ["2026-10-29 04:00:00 UTC", "2026-11-08 05:00:00 UTC", "2026-11-15 05:00:00 UTC"])
        // The reverse: day 36 of August is September 5 00:00, skipped by Santiago's change, read
        // as 01:00 daylight time; September 1 01:00 read in daylight time is 00:00, which fires.
        XCTAssertEqual(fires("*-*-01/7 America/Santiago", after: 1_819_411_200, count: 3),
                       ["2027-08-29 04:00:00 UTC", "2027-09-01 04:00:00 UTC", "2027-09-08 03:00:00 UTC"])
    }

    func testTimestamp_isOneInstant_whateverTheTasksZone() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "once"
            calendar = "@1893456000"
            timezone = "Europe/Berlin"
            command = ["/bin/true"]
            """))
        guard case .calendar(let events, _) = configuration.tasks.first?.schedule else { return XCTFail("\(configuration.tasks)") }
        let berlin = try TimeZoneRules.load(identifier: "Europe/Berlin")
        XCTAssertEqual(events.first?.nextFire(after: 1_893_455_999, in: berlin), 1_893_456_000)
        XCTAssertNil(events.first?.nextFire(after: 1_893_456_000, in: berlin))
    }

    func testConfig_calendarTakesAStringOrAList_andTheTimezoneKey() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "a"
            calendar = ["Mon..Fri 06:30", "Sat 09:00"]
            timezone = "Europe/Berlin"
            command = ["/bin/true"]

            [[task]]
            name = "b"
            calendar = "daily UTC"
            command = ["/bin/true"]
            """))
        guard case .calendar(let events, let zone) = configuration.tasks.first?.schedule else { return XCTFail("\(configuration.tasks)") }
        XCTAssertEqual(events.map(\.normalized), ["Mon..Fri *-*-* 06:30:00", "Sat *-*-* 09:00:00"])
        XCTAssertEqual(zone, "Europe/Berlin")
        XCTAssertEqual(configuration.tasks.last?.schedule.wallClockDescription, "calendar *-*-* 00:00:00 UTC")
    }

    func testConfig_badCalendar_isReportedAtItsColumn() {
        assertSingleConfigError("""
            [[task]]
            name = "a"
            calendar = "Mon 25:00"
            command = ["/bin/true"]
            """, at: (3, 12), #"bad calendar event "Mon 25:00" for task.calendar: hour "25" is out of range 0 to 23"#)
        assertSingleConfigError("""
            [[task]]
            name = "a"
            calendar = "2020-01-01"
            command = ["/bin/true"]
            """, at: (3, 12), #"calendar "2020-01-01" for task.calendar never elapses again (systemd-analyze calendar says the same)"#)
        assertSingleConfigError("""
            [[task]]
            name = "a"
            calendar = "daily Europe/Berlin"
            timezone = "UTC"
            command = ["/bin/true"]
            """, at: (4, 12), #"task.timezone and the zone in calendar "*-*-* 00:00:00 Europe/Berlin" disagree on where to read it: keep one of them"#)
        assertSingleConfigError("""
            [[task]]
            name = "a"
            calendar = 5
            command = ["/bin/true"]
            """, at: (3, 12), #"task.calendar must be a string or a non-empty array of strings, like "Mon..Fri *-*-* 02:30""#)
    }
}
