import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Pins the cron syntax of `[[task]] cron = ...`, its error messages and columns, and the
/// exact instants schedules fire at, including across daylight-saving changes
/// (docs/cron.md). Instants are UTC seconds; the comments give the wall times.
final class CronExpressionTests: XCTestCase {
    private func expression(_ text: String, line: UInt) -> CronExpression? {
        do {
            return try CronExpression(parsing: text)
        } catch {
            XCTFail("\"\(text)\" was refused: \(error.message) (column \(error.column))", line: line)
            return nil
        }
    }

    /// The next `count` fires after `start`.
    private func fires(_ text: String, after start: Int64, in zone: TimeZoneRules, count: Int, line: UInt = #line) -> [Int64] {
        guard let cron = expression(text, line: line) else { return [] }
        var result: [Int64] = []
        var cursor = start
        while result.count < count, let next = cron.nextFire(after: cursor, in: zone) {
            result.append(next)
            cursor = next
        }
        return result
    }

    // MARK: - Parsing

    func testParse_acceptedForms_giveTheirNormalisedForm() {
        let cases: [(text: String, normalised: String, line: UInt)] = [
            ("* * * * *", "* * * * *", #line),
            ("0 3 * * *", "0 3 * * *", #line),
            ("*/15 * * * *", "*/15 * * * *", #line),
            ("0,30 9-17 * * 1-5", "0,30 9-17 * * 1-5", #line),
            ("5-50/15 * * * *", "5,20,35,50 * * * *", #line),
            // a/n runs from a to the end of the field.
            ("10/20 * * * *", "10,30,50 * * * *", #line),
            ("0 */6 * * *", "0 */6 * * *", #line),
            ("0-59 0-23 * 1-12 *", "* * * * *", #line),
            ("0 9 * * mon-fri", "0 9 * * 1-5", #line),
            ("0 9 * * MON-Fri", "0 9 * * 1-5", #line),
            ("0 0 1 JAN,jul *", "0 0 1 1,7 *", #line),
            ("0 0 1 jan-mar/2 *", "0 0 1 1,3 *", #line),
            // 7 and 0 are both Sunday; "sat-sun" is the weekend, not a reversed range.
            ("0 0 * * 7", "0 0 * * 0", #line),
            ("0 0 * * sat-sun", "0 0 * * 0,6", #line),
            ("0 0 * * 5-7", "0 0 * * 0,5,6", #line),
            ("0 0 * * */2", "0 0 * * */2", #line),
            // A wildcard day field stays a wildcard, a spelled-out full range does not:
            // that decides between the "both" and "either" day rules.
            ("0 0 */2 * *", "0 0 */2 * *", #line),
            ("0 0 1-31 * *", "0 0 1-31 * *", #line),
            ("0 0 */31 * *", "0 0 */31 * *", #line),
            ("  0\t3  * * *  ", "0 3 * * *", #line),
            ("@yearly", "0 0 1 1 *", #line),
            ("@annually", "0 0 1 1 *", #line),
            ("@monthly", "0 0 1 * *", #line),
            ("@weekly", "0 0 * * 0", #line),
            ("@daily", "0 0 * * *", #line),
            ("@midnight", "0 0 * * *", #line),
            ("@hourly", "0 * * * *", #line),
            ("@Daily", "0 0 * * *", #line),
        ]
        for c in cases {
            guard let cron = expression(c.text, line: c.line) else { continue }
            XCTAssertEqual(cron.description, c.normalised, "\"\(c.text)\"", line: c.line)
            XCTAssertEqual(expression(cron.description, line: c.line), cron, "normalised form of \"\(c.text)\" parses back", line: c.line)
        }
    }

    func testParse_equivalentSpellings_areEqual() throws {
        XCTAssertEqual(try CronExpression(parsing: "@daily"), try CronExpression(parsing: "0 0 * * *"))
        XCTAssertEqual(try CronExpression(parsing: "0 0 * * 7"), try CronExpression(parsing: "0 0 * * sun"))
        XCTAssertNotEqual(try CronExpression(parsing: "0 0 * * *"), try CronExpression(parsing: "0 0 1-31 * *"))
    }

    func testParse_rejectedForms_sayWhyAndPointAtTheColumn() {
        let fields = "expected 5 fields (minute hour day-of-month month day-of-week)"
        let cases: [(text: String, message: String, column: Int, line: UInt)] = [
            ("", "empty cron expression; \(fields) or a macro such as @daily", 1, #line),
            ("   ", "empty cron expression; \(fields) or a macro such as @daily", 1, #line),
            ("0 3 * *", "\(fields), found 4", 8, #line),
            ("0 0 3 * * *", "\(fields), found 6; a seconds or year field is not supported", 11, #line),
            ("0 0 3 * * * 2026", "\(fields), found 7", 11, #line),
            ("60 * * * *", "minute 60 is out of range 0-59", 1, #line),
            ("0 24 * * *", "hour 24 is out of range 0-23", 3, #line),
            ("0 0 0 * *", "day of month 0 is out of range 1-31", 5, #line),
            ("0 0 32 * *", "day of month 32 is out of range 1-31", 5, #line),
            ("0 0 * 13 *", "month 13 is out of range 1-12", 7, #line),
            ("0 0 * * 8", "day of week 8 is out of range 0-7 (0 and 7 are Sunday)", 9, #line),
            ("0 0 1-40 * *", "day of month 40 is out of range 1-31", 7, #line),
            ("99999999999 * * * *", "minute 99999999999 is out of range 0-59", 1, #line),
            ("0 0 * foo *", #"month "foo" is not a number (1-12) or a month name (jan-dec)"#, 7, #line),
            ("0 0 * * monday", #"day of week "monday" is not a number (0-7) or a day name (sun-sat); names are three letters, like "mon""#, 9, #line),
            ("0 mon * * *", #"hour "mon" is not a number (0-23)"#, 3, #line),
            ("0 0 L * *", #"day of month "L" is not a number (1-31)"#, 5, #line),
            ("0 0 ? * *", #"expected a number (1-31) in the day of month field, found "?""#, 5, #line),
            ("-5 * * * *", #"expected a number (0-59) in the minute field, found "-""#, 1, #line),
            ("1- * * * *", #"expected a number (0-59) after "-" in the minute field"#, 3, #line),
            ("0 0 * 1-x2 *", #"month "x" is not a number (1-12) or a month name (jan-dec)"#, 9, #line),
            ("0 0 * * é", #"expected a number (0-7) or a day name (sun-sat) in the day of week field, found "é""#, 9, #line),
            // Columns count characters, not bytes.
            ("é 0 * * *", #"expected a number (0-59) in the minute field, found "é""#, 1, #line),
            ("1,,2 * * * *", "empty item in the minute list", 3, #line),
            (",1 * * * *", "empty item in the minute list", 1, #line),
            ("0 1, * * *", "empty item in the hour list", 5, #line),
            ("*/0 * * * *", "minute step 0 is invalid; a step must be at least 1", 3, #line),
            ("0 0 1-10/0 * *", "day of month step 0 is invalid; a step must be at least 1", 10, #line),
            ("*/90 * * * *", "minute step 90 is larger than the field's 60 values; steps do not carry over into the next hour", 3, #line),
            ("0 */25 * * *", "hour step 25 is larger than the field's 24 values; steps do not carry over into the next day", 5, #line),
            ("*/ * * * *", #"expected a step number after "/" in the minute field"#, 3, #line),
            ("0 17-9 * * *", "hour range 17-9 is reversed; to wrap around, list two ranges like 17-23,0-9", 3, #line),
            ("0 0 * * fri-mon", "day of week range fri-mon is reversed; to wrap around, list two ranges like fri-sat,sun-mon", 9, #line),
            ("0 0 * * 5-1", "day of week range 5-1 is reversed; to wrap around, list two ranges like 5-6,0-1", 9, #line),
            ("0 0 * * 7-1", "day of week range 7-1 is reversed; Sunday is also 0, so write it as 0-1", 9, #line),
            ("0 0 * nov-feb *", "month range nov-feb is reversed; to wrap around, list two ranges like nov-dec,jan-feb", 7, #line),
            ("*5 * * * *", #"unexpected "5" in the minute field"#, 2, #line),
            ("1-5-9 * * * *", #"unexpected "-" in the minute field"#, 4, #line),
            ("*/2,5 * * * *", #""*/2" cannot be combined with other items in the minute list; list the values instead"#, 1, #line),
            ("0 0 5,* * *", #""*" cannot be combined with other items in the day of month list; list the values instead"#, 7, #line),
            ("@reboot", "@reboot is not a schedule here; to run a task when watchkeeper starts, set run_on_start = true", 1, #line),
            ("@dayly", #"unknown macro "@dayly"; expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"#, 1, #line),
            (" @daily 0", "unexpected text after @daily; a macro stands for all five fields", 9, #line),
        ]
        for c in cases {
            do {
                let cron = try CronExpression(parsing: c.text)
                XCTFail("\"\(c.text)\" was accepted as \(cron)", line: c.line)
            } catch {
                XCTAssertEqual(error.message, c.message, "\"\(c.text)\"", line: c.line)
                XCTAssertEqual(error.column, c.column, "column for \"\(c.text)\"", line: c.line)
            }
        }
    }

    // MARK: - Matching

    func testMatches_daysFollowCronie_eitherDayFieldWhenBothAreRestricted() throws {
        // 2026-01-02 is a Friday, 2026-01-13 a Tuesday, 2026-01-09 a Friday.
        let cases: [(text: String, local: LocalDateTime, matches: Bool, line: UInt)] = [
            // Both restricted: the 13th OR a Friday.
            ("0 0 13 * 5", LocalDateTime(year: 2026, month: 1, day: 13), true, #line),
            ("0 0 13 * 5", LocalDateTime(year: 2026, month: 1, day: 2), true, #line),
            ("0 0 13 * 5", LocalDateTime(year: 2026, month: 1, day: 14), false, #line),
            // One is `*`: only the other counts.
            ("0 0 13 * *", LocalDateTime(year: 2026, month: 1, day: 2), false, #line),
            ("0 0 * * 5", LocalDateTime(year: 2026, month: 1, day: 2), true, #line),
            ("0 0 * * 5", LocalDateTime(year: 2026, month: 1, day: 13), false, #line),
            // A day field starting with `*` makes it "both" (as cronie does): odd days
            // that are Fridays.
            ("0 0 */2 * 5", LocalDateTime(year: 2026, month: 1, day: 9), true, #line),
            ("0 0 */2 * 5", LocalDateTime(year: 2026, month: 1, day: 2), false, #line),
            ("0 0 */2 * 5", LocalDateTime(year: 2026, month: 1, day: 11), false, #line),
            // Seconds are ignored; the minute must match.
            ("30 2 * * *", LocalDateTime(year: 2026, month: 1, day: 1, hour: 2, minute: 30, second: 59), true, #line),
            ("30 2 * * *", LocalDateTime(year: 2026, month: 1, day: 1, hour: 2, minute: 31), false, #line),
        ]
        for c in cases {
            guard let cron = expression(c.text, line: c.line) else { continue }
            XCTAssertEqual(cron.matches(c.local), c.matches, "\"\(c.text)\" at \(c.local)", line: c.line)
        }
    }

    // MARK: - Next fire in UTC

    func testNextFire_inUTC_givesTheNextMatchingMinute() {
        let cases: [(text: String, after: Int64, expected: Int64, line: UInt)] = [
            ("* * * * *", 1_767_225_600, 1_767_225_660, #line),  // 2026-01-01 00:00:00 -> 00:01
            ("* * * * *", 1_767_225_630, 1_767_225_660, #line),  // 00:00:30 -> 00:01
            ("0 3 * * *", 1_767_225_600, 1_767_236_400, #line),  // -> 2026-01-01 03:00
            // Strictly after: at 03:00 itself the next one is tomorrow's.
            ("0 3 * * *", 1_767_236_400, 1_767_322_800, #line),  // -> 2026-01-02 03:00
            ("*/15 * * * *", 1_767_226_499, 1_767_226_500, #line),  // 00:14:59 -> 00:15
            ("0 9 * * 1-5", 1_767_344_400, 1_767_603_600, #line),  // Fri 2026-01-02 09:00 -> Mon 01-05 09:00
            ("0 0 1 * *", 1_769_817_600, 1_769_904_000, #line),  // 2026-01-31 -> 02-01
            // The 31st skips months without one.
            ("0 0 31 * *", 1_769_817_600, 1_774_915_200, #line),  // 2026-01-31 -> 03-31
            ("0 0 31 * *", 1_774_915_200, 1_780_185_600, #line),  // 2026-03-31 -> 05-31
            // February 29 only in leap years, and 2100 is not one.
            ("0 0 29 2 *", 1_767_225_600, 1_835_395_200, #line),  // 2026-01-01 -> 2028-02-29
            ("0 0 29 2 *", 3_981_312_000, 4_233_686_400, #line),  // 2096-02-29 -> 2104-02-29
            // Both day fields restricted: the 13th or a Friday.
            ("0 0 13 * 5", 1_767_225_600, 1_767_312_000, #line),  // Thu 2026-01-01 -> Fri 01-02
            ("0 0 13 * 5", 1_767_916_800, 1_768_262_400, #line),  // Fri 01-09 -> Tue 01-13
            ("0 0 */2 * 5", 1_767_225_600, 1_767_916_800, #line),  // -> Fri 01-09, odd and Friday
            ("0 0 * * 7", 1_767_225_600, 1_767_484_800, #line),  // -> Sun 2026-01-04
            ("0 0 * * sun", 1_767_225_600, 1_767_484_800, #line),  // -> Sun 2026-01-04
            ("@yearly", 1_780_272_000, 1_798_761_600, #line),  // 2026-06-01 -> 2027-01-01
            ("59 23 31 12 *", 1_798_761_540, 1_830_297_540, #line),  // 2026-12-31 23:59 -> 2027-12-31 23:59
        ]
        for c in cases {
            guard let cron = expression(c.text, line: c.line) else { continue }
            XCTAssertEqual(cron.nextFire(after: c.after, in: .utc), c.expected, "\"\(c.text)\" after \(c.after)", line: c.line)
        }
    }

    func testNextFire_dateThatNeverOccurs_returnsNilAtOnce() throws {
        for text in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 feb */2"] {
            let cron = try CronExpression(parsing: text)
            XCTAssertTrue(cron.neverFires, text)
            XCTAssertNil(cron.nextFire(after: 1_767_225_600, in: .utc), text)
        }
        // "Either day field" always has days to offer.
        XCTAssertFalse(try CronExpression(parsing: "0 0 30 2 1").neverFires)
        XCTAssertFalse(try CronExpression(parsing: "0 0 29 2 *").neverFires)
    }

    /// Found by a direct search of the calendar, not minute by minute: what it costs is in
    /// `watchkeeper-bench cron` (a timed unit test fails under a sanitizer or a loaded CI).
    func testNextFire_rareDates_areFoundAcrossAMissingLeapDay_andNeverIsNil() throws {
        let berlin = try zone("Europe/Berlin")
        let rare = try CronExpression(parsing: "0 0 29 2 *")
        // From 2096-03-01 the next February 29 is in 2104: 2100 is not a leap year.
        let fire = try XCTUnwrap(rare.nextFire(after: 3_981_312_000, in: berlin))
        XCTAssertEqual(berlin.localTime(utcSeconds: fire), LocalDateTime(year: 2104, month: 2, day: 29))
        XCTAssertNil(try CronExpression(parsing: "0 0 30 2 *").nextFire(after: 1_767_225_600, in: berlin))
    }

    // MARK: - Daylight saving time, Europe/Berlin 2026
    // Spring forward 2026-03-29 01:00 UTC: 02:00 CET becomes 03:00 CEST.
    // Fall back 2026-10-25 01:00 UTC: 03:00 CEST becomes 02:00 CET, 02:00-02:59 happen twice.

    func testNextFire_berlin_timeInTheSpringGap_firesOnceWhenTheGapEnds() throws {
        let berlin = try zone("Europe/Berlin")
        XCTAssertEqual(fires("30 2 * * *", after: 1_774_612_800, in: berlin, count: 3), [
            1_774_661_400,  // Sat 03-28 02:30 CET
            1_774_746_000,  // Sun 03-29 02:30 does not exist: 03:00 CEST, the gap's end
            1_774_830_600,  // Mon 03-30 02:30 CEST
        ])
        XCTAssertEqual(fires("*/15 2 * * *", after: 1_774_738_800, in: berlin, count: 2), [
            1_774_746_000,  // 02:00, 02:15, 02:30, 02:45 on 03-29 together: once, at 03:00 CEST
            1_774_828_800,  // Mon 03-30 02:00 CEST
        ])
    }

    func testNextFire_berlin_gapFire_isNotRepeatedAfterIt() throws {
        let berlin = try zone("Europe/Berlin")
        let cron = try CronExpression(parsing: "30 2 * * *")
        XCTAssertEqual(cron.nextFire(after: 1_774_745_999, in: berlin), 1_774_746_000)  // 01:59:59 CET -> 03:00 CEST
        XCTAssertEqual(cron.nextFire(after: 1_774_746_000, in: berlin), 1_774_830_600)  // -> 03-30 02:30 CEST
    }

    func testNextFire_berlin_timeInTheAutumnRepeat_firesAtItsFirstOccurrence() throws {
        let berlin = try zone("Europe/Berlin")
        XCTAssertEqual(fires("30 2 * * *", after: 1_792_843_200, in: berlin, count: 2), [
            1_792_888_200,  // Sun 10-25 02:30 CEST (the first 02:30)
            1_792_978_200,  // Mon 10-26 02:30 CET; not 10-25 02:30 CET
        ])
        XCTAssertEqual(fires("*/15 2 * * *", after: 1_792_843_200, in: berlin, count: 5), [
            1_792_886_400,  // 10-25 02:00 CEST
            1_792_887_300,  // 02:15 CEST
            1_792_888_200,  // 02:30 CEST
            1_792_889_100,  // 02:45 CEST
            1_792_976_400,  // Mon 10-26 02:00 CET
        ])
    }

    func testNextFire_berlin_everyHourExpressions_followTheWallClock() throws {
        let berlin = try zone("Europe/Berlin")
        XCTAssertEqual(fires("*/30 * * * *", after: 1_792_885_500, in: berlin, count: 5), [
            1_792_886_400,  // 10-25 02:00 CEST
            1_792_888_200,  // 02:30 CEST
            1_792_890_000,  // 02:00 CET, the repeated hour
            1_792_891_800,  // 02:30 CET
            1_792_893_600,  // 03:00 CET
        ])
        XCTAssertEqual(fires("*/30 * * * *", after: 1_774_742_400, in: berlin, count: 3), [
            1_774_744_200,  // 03-29 01:30 CET
            1_774_746_000,  // 03:00 CEST: the clock jumped over 02:00 and 02:30
            1_774_747_800,  // 03:30 CEST
        ])
        // Hourly stays hourly in real time: nothing extra at the end of the gap.
        XCTAssertEqual(fires("30 * * * *", after: 1_774_742_400, in: berlin, count: 2), [
            1_774_744_200,  // 03-29 01:30 CET
            1_774_747_800,  // 03:30 CEST, one hour later
        ])
    }

    func testNextFire_berlin_timesOutsideTheChangedHour_areUnaffected() throws {
        let berlin = try zone("Europe/Berlin")
        XCTAssertEqual(fires("0 3 * * *", after: 1_774_612_800, in: berlin, count: 3), [
            1_774_663_200,  // Sat 03-28 03:00 CET
            1_774_746_000,  // Sun 03-29 03:00 CEST
            1_774_832_400,  // Mon 03-30 03:00 CEST
        ])
        XCTAssertEqual(fires("0 3 * * *", after: 1_792_760_400, in: berlin, count: 3), [
            1_792_803_600,  // Sat 10-24 03:00 CEST
            1_792_893_600,  // Sun 10-25 03:00 CET
            1_792_980_000,  // Mon 10-26 03:00 CET
        ])
    }

    func testNextFire_berlin2090_usesTheFooterRule() throws {
        let berlin = try zone("Europe/Berlin")
        // 2090-03-26 02:30 does not exist; the gap ends at 01:00 UTC (03:00 CEST).
        XCTAssertEqual(fires("30 2 * * *", after: 3_794_126_400, in: berlin, count: 1), [3_794_173_200])
    }

    // MARK: - Daylight saving time, America/New_York 2026
    // Spring forward 2026-03-08 07:00 UTC: 02:00 EST becomes 03:00 EDT.
    // Fall back 2026-11-01 06:00 UTC: 02:00 EDT becomes 01:00 EST, 01:00-01:59 happen twice.

    func testNextFire_newYork_timeInTheSpringGap_firesOnceWhenTheGapEnds() throws {
        let newYork = try zone("America/New_York")
        XCTAssertEqual(fires("30 2 * * *", after: 1_772_798_400, in: newYork, count: 3), [
            1_772_868_600,  // Sat 03-07 02:30 EST
            1_772_953_200,  // Sun 03-08 02:30 does not exist: 03:00 EDT
            1_773_037_800,  // Mon 03-09 02:30 EDT
        ])
        XCTAssertEqual(fires("*/15 2 * * *", after: 1_772_946_000, in: newYork, count: 2), [
            1_772_953_200,  // all of 02:00-02:45 on 03-08: once, at 03:00 EDT
            1_773_036_000,  // Mon 03-09 02:00 EDT
        ])
    }

    func testNextFire_newYork_timeInTheAutumnRepeat_firesAtItsFirstOccurrence() throws {
        let newYork = try zone("America/New_York")
        XCTAssertEqual(fires("30 1 * * *", after: 1_793_448_000, in: newYork, count: 2), [
            1_793_511_000,  // Sun 11-01 01:30 EDT (the first 01:30)
            1_793_601_000,  // Mon 11-02 01:30 EST
        ])
        // 02:30 is not repeated in New York: it simply follows the repeated hour.
        XCTAssertEqual(fires("30 2 * * *", after: 1_793_448_000, in: newYork, count: 1), [
            1_793_518_200,  // Sun 11-01 02:30 EST
        ])
        XCTAssertEqual(fires("*/30 * * * *", after: 1_793_508_300, in: newYork, count: 5), [
            1_793_509_200,  // 11-01 01:00 EDT
            1_793_511_000,  // 01:30 EDT
            1_793_512_800,  // 01:00 EST, the repeated hour
            1_793_514_600,  // 01:30 EST
            1_793_516_400,  // 02:00 EST
        ])
    }

    func testNextFire_newYork_timesOutsideTheChangedHour_areUnaffected() throws {
        let newYork = try zone("America/New_York")
        XCTAssertEqual(fires("0 3 * * *", after: 1_772_798_400, in: newYork, count: 3), [
            1_772_870_400,  // Sat 03-07 03:00 EST
            1_772_953_200,  // Sun 03-08 03:00 EDT
            1_773_039_600,  // Mon 03-09 03:00 EDT
        ])
        XCTAssertEqual(fires("0 3 * * *", after: 1_793_404_800, in: newYork, count: 3), [
            1_793_430_000,  // Sat 10-31 03:00 EDT
            1_793_520_000,  // Sun 11-01 03:00 EST
            1_793_606_400,  // Mon 11-02 03:00 EST
        ])
    }

    // MARK: - Other shapes of transition

    func testNextFire_southernHemisphere_repeatInApril() throws {
        // Sydney falls back 2026-04-05 03:00 AEDT -> 02:00 AEST (2026-04-04 16:00 UTC).
        let sydney = try zone("Australia/Sydney")
        XCTAssertEqual(fires("30 2 * * *", after: 1_775_145_600, in: sydney, count: 3), [
            1_775_230_200,  // Sat 04-04 02:30 AEDT
            1_775_316_600,  // Sun 04-05 02:30 AEDT (first occurrence)
            1_775_406_600,  // Mon 04-06 02:30 AEST
        ])
    }

    func testNextFire_halfHourShift_firesAtTheEndOfTheHalfHourGap() throws {
        // Lord Howe Island moves its clocks by 30 minutes: 2026-10-04 02:00 +1030 becomes
        // 02:30 +11 (2026-10-03 15:30 UTC).
        let lordHowe = try zone("Australia/Lord_Howe")
        XCTAssertEqual(fires("15 2 * * *", after: 1_790_942_400, in: lordHowe, count: 3), [
            1_790_955_900,  // Sat 10-03 02:15 +1030
            1_791_041_400,  // Sun 10-04 02:15 does not exist: 02:30 +11
            1_791_126_900,  // Mon 10-05 02:15 +11
        ])
        XCTAssertEqual(fires("45 2 * * *", after: 1_791_036_000, in: lordHowe, count: 1), [
            1_791_042_300,  // Sun 10-04 02:45 +11 exists and fires normally
        ])
    }
}
