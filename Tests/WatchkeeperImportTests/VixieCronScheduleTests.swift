import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport
import WatchkeeperTestSupport

/// Cron's own rules against watchkeeper's CronExpression: the same fires wherever the clock
/// runs steadily, and the documented differences across DST changes.
final class VixieCronScheduleTests: XCTestCase {
    private func daemonFires(_ spec: String, after base: Int64, count: Int, in zone: TimeZoneRules) throws -> [Int64] {
        let expression = try CronExpression(parsing: spec)
        var fires: [Int64] = []
        var cursor = base
        while fires.count < count, let next = expression.nextFire(after: cursor, in: zone) {
            fires.append(next)
            cursor = next
        }
        return fires
    }

    func testDayOfMonthOrDayOfWeek_bothRestricted_eitherMatches_likeCronExpression() throws {
        let utc = TimeZoneRules.utc
        // 2026-01-01 is a Thursday. "1,15 or Monday"; "*" in one field makes it AND.
        let base: Int64 = 1_767_225_600 - 60
        for spec in ["0 0 1,15 * 1", "0 0 * * 1", "0 0 1,15 * *", "0 0 */2 * 1", "0 0 1 * */3", "0 12 13 * fri", "0 0 31 * 0,6", "@weekly", "@monthly", "@yearly", "@daily", "@hourly"] {
            let cron = try VixieCronSchedule(parsing: spec)
            XCTAssertEqual(cron.runs(after: base, count: 20, in: utc), try daemonFires(spec, after: base, count: 20, in: utc), spec)
        }
        let either = try VixieCronSchedule(parsing: "0 0 1,15 * 1").runs(after: base, count: 4, in: utc)
        XCTAssertEqual(either.map { utc.localTime(utcSeconds: $0).day }, [1, 5, 12, 15], "the 1st, Mondays the 5th and 12th, the 15th")
    }

    func testRandomExpressions_matchCronExpression_inZonesWithoutChanges() throws {
        var generator = SeededGenerator(seed: 26)
        let zone = try zone("Asia/Tokyo")
        func field(_ range: ClosedRange<Int>) -> String {
            switch Int.random(in: 0...4, using: &generator) {
            case 0: return "*"
            case 1: return "\(Int.random(in: range, using: &generator))"
            case 2:
                let low = Int.random(in: range, using: &generator)
                return "\(low)-\(Int.random(in: low...range.upperBound, using: &generator))"
            case 3: return "*/\(Int.random(in: 1...max(1, range.upperBound / 2), using: &generator))"
            default:
                let a = Int.random(in: range, using: &generator), b = Int.random(in: range, using: &generator)
                return a == b ? "\(a)" : "\(min(a, b)),\(max(a, b))"
            }
        }
        var compared = 0
        for _ in 0..<150 {
            let spec = [field(0...59), field(0...23), field(1...31), field(1...12), field(0...6)].joined(separator: " ")
            guard let expression = try? CronExpression(parsing: spec), !expression.neverFires else { continue }
            let base = Int64.random(in: 1_700_000_000...1_900_000_000, using: &generator)
            let cron = try VixieCronSchedule(parsing: spec)
            XCTAssertEqual(cron.runs(after: base, count: 20, in: zone), try daemonFires(spec, after: base, count: 20, in: zone), "\(spec) after \(base)")
            compared += 1
        }
        XCTAssertGreaterThan(compared, 100)
    }

    func testSpringForward_fixedTimeRunsWhenTheGapEnds_inBothSchedulers() throws {
        let berlin = try zone("Europe/Berlin")
        let base: Int64 = 1_774_700_000  // 2026-03-28, the day before the change
        for spec in ["30 2 * * *", "0 2 * * *", "30 * * * *", "@hourly"] {
            XCTAssertEqual(try VixieCronSchedule(parsing: spec).runs(after: base, count: 20, in: berlin),
                           try daemonFires(spec, after: base, count: 20, in: berlin), spec)
        }
        let fixed = try VixieCronSchedule(parsing: "30 2 * * *").runs(after: base, count: 2, in: berlin)
        XCTAssertEqual(fixed[0], 1_774_746_000, "03:00 CEST, when the skipped 02:30 is owed")
    }

    /// What docs/import.md lists: cron treats an entry whose minute field starts with `*` as
    /// a wildcard job, skipped in a forward jump and repeated in a backward one; watchkeeper
    /// decides by the hour field alone. And cron runs every fixed time of a gap, each once.
    func testDifferences_acrossDSTChanges_arePinned() throws {
        let berlin = try zone("Europe/Berlin")
        let spring: Int64 = 1_774_700_000
        let wildcardMinute = try VixieCronSchedule(parsing: "*/15 2 * * *").runs(after: spring, count: 4, in: berlin)
        XCTAssertFalse(wildcardMinute.contains(1_774_746_000), "cron skips a wildcard entry's minutes in the gap")
        XCTAssertTrue(try daemonFires("*/15 2 * * *", after: spring, count: 4, in: berlin).contains(1_774_746_000), "watchkeeper fires once at the gap's end")

        let twoTimes = try VixieCronSchedule(parsing: "0,30 2 * * *").runs(after: spring, count: 2, in: berlin)
        XCTAssertEqual(twoTimes, [1_774_746_000, 1_774_746_000], "cron runs both skipped fixed times at 03:00")

        let autumn: Int64 = 1_792_800_000  // 2026-10-24
        // 02:00-02:45 on the 24th, then on the 25th in CEST and (cron only) again in CET.
        let repeated = try VixieCronSchedule(parsing: "*/15 2 * * *").runs(after: autumn, count: 12, in: berlin)
        XCTAssertEqual(repeated[8] - repeated[4], 3_600, "the repeated hour runs the wildcard entry again")
        let daemon = try daemonFires("*/15 2 * * *", after: autumn, count: 12, in: berlin)
        XCTAssertEqual(daemon[8] - daemon[4], 90_000, "watchkeeper fires at the first occurrence only: next on the 26th")
        XCTAssertEqual(try VixieCronSchedule(parsing: "30 2 * * *").runs(after: autumn, count: 3, in: berlin),
                       try daemonFires("30 2 * * *", after: autumn, count: 3, in: berlin), "a fixed time does not repeat in either")
    }

    func testCronRefusals_areTheVixieOnes_andCronieTakesAStepAfterASingleValue() throws {
        XCTAssertThrowsError(try VixieCronSchedule(parsing: "5/10 * * * *"), "a step needs a range in cron's entry.c")
        XCTAssertThrowsError(try VixieCronSchedule(parsing: "@reboot"))
        XCTAssertThrowsError(try VixieCronSchedule(parsing: "@Daily"), "cron compares the words with strcmp")
        XCTAssertNoThrow(try VixieCronSchedule(parsing: "0 0 * jan-mar Mon-Fri"))
        let cronie = try VixieCronSchedule(parsing: "5/20 * * * *", stepAfterSingleValue: true)
        XCTAssertEqual(cronie.runs(after: 0, count: 3, in: .utc), [300, 1_500, 2_700], "5-59/20")
    }

    /// cronie reads a CRON_TZ entry in that zone at each real minute: a fixed time in its
    /// gap never comes, one in its repeated hour comes twice; watchkeeper fires once at the
    /// gap's end and once in the fold.
    func testCronieCronTZ_onAUTCMachine_missesTheGap_andRunsTheFoldTwice() throws {
        let berlin = try zone("Europe/Berlin")
        let schedule = try VixieCronSchedule(parsing: "30 2 * * *")
        let spring = schedule.runs(after: 1_774_700_000, count: 2, in: .utc, entryZone: berlin)
        XCTAssertEqual(spring, [1_774_830_600, 1_774_917_000], "03-30 and 03-31 02:30 CEST: nothing on the 29th")
        let autumn = schedule.runs(after: 1_792_800_000, count: 3, in: .utc, entryZone: berlin)
        XCTAssertEqual(autumn, [1_792_801_800, 1_792_888_200, 1_792_891_800], "the 24th, then 02:30 CEST and 02:30 CET on the 25th")
        let imported = importCron("CRON_TZ=Europe/Berlin\n30 2 * * * /bin/nightly\n", cron: .cronie)
        XCTAssertEqual(imported.entry("nightly-l2")?["timezone"], .string("Europe/Berlin"))
        let configuration = try XCTUnwrap(imported.loaded())
        let check = ImportCheck.compare(imported.config, loaded: configuration, after: 1_774_700_000, machineZone: .utc, calendarOracle: nil)
        XCTAssertEqual(check.first?.zone.identifier, "Europe/Berlin")
        XCTAssertTrue(ImportCheck.render(check, sourceLabel: "cron").contains("-                               | 2026-03-29 03:00:00 +02:00 CEST | DIFFERENT"),
                      ImportCheck.render(check, sourceLabel: "cron"))
    }

    /// In the machine's own repeated hour cronie runs only wildcard entries, and no
    /// CRON_TZ entry's fixed time (cron.c: the negative wake-up), though it is a new minute
    /// in CRON_TZ; the jump forward it catches up without running one twice.
    func testCronieCronTZ_onABerlinMachine_skipsAFixedTimeInTheMachinesRepeatedHour() throws {
        let berlin = try zone("Europe/Berlin")
        let schedule = try VixieCronSchedule(parsing: "15 1 * * *")
        // 2026-10-25 01:15 UTC is 02:15 CET, the second pass of Berlin's 02:00-02:59.
        XCTAssertEqual(schedule.runs(after: 1_792_800_000, count: 2, in: berlin, entryZone: .utc), [1_792_804_500, 1_792_977_300])
        // 2026-03-29 01:15 UTC is 03:15 CEST, just after the jump: it runs, once.
        XCTAssertEqual(schedule.runs(after: 1_774_700_000, count: 2, in: berlin, entryZone: .utc), [1_774_746_900, 1_774_833_300])
    }

    func testImportCheck_reportsNoDifference_forSteadyZones_andADifferentRowForAnExtraRun() throws {
        let imported = importCron("0,30 2 * * * /bin/two\n5 4 * * * /bin/one\n")
        let configuration = try XCTUnwrap(imported.loaded())
        let berlin = try zone("Europe/Berlin")
        let spring = ImportCheck.compare(imported.config, loaded: configuration, after: 1_774_700_000, machineZone: berlin, calendarOracle: nil)
        XCTAssertEqual(spring.map(\.task), ["two-l1", "one-l2"])
        XCTAssertTrue(spring[0].differs)
        XCTAssertEqual(spring[0].rows.filter { $0.source != $0.imported }.count, 1, ImportCheck.render(spring, sourceLabel: "cron"))
        XCTAssertFalse(spring[1].differs)
        let summer = ImportCheck.compare(imported.config, loaded: configuration, after: 1_780_000_000, machineZone: berlin, calendarOracle: nil)
        XCTAssertFalse(summer.contains(where: \.differs), ImportCheck.render(summer, sourceLabel: "cron"))
        XCTAssertTrue(ImportCheck.render(spring, sourceLabel: "cron").contains("2026-03-29 03:00:00 +02:00 CEST | -"))
    }
}
