#if canImport(Glibc)
import Glibc
#endif
import XCTest

@_spi(Fuzzing) @testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Pins how zones are read from the system tzdata: offsets around real transitions, the
/// footer rule that takes over after the table (Debian's tables stop in 2037), wall time
/// to instant resolution, and the errors an operator sees for a bad zone name.
/// Instants are UTC seconds; the comments give the wall times.
final class TimeZoneDatabaseTests: XCTestCase {
    private func loadError(_ identifier: String, directory: String = TimeZoneRules.zoneDirectory, line: UInt = #line) -> String? {
        do {
            let rules = try TimeZoneRules.load(identifier: identifier, directory: directory)
            XCTFail("\"\(identifier)\" loaded as \(rules)", line: line)
            return nil
        } catch {
            return error.description
        }
    }

    // MARK: - Offsets

    func testOffset_changesExactlyAtThe2026Transitions() throws {
        let berlin = try zone("Europe/Berlin")
        let newYork = try zone("America/New_York")
        let cases: [(zone: TimeZoneRules, at: Int64, offset: Int32, isDST: Bool, abbreviation: String, line: UInt)] = [
            (berlin, 1_774_745_999, 3_600, false, "CET", #line),  // 03-29 01:59:59 CET
            (berlin, 1_774_746_000, 7_200, true, "CEST", #line),  // 03-29 03:00:00 CEST
            (berlin, 1_792_889_999, 7_200, true, "CEST", #line),  // 10-25 02:59:59 CEST
            (berlin, 1_792_890_000, 3_600, false, "CET", #line),  // 10-25 02:00:00 CET
            (newYork, 1_772_953_199, -18_000, false, "EST", #line),  // 03-08 01:59:59 EST
            (newYork, 1_772_953_200, -14_400, true, "EDT", #line),  // 03-08 03:00:00 EDT
            (newYork, 1_793_512_799, -14_400, true, "EDT", #line),  // 11-01 01:59:59 EDT
            (newYork, 1_793_512_800, -18_000, false, "EST", #line),  // 11-01 01:00:00 EST
        ]
        for c in cases {
            let offset = c.zone.offset(at: c.at)
            XCTAssertEqual(offset.offsetSeconds, c.offset, "\(c.zone) at \(c.at)", line: c.line)
            XCTAssertEqual(offset.isDST, c.isDST, "\(c.zone) at \(c.at)", line: c.line)
            XCTAssertEqual(offset.abbreviation, c.abbreviation, "\(c.zone) at \(c.at)", line: c.line)
        }
    }

    func testOffset_in2090_comesFromTheFooterRule() throws {
        let berlin = try zone("Europe/Berlin")
        let newYork = try zone("America/New_York")
        let dublin = try zone("Europe/Dublin")
        // The files' tables end long before 2090, so these can only come from the footer.
        for rules in [berlin, newYork, dublin] {
            XCTAssertLessThan(rules.footerTakesOverAt ?? .max, 3_786_912_000, "\(rules) table reaches 2090")
            XCTAssertNotNil(rules.footer, "\(rules)")
        }
        let cases: [(zone: TimeZoneRules, at: Int64, offset: Int32, isDST: Bool, abbreviation: String, line: UInt)] = [
            (berlin, 3_794_173_199, 3_600, false, "CET", #line),  // 2090-03-26 01:59:59 CET
            (berlin, 3_794_173_200, 7_200, true, "CEST", #line),  // 2090-03-26 03:00:00 CEST
            (berlin, 3_812_921_999, 7_200, true, "CEST", #line),  // 2090-10-29 02:59:59 CEST
            (berlin, 3_812_922_000, 3_600, false, "CET", #line),  // 2090-10-29 02:00:00 CET
            (newYork, 3_792_985_199, -18_000, false, "EST", #line),  // 2090-03-12 01:59:59 EST
            (newYork, 3_792_985_200, -14_400, true, "EDT", #line),  // 2090-03-12 03:00:00 EDT
            (newYork, 3_813_544_799, -14_400, true, "EDT", #line),  // 2090-11-05 01:59:59 EDT
            (newYork, 3_813_544_800, -18_000, false, "EST", #line),  // 2090-11-05 01:00:00 EST
            // Ireland's "daylight saving" is in winter: GMT is the DST type, IST standard.
            (dublin, 3_788_121_600, 0, true, "GMT", #line),  // 2090-01-15
            (dublin, 3_803_760_000, 3_600, false, "IST", #line),  // 2090-07-15
        ]
        for c in cases {
            let offset = c.zone.offset(at: c.at)
            XCTAssertEqual(offset.offsetSeconds, c.offset, "\(c.zone) at \(c.at)", line: c.line)
            XCTAssertEqual(offset.isDST, c.isDST, "\(c.zone) at \(c.at)", line: c.line)
            XCTAssertEqual(offset.abbreviation, c.abbreviation, "\(c.zone) at \(c.at)", line: c.line)
        }
    }

    func testOffset_zonesWithoutDST_areConstant() throws {
        let cases: [(zone: TimeZoneRules, offset: Int32, abbreviation: String, line: UInt)] = [
            (try zone("Etc/UTC"), 0, "UTC", #line),
            (.utc, 0, "UTC", #line),
            (try zone("Asia/Tokyo"), 32_400, "JST", #line),
        ]
        for c in cases {
            for instant: Int64 in [1_768_435_200, 1_782_864_000, 3_788_121_600, 3_803_760_000] {
                let offset = c.zone.offset(at: instant)
                XCTAssertEqual(offset.offsetSeconds, c.offset, "\(c.zone) at \(instant)", line: c.line)
                XCTAssertFalse(offset.isDST, "\(c.zone) at \(instant)", line: c.line)
                XCTAssertEqual(offset.abbreviation, c.abbreviation, "\(c.zone) at \(instant)", line: c.line)
            }
        }
    }

    // MARK: - Wall time

    func testLocalTime_givesTheWallClockAndWeekday() throws {
        let berlin = try zone("Europe/Berlin")
        let newYork = try zone("America/New_York")
        let cases: [(zone: TimeZoneRules, at: Int64, local: String, weekday: Int, line: UInt)] = [
            (berlin, 1_774_745_999, "2026-03-29 01:59:59", 0, #line),
            (berlin, 1_774_746_000, "2026-03-29 03:00:00", 0, #line),
            (newYork, 1_793_512_800, "2026-11-01 01:00:00", 0, #line),
            (.utc, 1_767_225_600, "2026-01-01 00:00:00", 4, #line),
            (.utc, -1, "1969-12-31 23:59:59", 3, #line),
            (.utc, 4_107_542_400, "2100-03-01 00:00:00", 1, #line),  // 2100 has no February 29
        ]
        for c in cases {
            let local = c.zone.localTime(utcSeconds: c.at)
            XCTAssertEqual(local.description, c.local, "\(c.zone) at \(c.at)", line: c.line)
            XCTAssertEqual(local.weekday, c.weekday, "\(c.zone) at \(c.at)", line: c.line)
        }
    }

    func testResolve_distinguishesUniqueRepeatedAndSkippedWallTimes() throws {
        let berlin = try zone("Europe/Berlin")
        let newYork = try zone("America/New_York")
        let tokyo = try zone("Asia/Tokyo")
        let cases: [(zone: TimeZoneRules, local: LocalDateTime, expected: LocalResolution, line: UInt)] = [
            (berlin, LocalDateTime(year: 2026, month: 3, day: 29, hour: 1, minute: 59), .unique(1_774_745_940), #line),
            (berlin, LocalDateTime(year: 2026, month: 3, day: 29, hour: 2, minute: 30), .skipped(gapEndsAt: 1_774_746_000), #line),
            (berlin, LocalDateTime(year: 2026, month: 3, day: 29, hour: 2), .skipped(gapEndsAt: 1_774_746_000), #line),
            (berlin, LocalDateTime(year: 2026, month: 3, day: 29, hour: 3), .unique(1_774_746_000), #line),
            (berlin, LocalDateTime(year: 2026, month: 10, day: 25, hour: 1, minute: 59), .unique(1_792_886_340), #line),
            // 02:30 CEST (00:30 UTC) and 02:30 CET (01:30 UTC).
            (berlin, LocalDateTime(year: 2026, month: 10, day: 25, hour: 2, minute: 30), .repeated(first: 1_792_888_200, second: 1_792_891_800), #line),
            (berlin, LocalDateTime(year: 2026, month: 10, day: 25, hour: 3), .unique(1_792_893_600), #line),
            (berlin, LocalDateTime(year: 2090, month: 3, day: 26, hour: 2, minute: 30), .skipped(gapEndsAt: 3_794_173_200), #line),
            (newYork, LocalDateTime(year: 2026, month: 3, day: 8, hour: 2, minute: 30), .skipped(gapEndsAt: 1_772_953_200), #line),
            // 01:30 EDT (05:30 UTC) and 01:30 EST (06:30 UTC).
            (newYork, LocalDateTime(year: 2026, month: 11, day: 1, hour: 1, minute: 30), .repeated(first: 1_793_511_000, second: 1_793_514_600), #line),
            (newYork, LocalDateTime(year: 2026, month: 11, day: 1, hour: 2), .unique(1_793_516_400), #line),
            (tokyo, LocalDateTime(year: 2026, month: 3, day: 29, hour: 2, minute: 30), .unique(1_774_719_000), #line),
            // Fields beyond their range carry over: month 13 is January of the next year.
            (.utc, LocalDateTime(year: 2025, month: 13, day: 1), .unique(1_767_225_600), #line),
        ]
        for c in cases {
            XCTAssertEqual(c.zone.resolve(c.local), c.expected, "\(c.zone) \(c.local)", line: c.line)
        }
    }

    func testCivilCalendar_roundTripsDaysAcrossCenturies() {
        XCTAssertEqual(CivilCalendar.days(year: 1970, month: 1, day: 1), 0)
        XCTAssertEqual(CivilCalendar.days(year: 2000, month: 3, day: 1), 11_017)
        XCTAssertEqual(CivilCalendar.days(year: 1969, month: 12, day: 31), -1)
        for days in stride(from: Int64(-800_000), through: 800_000, by: 997) {
            let date = CivilCalendar.date(days: days)
            XCTAssertEqual(CivilCalendar.days(year: date.year, month: date.month, day: date.day), days)
        }
        XCTAssertTrue(CivilCalendar.isLeapYear(2000))
        XCTAssertFalse(CivilCalendar.isLeapYear(2100))
        XCTAssertEqual(CivilCalendar.daysInMonth(year: 2028, month: 2), 29)
    }

    // MARK: - POSIX TZ rules (footer)

    private func posix(_ rule: String, line: UInt = #line) -> TimeZoneRules? {
        do {
            return try TimeZoneRules(identifier: rule, posixRule: rule)
        } catch {
            XCTFail("\"\(rule)\" was refused: \(error.reason)", line: line)
            return nil
        }
    }

    func testPosixRule_everyDateAndTimeForm() {
        // (rule, instant of a change, offset just before, offset from then on)
        let cases: [(rule: String, at: Int64, before: Int32, after: Int32, line: UInt)] = [
            ("CET-1CEST,M3.5.0,M10.5.0/3", 1_774_746_000, 3_600, 7_200, #line),  // 2026-03-29 01:00 UTC
            ("CET-1CEST,M3.5.0,M10.5.0/3", 1_792_890_000, 7_200, 3_600, #line),  // 2026-10-25 01:00 UTC
            // Jn never counts February 29: J60 is March 1 even in 2028.
            ("AAA0BBB,J60/0,J300/0", 1_835_481_600, 0, 3_600, #line),  // 2028-03-01 00:00
            // n counts it: day 59 is February 29 in 2028, March 1 in 2027.
            ("AAA0BBB,59/0,300/0", 1_835_395_200, 0, 3_600, #line),  // 2028-02-29 00:00
            ("AAA0BBB,59/0,300/0", 1_803_859_200, 0, 3_600, #line),  // 2027-03-01 00:00
            // Hours beyond 24 move into the next day: Sunday + 25h is Monday 01:00.
            ("AAA0BBB,M3.5.0/25,M10.5.0/26", 1_774_832_400, 0, 3_600, #line),  // 2026-03-30 01:00
            ("AAA0BBB,M3.5.0/26,M10.5.0/26", 1_792_976_400, 3_600, 0, #line),  // 2026-10-26 02:00 BBB
            // Negative hours move into the previous day (Greenland's rule).
            ("<-02>2<-01>,M3.5.0/-1,M10.5.0/0", 1_774_746_000, -7_200, -3_600, #line),  // 03-28 23:00 -02
            ("<-02>2<-01>,M3.5.0/-1,M10.5.0/0", 1_792_890_000, -3_600, -7_200, #line),  // 10-25 00:00 -01
            // Without a rule, glibc's default is the US one.
            ("EST5EDT", 1_772_953_200, -18_000, -14_400, #line),  // 2026-03-08 02:00 EST
            ("EST5EDT4:00,M3.2.0/2:00:00,M11.1.0/2", 1_793_512_800, -14_400, -18_000, #line),
        ]
        for c in cases {
            guard let rules = posix(c.rule, line: c.line) else { continue }
            XCTAssertEqual(rules.offset(at: c.at - 1).offsetSeconds, c.before, "\(c.rule) before \(c.at)", line: c.line)
            XCTAssertEqual(rules.offset(at: c.at).offsetSeconds, c.after, "\(c.rule) at \(c.at)", line: c.line)
        }
    }

    func testPosixRule_daylightAllYear_andQuotedNames() throws {
        // The end (Dec 31 25:00 EDT) meets the next start (Jan 1 00:00 EST): DST all year.
        let permanent = try XCTUnwrap(posix("EST5EDT,0/0,J365/25"))
        for instant: Int64 in [1_767_225_600, 1_768_435_200, 1_782_864_000, 1_798_761_600, 3_803_760_000] {
            XCTAssertEqual(permanent.offset(at: instant).offsetSeconds, -14_400, "at \(instant)")
            XCTAssertTrue(permanent.offset(at: instant).isDST, "at \(instant)")
        }
        XCTAssertNil(permanent.nextTransition(after: 1_767_225_600))
        let tehran = try XCTUnwrap(posix("<+0330>-3:30"))
        XCTAssertEqual(tehran.offset(at: 0).offsetSeconds, 12_600)
        XCTAssertEqual(tehran.offset(at: 0).abbreviation, "+0330")
    }

    func testPosixRule_malformedRules_areRefused() {
        for rule in ["", "CE-1", "CET", "CET-1CEST,M3.5.0", "CET-1CEST,M13.5.0,M10.5.0", "CET-1CEST,M3.6.0,M10.5.0",
                     "CET-1CEST,J0,J5", "CET-1CEST,M3.5.0,M10.5.0/168", "CET-25", "CET-1CEST,M3.5.0,M10.5.0x"] {
            XCTAssertThrowsError(try TimeZoneRules(identifier: "test", posixRule: rule), "\"\(rule)\"")
        }
    }

    // MARK: - TZif files

    /// A TZif file: version 1 has only the 32-bit block; later versions repeat the data
    /// with 64-bit times, then the footer. `v1Transitions` lets a test give the 32-bit
    /// block different contents, to show it is ignored.
    private func tzif(
        version: UInt8, transitions: [Int64], indices: [UInt8], types: [(offset: Int32, isDST: Bool, abbreviation: String)],
        footer: String = "", leapCount: Int32 = 0, v1Transitions: [Int64]? = nil
    ) -> [UInt8] {
        var characters: [UInt8] = []
        var abbreviationIndex: [Int] = []
        for type in types {
            abbreviationIndex.append(characters.count)
            characters += Array(type.abbreviation.utf8) + [0]
        }
        func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
            withUnsafeBytes(of: value.bigEndian) { Array($0) }
        }
        func block(timeSize: Int, times: [Int64], indices: [UInt8]) -> [UInt8] {
            var bytes = Array("TZif".utf8) + [version] + Array(repeating: 0, count: 15)
            for count in [0, 0, Int(leapCount), times.count, types.count, characters.count] {
                bytes += bigEndian(Int32(count))
            }
            for time in times { bytes += timeSize == 8 ? bigEndian(time) : bigEndian(Int32(time)) }
            bytes += indices
            for (index, type) in types.enumerated() {
                bytes += bigEndian(type.offset) + [type.isDST ? 1 : 0, UInt8(abbreviationIndex[index])]
            }
            bytes += characters
            bytes += Array(repeating: 0, count: Int(leapCount) * (timeSize + 4))
            return bytes
        }
        let oldTimes = v1Transitions ?? transitions
        var file = block(timeSize: 4, times: oldTimes, indices: v1Transitions == nil ? indices : oldTimes.map { _ in 0 })
        if version >= UInt8(ascii: "2") {
            file += block(timeSize: 8, times: transitions, indices: indices) + Array("\n\(footer)\n".utf8)
        }
        return file
    }

    func testTZif_version1_keepsTheLastTypeAfterTheTable() throws {
        let bytes = tzif(version: 0, transitions: [0], indices: [1], types: [(0, false, "ZER"), (3_600, true, "ONE")])
        let rules = try TimeZoneRules(tzif: bytes, identifier: "test")
        XCTAssertEqual(rules.offset(at: -1).abbreviation, "ZER")
        XCTAssertEqual(rules.offset(at: 0).abbreviation, "ONE")
        XCTAssertEqual(rules.offset(at: 3_803_760_000).offsetSeconds, 3_600)
        XCTAssertNil(rules.nextTransition(after: 0))
    }

    func testTZif_version2_uses64BitTimesAndTheFooter() throws {
        // The 32-bit block claims no transitions; the 64-bit block has one in 2050 (beyond
        // 32 bits) after which the footer's Central European rule applies.
        let bytes = tzif(
            version: UInt8(ascii: "2"), transitions: [2_524_608_000], indices: [1],
            types: [(0, false, "UTC"), (3_600, false, "CET")],
            footer: "CET-1CEST,M3.5.0,M10.5.0/3", v1Transitions: []
        )
        let rules = try TimeZoneRules(tzif: bytes, identifier: "test")
        XCTAssertEqual(rules.offset(at: 1_782_864_000).abbreviation, "UTC")  // 2026-07-01
        XCTAssertEqual(rules.offset(at: 3_794_173_199).abbreviation, "CET")  // 2090-03-26 01:59:59 CET
        XCTAssertEqual(rules.offset(at: 3_794_173_200).abbreviation, "CEST")  // 2090-03-26 03:00:00 CEST
        for version in ["3", "4"] {
            let later = tzif(
                version: UInt8(ascii: Unicode.Scalar(version)!), transitions: [2_524_608_000], indices: [1],
                types: [(0, false, "UTC"), (3_600, false, "CET")], footer: "<+01>-1<+02>,M3.5.0/-1,M10.5.0/25", v1Transitions: []
            )
            XCTAssertNoThrow(try TimeZoneRules(tzif: later, identifier: "test"), "version \(version)")
        }
    }

    func testTZif_tableEndingAgesAgo_loadsAtOnce_andTheFooterGovernsAfterIt() throws {
        // Found by fuzzing: the footer's transitions were computed year by year from the
        // table's end, here 3 billion years ago, so loading never finished.
        let ancient: Int64 = -100_000_000_000_000_000
        let bytes = tzif(
            version: UInt8(ascii: "2"), transitions: [ancient], indices: [0],
            types: [(3_600, false, "CET")], footer: "CET-1CEST,M3.5.0,M10.5.0/3", v1Transitions: []
        )
        let rules = try TimeZoneRules(tzif: bytes, identifier: "test")
        let footer = try TimeZoneRules(identifier: "rule", posixRule: "CET-1CEST,M3.5.0,M10.5.0/3")
        // 1850 (before the precomputed years), 2026, and 2300 (after them).
        for instant: Int64 in [-3_786_825_600 + 200 * 86_400, 1_782_864_000, 10_413_792_000 + 100 * 86_400] {
            XCTAssertEqual(rules.offset(at: instant).abbreviation, footer.offset(at: instant).abbreviation, "\(instant)")
            XCTAssertEqual(rules.nextTransition(after: instant), footer.nextTransition(after: instant), "\(instant)")
        }
        XCTAssertEqual(rules.offset(at: ancient - 1).abbreviation, "CET")
    }

    func testTZif_damagedOrUnsupportedFiles_areRefusedWithAReason() {
        let good = tzif(version: UInt8(ascii: "2"), transitions: [0], indices: [0], types: [(0, false, "UTC")], footer: "UTC0")
        XCTAssertNoThrow(try TimeZoneRules(tzif: good, identifier: "test"))
        let cases: [(bytes: [UInt8], reason: String, line: UInt)] = [
            (Array("# tzdb zone descriptions\n".utf8) + Array(repeating: 0, count: 64), "is not a TZif time zone file", #line),
            (Array(good.dropLast(12)), "is truncated", #line),
            (tzif(version: UInt8(ascii: "2"), transitions: [0], indices: [0], types: [(0, false, "UTC")], footer: "UTC0", leapCount: 1),
             "counts leap seconds (a \"right/\" zone), which schedules do not support", #line),
            (tzif(version: UInt8(ascii: "2"), transitions: [0], indices: [3], types: [(0, false, "UTC")], footer: "UTC0"),
             "has a transition to an undefined time type", #line),
            (tzif(version: UInt8(ascii: "2"), transitions: [5, 1], indices: [0, 0], types: [(0, false, "UTC")], footer: "UTC0"),
             "has transitions out of order", #line),
            (tzif(version: UInt8(ascii: "2"), transitions: [], indices: [], types: [(0, false, "UTC")], footer: "UTC0,nonsense"),
             "has a footer rule \"UTC0,nonsense\" that cannot be read: unexpected text after the standard time", #line),
        ]
        for c in cases {
            XCTAssertThrowsError(try TimeZoneRules(tzif: c.bytes, identifier: "test"), line: c.line) { error in
                XCTAssertEqual((error as? TimeZoneRules.FormatError)?.reason, c.reason, line: c.line)
            }
        }
    }

    // MARK: - Loading

    func testLoad_unknownZone_saysWhereItLookedAndSuggests() {
        XCTAssertEqual(
            loadError("Europe/Berln"),
            #"unable to load time zone "Europe/Berln": no such zone in /usr/share/zoneinfo; did you mean "Europe/Berlin"?"#
        )
        XCTAssertEqual(
            loadError("europe/berlin"),
            #"unable to load time zone "europe/berlin": no such zone in /usr/share/zoneinfo; did you mean "Europe/Berlin"?"#
        )
        XCTAssertEqual(
            loadError("Mars/Olympus_Mons"),
            #"unable to load time zone "Mars/Olympus_Mons": no such zone in /usr/share/zoneinfo (is tzdata installed?)"#
        )
        XCTAssertEqual(
            loadError("Europe/Berlin", directory: "/nonexistent/zoneinfo"),
            #"unable to load time zone "Europe/Berlin": /nonexistent/zoneinfo does not exist (is tzdata installed?)"#
        )
    }

    func testLoad_namesThatLeaveTheZoneDirectory_areRefusedBeforeOpening() {
        let reason = #"a zone name is a path below /usr/share/zoneinfo like "Europe/Berlin", without "..", a leading "/" or unusual characters"#
        for name in ["../../etc/passwd", "Europe/../../etc/shadow", "/etc/localtime", "Europe//Berlin", "./UTC", "Europe/Berlin\u{0}x", "Europe/Berlin "] {
            XCTAssertEqual(loadError(name), "unable to load time zone \"\(name)\": \(reason)", "\"\(name)\"")
        }
        XCTAssertEqual(
            loadError(""),
            #"unable to load time zone "": the name is empty; zone names look like "Europe/Berlin" (see /usr/share/zoneinfo/zone1970.tab)"#
        )
    }

    func testLoad_filesThatAreNotZones_sayWhat() {
        XCTAssertEqual(
            loadError("Europe"),
            #"unable to load time zone "Europe": /usr/share/zoneinfo/Europe is a directory of zones; name a zone inside it, like "Europe/Berlin""#
        )
        XCTAssertEqual(
            loadError("zone1970.tab"),
            #"unable to load time zone "zone1970.tab": /usr/share/zoneinfo/zone1970.tab is not a TZif time zone file"#
        )
        guard access("/usr/share/zoneinfo/right/Europe/Berlin", R_OK) == 0 else { return }
        XCTAssertEqual(
            loadError("right/Europe/Berlin"),
            #"unable to load time zone "right/Europe/Berlin": /usr/share/zoneinfo/right/Europe/Berlin counts leap seconds (a "right/" zone), which schedules do not support; use "Europe/Berlin" instead"#
        )
    }

    func testLoad_sameZoneTwice_isServedFromTheCache() throws {
        let first = try zone("Europe/Berlin")
        XCTAssertEqual(TimeZoneCache.shared.rules(forKey: "/usr/share/zoneinfo/Europe/Berlin"), first)
        XCTAssertEqual(try zone("Europe/Berlin"), first)
        TimeZoneRules.discardCachedZones()
        XCTAssertNil(TimeZoneCache.shared.rules(forKey: "/usr/share/zoneinfo/Europe/Berlin"))
        XCTAssertEqual(try zone("Europe/Berlin"), first)
    }

    // MARK: - /etc/localtime

    private func write(_ bytes: [UInt8], to path: String) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        XCTAssertGreaterThanOrEqual(descriptor, 0)
        _ = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }

    func testLocal_linkIntoTheZoneDirectory_namesTheZone() throws {
        let directory = try makeScratchDirectory()
        let path = directory + "/localtime"
        XCTAssertEqual(symlink("/usr/share/zoneinfo/Europe/Berlin", path), 0)
        let rules = try TimeZoneRules.local(path: path)
        XCTAssertEqual(rules.identifier, "Europe/Berlin")
        XCTAssertEqual(rules.offset(at: 1_774_746_000).abbreviation, "CEST")
    }

    func testLocal_plainFile_isCalledLocaltime() throws {
        let directory = try makeScratchDirectory()
        let path = directory + "/localtime"
        write(tzif(version: UInt8(ascii: "2"), transitions: [], indices: [], types: [(32_400, false, "JST")], footer: "JST-9"), to: path)
        let rules = try TimeZoneRules.local(path: path)
        XCTAssertEqual(rules.identifier, "localtime")
        XCTAssertEqual(rules.offset(at: 0).offsetSeconds, 32_400)
    }

    func testLocal_missingFile_meansUTC_butABrokenLinkIsAnError() throws {
        let directory = try makeScratchDirectory()
        XCTAssertEqual(try TimeZoneRules.local(path: directory + "/absent"), .utc)
        let path = directory + "/localtime"
        XCTAssertEqual(symlink("/usr/share/zoneinfo/Europe/Atlantis", path), 0)
        XCTAssertThrowsError(try TimeZoneRules.local(path: path)) { error in
            XCTAssertEqual(
                "\(error)",
                "unable to load time zone from \(path): it links to /usr/share/zoneinfo/Europe/Atlantis, which does not exist (is tzdata installed? `timedatectl set-timezone ZONE` repairs the link)"
            )
        }
    }

    func testLocal_systemZone_loads() throws {
        let rules = try TimeZoneRules.local()
        XCTAssertFalse(rules.identifier.isEmpty)
    }
}
