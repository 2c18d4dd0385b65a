import Dispatch
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// `watchkeeper next`: the fires it lists are the scheduler's (CronExpression.nextFire, the
/// `every` anchor), and its daylight-saving marks say what the scheduler does with the
/// gap and the fold. Instants are UTC seconds; comments give the wall times.
final class FirePreviewTests: XCTestCase {
    private func task(_ schedule: TaskSchedule, name: String = "t", jitter: Duration = .zero) -> TaskSettings {
        var settings = TaskSettings(name: name, schedule: schedule, job: JobSettings(command: .arguments(["/bin/true"])))
        settings.jitter = jitter
        return settings
    }

    private func cron(_ text: String, zone: String?) throws -> TaskSchedule {
        .cron(try CronExpression(parsing: text), timezone: zone)
    }

    private func at(_ seconds: Int64) -> WallTime { WallTime(secondsSinceEpoch: seconds, nanoseconds: 0) }

    private func fromFile(_ settings: TaskSettings, zone: TimeZoneRules?, now: Int64, count: Int) -> FirePreview.Preview {
        var start = FirePreview.Start.fromFile(settings, clusterConfigured: false, now: at(now))
        if let zone { start.zone = zone }
        return FirePreview.preview(start, count: count)
    }

    func testCronInUTC_listsTheExpressionsFiresWithoutMarks() throws {
        // Thu 2026-11-26 12:00 UTC; weekdays at 09:00.
        let preview = fromFile(task(try cron("0 9 * * 1-5", zone: "UTC")), zone: nil, now: 1_795_694_400, count: 3)
        XCTAssertEqual(preview.schedule, "cron 0 9 * * 1-5")
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_795_770_000, 1_796_029_200, 1_796_115_600])  // Fri, Mon, Tue
        XCTAssertEqual(preview.fires.map(\.mark), [nil, nil, nil])
        let first = preview.dumpValue["fires"]?.arrayValue?.first
        XCTAssertEqual(first?["local"], .string("2026-11-27 09:00:00"))
        XCTAssertEqual(first?["weekday"], .string("Fri"))
        XCTAssertEqual(first?["abbreviation"], .string("UTC"))
        XCTAssertEqual(first?["utc_offset"], .string("+00:00"))
        XCTAssertEqual(first?["utc"], .string("2026-11-27T09:00:00.000Z"))
        XCTAssertEqual(preview.notes, [])
    }

    // Spring forward 2026-03-29 01:00 UTC: 02:00 CET becomes 03:00 CEST.

    func testBerlinSpringGap_theFireStandingInForASkippedTime_isMarkedMoved() throws {
        let berlin = try zone("Europe/Berlin")
        let expression = try CronExpression(parsing: "30 2 * * *")
        let preview = fromFile(task(.cron(expression, timezone: "Europe/Berlin")), zone: berlin, now: 1_774_612_800, count: 3)
        // The scheduler's own fires, not a copy of its rules.
        var scheduler: [Int64] = []
        var cursor: Int64 = 1_774_612_800
        for _ in 0..<3 {
            cursor = try XCTUnwrap(expression.nextFire(after: cursor, in: berlin))
            scheduler.append(cursor)
        }
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), scheduler)
        XCTAssertEqual(scheduler[1], 1_774_746_000)  // Sun 03-29 03:00 CEST, the gap's end
        XCTAssertNil(preview.fires[0].mark)
        XCTAssertEqual(preview.fires[1].mark?.text, "moved: 02:30 does not exist on this day (the clocks jump from 02:00 to 03:00)")
        XCTAssertNil(preview.fires[2].mark)
        let moved = preview.dumpValue["fires"]?.arrayValue?[1]
        XCTAssertEqual(moved?["local"], .string("2026-03-29 03:00:00"))
        XCTAssertEqual(moved?["abbreviation"], .string("CEST"))
        XCTAssertEqual(moved?["utc_offset"], .string("+02:00"))
        XCTAssertEqual(moved?["mark"]?["kind"], .string("moved"))
    }

    func testBerlinSpringGap_timesTheScheduleNamesAfterTheJump_areNotMarked() throws {
        let berlin = try zone("Europe/Berlin")
        // 03:00 CEST is the same instant as the moved 02:30, but named by `0 3`.
        let three = fromFile(task(try cron("0 3 * * *", zone: "Europe/Berlin")), zone: berlin, now: 1_774_742_400, count: 1)
        XCTAssertEqual(three.fires.map(\.at.secondsSinceEpoch), [1_774_746_000])
        XCTAssertNil(three.fires[0].mark)
        // Interval expressions skip the gap's times and go on at 03:00: nothing was moved.
        let halfHourly = fromFile(task(try cron("*/30 * * * *", zone: "Europe/Berlin")), zone: berlin, now: 1_774_742_400, count: 3)
        XCTAssertEqual(halfHourly.fires.map(\.at.secondsSinceEpoch), [1_774_744_200, 1_774_746_000, 1_774_747_800])
        XCTAssertEqual(halfHourly.fires.map(\.mark), [nil, nil, nil])
    }

    func testAJumpOverAWholeDay_namesTheDatesItJumpsBetween() throws {
        // Samoa moved across the date line: 2011-12-29 23:59:59 (-10) was followed by
        // 2011-12-31 00:00:00 (+14); December 30 did not happen there.
        let apia = try zone("Pacific/Apia")
        let preview = fromFile(task(try cron("0 12 * * *", zone: "Pacific/Apia")), zone: apia, now: 1_325_160_000, count: 3)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_325_196_000, 1_325_239_200, 1_325_282_400])
        XCTAssertEqual(preview.fires.map { $0.mark?.text }, [
            nil,  // 12-29 12:00 -10
            "moved: 12:00 does not exist on this day (the clocks jump from 2011-12-30 00:00 to 2011-12-31 00:00)",  // at the jump
            nil,  // 12-31 12:00 +14
        ])
    }

    // Fall back 2026-10-25 01:00 UTC: 03:00 CEST becomes 02:00 CET, 02:00-02:59 happen twice.

    func testBerlinAutumnFold_aDailyTimeFiresAtTheFirstOccurrenceOnly_andSaysSo() throws {
        let berlin = try zone("Europe/Berlin")
        let preview = fromFile(task(try cron("30 2 * * *", zone: "Europe/Berlin")), zone: berlin, now: 1_792_843_200, count: 2)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_792_888_200, 1_792_978_200])  // 10-25 02:30 CEST, 10-26 02:30 CET
        XCTAssertEqual(preview.fires[0].mark?.text,
                       "repeated: 02:30 occurs twice on this day (CEST, then CET); this is the first, the second does not fire")
        XCTAssertNil(preview.fires[1].mark)
    }

    func testBerlinAutumnFold_anIntervalFiresAtBothOccurrences_eachMarked() throws {
        let berlin = try zone("Europe/Berlin")
        let preview = fromFile(task(try cron("*/30 * * * *", zone: "Europe/Berlin")), zone: berlin, now: 1_792_885_500, count: 5)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_792_886_400, 1_792_888_200, 1_792_890_000, 1_792_891_800, 1_792_893_600])
        XCTAssertEqual(preview.fires[0].mark?.text,
                       "repeated: 02:00 occurs twice on this day (CEST, then CET); this is the first, the second fires too")
        XCTAssertEqual(preview.fires[2].mark?.text,
                       "repeated: 02:00 occurs twice on this day (CEST, then CET); this is the second, the first fired too")
        XCTAssertNil(preview.fires[4].mark)  // 03:00 CET happens once
        XCTAssertEqual(preview.dumpValue["fires"]?.arrayValue?[2]["abbreviation"], .string("CET"))
    }

    private func calendar(_ text: String, zone: String?) throws -> TaskSchedule {
        .calendar([try CalendarEvent(parsing: text)], timezone: zone)
    }

    func testBerlinAutumnFold_aCalendarTimeFiresAtTheFirstOccurrence_andSaysTheSecondDoesNot() throws {
        let berlin = try zone("Europe/Berlin")
        let preview = fromFile(task(try calendar("*-*-* 02:30", zone: "Europe/Berlin")), zone: berlin, now: 1_792_843_200, count: 2)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_792_888_200, 1_792_978_200])  // 10-25 02:30 CEST, 10-26 02:30 CET
        XCTAssertEqual(preview.fires[0].mark?.text,
                       "repeated: 02:30 occurs twice on this day (CEST, then CET); this is the first, the second does not fire")
    }

    func testBerlinAutumnFold_aCalendarIntervalWalksTheRepeatedHourOnce_andSaysSo() throws {
        // systemd does not walk 02:00-02:59 a second time: 02:00 and 02:30 CEST, then 03:00 CET.
        let berlin = try zone("Europe/Berlin")
        let preview = fromFile(task(try calendar("*:0/30", zone: "Europe/Berlin")), zone: berlin, now: 1_792_885_500, count: 3)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_792_886_400, 1_792_888_200, 1_792_893_600])
        XCTAssertEqual(preview.fires[0].mark?.text,
                       "repeated: 02:00 occurs twice on this day (CEST, then CET); this is the first, the second does not fire")
        XCTAssertEqual(preview.fires[1].mark?.text,
                       "repeated: 02:30 occurs twice on this day (CEST, then CET); this is the first, the second does not fire")
        XCTAssertNil(preview.fires[2].mark)
    }

    func testFrom_startsTheWalkAtThatInstant_fromAFileOrTheDaemon() throws {
        let berlin = try zone("Europe/Berlin")
        let settings = task(try calendar("*-*-* 02:30", zone: "Europe/Berlin"))
        // From 2027-10-30 12:00 UTC: next year's fall-back night first.
        var start = FirePreview.Start.fromFile(settings, clusterConfigured: false, now: at(1_792_843_200))
        start.from = at(1_824_897_600)
        let fromFile = FirePreview.preview(start, count: 2)
        XCTAssertEqual(fromFile.fires.map(\.at.secondsSinceEpoch), [1_824_942_600, 1_825_032_600])
        XCTAssertEqual(fromFile.fires[0].mark?.kind, "repeated")
        // The daemon's armed fire does not matter then.
        var daemon = FirePreview.Start(settings: settings, zone: berlin, origin: .daemon(armed: at(1_792_888_200)), now: at(1_792_843_200),
                                       jitterOffset: .zero, epochAligned: false)
        daemon.from = at(1_824_897_600)
        XCTAssertEqual(FirePreview.preview(daemon, count: 2).fires.map(\.at.secondsSinceEpoch), [1_824_942_600, 1_825_032_600])
        // `every` from the daemon keeps its anchor: whole intervals from the armed fire.
        var every = FirePreview.Start(settings: task(.every(.seconds(3_600))), zone: .utc, origin: .daemon(armed: at(1_795_694_401)),
                                      now: at(1_795_694_400), jitterOffset: .zero, epochAligned: false)
        every.from = at(1_795_694_401 + 10 * 3_600 - 5)
        XCTAssertEqual(FirePreview.preview(every, count: 2).fires.map(\.at.secondsSinceEpoch), [1_795_694_401 + 36_000, 1_795_694_401 + 39_600])
        // From a file it counts from that instant, as from now.
        var everyFile = FirePreview.Start.fromFile(task(.every(.seconds(3_600))), clusterConfigured: false, now: at(1_795_694_400))
        everyFile.from = at(1_824_897_600)
        XCTAssertEqual(FirePreview.preview(everyFile, count: 1).fires.map(\.at.secondsSinceEpoch), [1_824_901_200])
    }

    func testFromTheDaemon_cronStartsAtTheArmedFire_andIncludesTheJitterDelay() throws {
        let berlin = try zone("Europe/Berlin")
        let settings = task(try cron("30 2 * * *", zone: "Europe/Berlin"), jitter: .seconds(300))
        // Armed for 03-29 (the moved fire) plus this machine's delay of 2m.
        let start = FirePreview.Start(settings: settings, zone: berlin, origin: .daemon(armed: at(1_774_746_000 + 120)),
                                      now: at(1_774_742_400), jitterOffset: .seconds(120), epochAligned: false)
        let preview = FirePreview.preview(start, count: 2)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_774_746_120, 1_774_830_720])
        XCTAssertEqual(preview.fires[0].mark?.kind, "moved")  // judged on the schedule's instant, not the delayed one
        XCTAssertEqual(preview.notes, ["jitter = 5m: the times include this task's delay of 2m on this machine"])
    }

    func testEveryFromAFile_countsFromNow_andSaysSo() {
        let preview = fromFile(task(.every(.seconds(3_600))), zone: .utc, now: 1_795_694_400, count: 3)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_795_698_000, 1_795_701_600, 1_795_705_200])
        XCTAssertTrue(preview.notes.contains { $0.hasPrefix("from now, anchored at start") }, "\(preview.notes)")
        XCTAssertEqual(preview.fires.map(\.mark), [nil, nil, nil])
    }

    func testEveryWithJitterFromAFile_saysFiresComeUpToTheJitterLater() {
        let preview = fromFile(task(.every(.seconds(3_600)), jitter: .seconds(600)), zone: .utc, now: 1_795_694_400, count: 1)
        XCTAssertTrue(preview.notes.contains("jitter = 10m: each fire starts up to 10m after the time shown (a fixed delay for this task on each machine)"),
                      "\(preview.notes)")
    }

    func testEveryFromTheDaemon_continuesFromItsArmedFireByWholeIntervals() {
        let armed = WallTime(secondsSinceEpoch: 1_795_694_401, nanoseconds: 250_000_000)
        let start = FirePreview.Start(settings: task(.every(.milliseconds(1_500))), zone: .utc, origin: .daemon(armed: armed),
                                      now: at(1_795_694_400), jitterOffset: .zero, epochAligned: false)
        let preview = FirePreview.preview(start, count: 3)
        XCTAssertEqual(preview.fires.map(\.at), [armed, armed.adding(nanoseconds: 1_500_000_000), armed.adding(nanoseconds: 3_000_000_000)])
        XCTAssertEqual(preview.dumpValue["fires"]?.arrayValue?[1]["local"], .string("2026-11-26 12:00:02.750"))
    }

    func testFleetEveryFromAFile_isAlignedToTheEpoch() {
        var settings = task(.every(.seconds(600)), name: "sweep")
        settings.fleet = .one
        let preview = FirePreview.preview(.fromFile(settings, clusterConfigured: true, now: at(1_795_694_401)), count: 2)
        XCTAssertEqual(preview.fires.map(\.at.secondsSinceEpoch), [1_795_695_000, 1_795_695_600])
    }

    func testManual_hasNoFires_andSaysItFiresOnlyWhenTriggered() {
        var settings = task(.manual)
        settings.runOnStart = true
        let preview = fromFile(settings, zone: .utc, now: 1_795_694_400, count: 5)
        XCTAssertEqual(preview.fires, [])
        XCTAssertEqual(preview.notes, ["manual: fires only when triggered (watchkeeper trigger)", "run_on_start: also runs once when watchkeeper starts"])
    }

    func testCount_isBoundedByTheMaximum() throws {
        let preview = fromFile(task(try cron("* * * * *", zone: "UTC")), zone: nil, now: 1_795_694_400, count: 50_000)
        XCTAssertEqual(preview.fires.count, FirePreview.maximumCount)
        XCTAssertEqual(preview.fires.last?.at.secondsSinceEpoch, 1_795_694_400 + 60 * Int64(FirePreview.maximumCount))
    }

    // MARK: From a running scheduler

    func testFromTheScheduler_theFirstFireIsTheArmedOne_jitterIncluded_andUnknownNamesAreRefused() throws {
        let queue = SubsystemQueue(name: "test.tasks.\(UUIDLess.next())")
        let context = JobContext(queue: queue, sink: LogSink(target: .stderr, level: .warning, problemCapacity: 10), logger: Logger(label: "test"),
                                 sources: SourceRegistry(), daemonEnvironment: ["PATH": "/usr/bin:/bin"])
        let scheduler = TaskScheduler(engine: JobEngine(context: context, maxJobs: 2))
        let expression = try CronExpression(parsing: "30 2 * * *")
        let nightly = task(.cron(expression, timezone: "Europe/Berlin"), name: "nightly", jitter: .seconds(3_600))
        let hourly = task(.every(.seconds(3_600)), name: "hourly")
        let directory = try makeScratchDirectory()
        let (starts, armed, unknown) = queue.queue.sync {
            scheduler.apply([nightly, hourly], isStart: true, stateDirectory: directory)
            defer { scheduler.stop() }
            return (try? scheduler.previewStarts([]).get(), scheduler.tasks["nightly"]?.nextFire?.wall, scheduler.previewStarts(["hourly", "nope"]))
        }
        XCTAssertEqual(unknown.map(\.count), .failure(.unknownTask("nope")))
        let both = try XCTUnwrap(starts)
        XCTAssertEqual(both.map(\.settings.name), ["nightly", "hourly"])
        let preview = FirePreview.preview(both[0], count: 2)
        XCTAssertEqual(preview.fires.first?.at, try XCTUnwrap(armed))
        // The schedule's instant plus this machine's delay, the same for the next fire.
        let offset = try XCTUnwrap(both[0].jitterOffset).nanosecondsClamped
        let berlin = try zone("Europe/Berlin")
        let schedulesFirst = try XCTUnwrap(expression.nextFire(after: both[0].now.secondsSinceEpoch, in: berlin))
        XCTAssertEqual(preview.fires.map(\.at), [
            WallTime(secondsSinceEpoch: schedulesFirst, nanoseconds: 0).adding(nanoseconds: offset),
            WallTime(secondsSinceEpoch: try XCTUnwrap(expression.nextFire(after: schedulesFirst, in: berlin)), nanoseconds: 0).adding(nanoseconds: offset),
        ])
        XCTAssertTrue(preview.notes.contains { $0.hasPrefix("jitter = 1h: the times include this task's delay of ") && $0.hasSuffix(" on this machine") },
                      "\(preview.notes)")
        XCTAssertTrue(FirePreview.preview(both[1], count: 1).notes.contains { $0.hasPrefix("from the daemon's anchor") })
    }

    func testView_rendersOneLinePerFire_withTheMark() throws {
        let berlin = try zone("Europe/Berlin")
        let preview = fromFile(task(try cron("30 2 * * *", zone: "Europe/Berlin"), name: "night\nly"), zone: berlin, now: 1_774_700_000, count: 2)
        XCTAssertEqual(FirePreviewView.render([preview.dumpValue]), [
            "night\\nly: cron 30 2 * * *, zone Europe/Berlin",
            "  Sun 2026-03-29 03:00:00 CEST +02:00  2026-03-29T01:00:00.000Z  moved: 02:30 does not exist on this day (the clocks jump from 02:00 to 03:00)",
            "  Mon 2026-03-30 02:30:00 CEST +02:00  2026-03-30T00:30:00.000Z",
        ])
    }
}
