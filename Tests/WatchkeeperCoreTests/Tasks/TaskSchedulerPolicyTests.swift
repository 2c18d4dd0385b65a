import Dispatch
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// An engine that runs nothing: it keeps what was submitted until the test ends it with
/// `finish`, so the scheduler's overlap and `after` rules are checked one completion at a
/// time, with no processes and no clock.
private final class FakeTaskEngine: TaskEngine {
    struct Submission {
        let key: JobKey
        let subject: JobSubject
        let runID: RunID
        let completion: (JobCompletion) -> Void
    }

    let queue: SubsystemQueue
    let context: JobContext
    var groups: [JobKey: JobGroup] = [:]
    var removed: [JobKey] = []
    /// Every submission, in order; `active` holds those not finished yet.
    var submitted: [Submission] = []
    var active: [Submission] = []
    var notRun: [RunRecord] = []
    var expired: [(JobKey, ExpiryReason)] = []

    init() {
        queue = SubsystemQueue(name: "test.fake-engine.\(UUIDLess.next())")
        context = JobContext(queue: queue, sink: LogSink(target: .stderr, level: .warning, problemCapacity: 10),
                             logger: Logger(label: "test"), sources: SourceRegistry(), daemonEnvironment: [:])
    }

    func configure(_ group: JobGroup) { groups[group.key] = group }
    func remove(_ key: JobKey, reason: String) { removed.append(key) }

    func submit(_ key: JobKey, subject: JobSubject, runID: RunID?, replyOn: SubsystemQueue?,
                completion: @escaping (JobCompletion) -> Void) -> RunID {
        let submission = Submission(key: key, subject: subject, runID: runID ?? .random(), completion: completion)
        submitted.append(submission)
        active.append(submission)
        return submission.runID
    }

    func recordNotRun(_ record: RunRecord, key: JobKey, subject: JobSubject) { notRun.append(record) }
    /// Everything submitted counts as started here: only held runs can be cancelled.
    func cancel(runID: RunID, detail: String) -> Bool { false }
    func expire(_ key: JobKey, reason: ExpiryReason, by deadline: MonotonicInstant?) { expired.append((key, reason)) }
    func activeCount(of key: JobKey) -> Int { active.filter { $0.key == key }.count }
    func describeRuns(of key: JobKey, now: MonotonicInstant) -> [DumpValue] { [] }

    /// Ends the oldest active run of `task` with `outcome`, as the engine would after its
    /// last attempt.
    func finish(_ task: String, _ outcome: RunOutcome) {
        guard let index = active.firstIndex(where: { $0.key == JobKey(.task, task) }) else {
            return XCTFail("no active run of \(task) to finish")
        }
        let run = active.remove(at: index)
        let record = JobEngine.notRunRecord(run.key, runID: run.runID, subject: run.subject, outcome: outcome, detail: "ended by the test")
        run.completion(JobCompletion(key: run.key, subject: run.subject, records: [record]))
    }

    func submissions(of task: String) -> [Submission] { submitted.filter { $0.key == JobKey(.task, task) } }
}

final class TaskSchedulerPolicyTests: XCTestCase {
    private var engine: FakeTaskEngine!
    private var scheduler: TaskScheduler!
    private var stateDirectory = ""

    override func setUpWithError() throws {
        engine = FakeTaskEngine()
        scheduler = TaskScheduler(engine: engine)
        stateDirectory = try makeScratchDirectory()
    }

    private func task(_ name: String, overlap: OverlapPolicy = .skip, maxConcurrent: Int = 1, after: [String] = []) -> TaskSettings {
        var task = TaskSettings(name: name, schedule: .manual, job: JobSettings(command: .arguments(["/bin/true"])))
        task.overlap = overlap
        task.maxConcurrent = maxConcurrent
        task.after = after
        return task
    }

    /// Everything the scheduler does runs on its queue, as in the daemon.
    private func onQueue<T>(_ body: () throws -> T) rethrows -> T { try engine.queue.queue.sync(execute: body) }

    private func apply(_ tasks: [TaskSettings], isStart: Bool = true) {
        onQueue { scheduler.apply(tasks, isStart: isStart, stateDirectory: stateDirectory) }
    }

    @discardableResult
    private func trigger(_ name: String) -> Result<String, TaskScheduler.TriggerError> {
        onQueue { scheduler.trigger(task: name) }
    }

    private func skipped(_ name: String) -> UInt64 { onQueue { scheduler.tasks[name]?.totals[.skippedOverlap] ?? 0 } }
    private func history(_ name: String) -> [RunRecord] { onQueue { scheduler.tasks[name]?.history ?? [] } }

    // MARK: Overlap

    func testOverlapSkip_whileARunIsActive_skipsAndCountsTheNewRun_andRunsAgainOnceItEnded() {
        apply([task("t")])
        XCTAssertNoThrow(try trigger("t").get())
        XCTAssertEqual(trigger("t"), .failure(.notStarted("t", policy: .skip)))
        XCTAssertEqual(engine.submissions(of: "t").count, 1)
        XCTAssertEqual(skipped("t"), 1)
        onQueue { engine.finish("t", .ok) }
        XCTAssertNoThrow(try trigger("t").get())
        XCTAssertEqual(engine.submissions(of: "t").count, 2)
    }

    func testOverlapQueue_keepsOneRunWaiting_startsItWithItsOwnScheduledTime_andSkipsAThird() {
        apply([task("q", overlap: .queue)])
        XCTAssertNoThrow(try trigger("q").get())
        let due = WallTime(secondsSinceEpoch: 1_700_000_000, nanoseconds: 0)
        onQueue { _ = scheduler.fire(scheduler.tasks["q"]!, scheduledAt: due, reason: "test") }
        XCTAssertEqual(trigger("q"), .failure(.notStarted("q", policy: .queue)), "only one run waits (the one queued above)")
        XCTAssertEqual(engine.submissions(of: "q").count, 1)
        XCTAssertEqual(skipped("q"), 1)
        onQueue { engine.finish("q", .ok) }
        let runs = engine.submissions(of: "q")
        XCTAssertEqual(runs.count, 2, "the waiting run starts when the current one ends")
        XCTAssertEqual(runs.last?.subject.scheduledAt, due)
    }

    /// `watchkeeper trigger` of a task whose run is in progress, with overlap = "queue": the
    /// queued run gets its run ID at once (exit 0), starts under it, and can be cancelled by it.
    func testOverlapQueue_aQueuedTriggerGetsItsRunIDAtOnce_startsUnderIt_andCanBeCancelledByIt() throws {
        apply([task("q", overlap: .queue)])
        XCTAssertNoThrow(try trigger("q").get())
        let queued = try trigger("q").get()
        XCTAssertEqual(engine.submissions(of: "q").count, 1)
        onQueue { engine.finish("q", .ok) }
        XCTAssertEqual(engine.submissions(of: "q").last?.runID.description, queued, "the run starts under the ID the trigger answered with")

        let waiting = try trigger("q").get()
        XCTAssertTrue(onQueue { scheduler.cancel(runID: waiting) })
        XCTAssertEqual(engine.notRun.filter { $0.runID == waiting }.map(\.outcome), [.cancelled])
        onQueue { engine.finish("q", .ok) }
        XCTAssertEqual(engine.submissions(of: "q").count, 2, "a cancelled queued run does not start")
    }

    func testOverlapReplace_expiresTheCurrentRun_andStartsTheNewOneOnlyAfterItEnded() {
        apply([task("r", overlap: .replace)])
        XCTAssertNoThrow(try trigger("r").get())
        _ = trigger("r")
        XCTAssertEqual(engine.expired.map(\.0), [JobKey(.task, "r")])
        XCTAssertEqual(engine.expired.first?.1, .replaced)
        XCTAssertEqual(engine.submissions(of: "r").count, 1, "never two at once")
        onQueue { engine.finish("r", .expired) }
        XCTAssertEqual(engine.submissions(of: "r").count, 2)
    }

    func testOverlapAllow_runsUpToMaxConcurrent_thenSkips_andTellsTheEngineTheLimit() {
        apply([task("a", overlap: .allow, maxConcurrent: 2)])
        XCTAssertEqual(onQueue { engine.groups[JobKey(.task, "a")]?.limit }, 2)
        XCTAssertNoThrow(try trigger("a").get())
        XCTAssertNoThrow(try trigger("a").get())
        XCTAssertEqual(trigger("a"), .failure(.notStarted("a", policy: .allow)))
        XCTAssertEqual(engine.submissions(of: "a").count, 2)
        XCTAssertEqual(skipped("a"), 1)
    }

    func testEveryOtherPolicy_limitsTheGroupToOneJob() {
        apply([task("s"), task("q", overlap: .queue), task("r", overlap: .replace)])
        for name in ["s", "q", "r"] {
            XCTAssertEqual(onQueue { engine.groups[JobKey(.task, name)]?.limit }, 1, name)
        }
    }

    // MARK: after

    func testAfter_holdsARunWhileItsDependencyRuns_andStartsItWithTheSameRunIDWhenItSucceeds() throws {
        apply([task("a"), task("b", after: ["a"])])
        XCTAssertNoThrow(try trigger("a").get())
        let held = try trigger("b").get()
        XCTAssertTrue(engine.submissions(of: "b").isEmpty, "b waits for a")
        XCTAssertEqual(trigger("b"), .failure(.notStarted("b", policy: .skip)), "a held run counts as active")
        onQueue { engine.finish("a", .ok) }
        XCTAssertEqual(engine.submissions(of: "b").map(\.runID.description), [held])
    }

    func testAfter_cancelsTheHeldRun_withARecordNamingTheDependency_whenItFails() throws {
        apply([task("a"), task("b", after: ["a"])])
        _ = trigger("a")
        let held = try trigger("b").get()
        onQueue { engine.finish("a", .failed) }
        XCTAssertTrue(engine.submissions(of: "b").isEmpty)
        let record = try XCTUnwrap(engine.notRun.first { $0.name == "b" })
        XCTAssertEqual(record.runID, held)
        XCTAssertEqual(record.outcome, .cancelled)
        XCTAssertEqual(record.detail, "dependency a did not succeed (failed)")
        XCTAssertEqual(history("b").map(\.outcome), [.cancelled])
    }

    func testAfter_aDependencyThatNeverRan_holdsTheRun_andOneIdleSinceASuccessDoesNot() throws {
        apply([task("a"), task("b", after: ["a"])])
        _ = try trigger("b").get()
        XCTAssertTrue(engine.submissions(of: "b").isEmpty, "a has not succeeded yet")
        _ = trigger("a")
        onQueue { engine.finish("a", .ok) }
        XCTAssertEqual(engine.submissions(of: "b").count, 1, "released by a's success")
        onQueue { engine.finish("b", .ok) }
        _ = try trigger("b").get()
        XCTAssertEqual(engine.submissions(of: "b").count, 2, "a is idle since a success: met at once")
    }

    func testAfter_waitsForEveryDependency() throws {
        apply([task("a"), task("c"), task("b", after: ["a", "c"])])
        _ = trigger("a")
        _ = trigger("c")
        _ = try trigger("b").get()
        onQueue { engine.finish("a", .ok) }
        XCTAssertTrue(engine.submissions(of: "b").isEmpty, "c still runs")
        onQueue { engine.finish("c", .ok) }
        XCTAssertEqual(engine.submissions(of: "b").count, 1)
    }

    // MARK: Held runs end with a record

    func testCancel_ofAHeldRun_recordsItCancelled_once() throws {
        apply([task("a"), task("b", after: ["a"])])
        _ = trigger("a")
        let held = try trigger("b").get()
        XCTAssertTrue(onQueue { scheduler.cancel(runID: held) })
        XCTAssertFalse(onQueue { scheduler.cancel(runID: held) }, "a run is cancelled once")
        XCTAssertEqual(engine.notRun.filter { $0.runID == held }.map(\.outcome), [.cancelled])
        onQueue { engine.finish("a", .ok) }
        XCTAssertTrue(engine.submissions(of: "b").isEmpty, "a cancelled run never starts")
    }

    func testReload_removingATaskWithAHeldRun_recordsItCancelled_andRemovesItsGroup() throws {
        apply([task("a"), task("b", after: ["a"])])
        _ = trigger("a")
        let held = try trigger("b").get()
        apply([task("a")], isStart: false)
        let record = try XCTUnwrap(engine.notRun.first { $0.runID == held })
        XCTAssertEqual(record.outcome, .cancelled)
        XCTAssertEqual(record.detail, "cancelled: the task was removed by a reload")
        XCTAssertEqual(engine.removed, [JobKey(.task, "b")])
        onQueue { engine.finish("a", .ok) }
        XCTAssertTrue(engine.submissions(of: "b").isEmpty)
    }

    func testStop_cancelsHeldRuns_withARecord() throws {
        apply([task("a"), task("b", after: ["a"])])
        _ = trigger("a")
        let held = try trigger("b").get()
        onQueue { scheduler.stop() }
        XCTAssertEqual(engine.notRun.first { $0.runID == held }?.detail, "cancelled: the daemon is stopping")
    }

    func testAChangedTask_isReconfiguredInTheEngine_andAnUnchangedOneIsLeftAlone() {
        apply([task("a"), task("b")])
        let before = onQueue { engine.groups }
        apply([task("a", overlap: .allow, maxConcurrent: 3), task("b")], isStart: false)
        XCTAssertEqual(onQueue { engine.groups[JobKey(.task, "a")]?.limit }, 3)
        XCTAssertEqual(onQueue { engine.groups[JobKey(.task, "b")] }, before[JobKey(.task, "b")])
        XCTAssertTrue(engine.removed.isEmpty)
    }

    // MARK: The system clock set back

    private func cronTask(_ name: String, _ expression: String) throws -> TaskSettings {
        TaskSettings(name: name, schedule: .cron(try CronExpression(parsing: expression), timezone: "UTC"),
                     job: JobSettings(command: .arguments(["/bin/true"])))
    }

    /// As if the task had fired at `instant` and the clock then went back before it.
    private func clockSetBack(after firing: String, at instant: Int64) -> WallTime? {
        onQueue {
            let task = scheduler.tasks[firing]!
            task.lastCronFire = instant
            scheduler.clockWasSet(movedBySeconds: -7_200)
            return task.nextFire?.wall
        }
    }

    func testClockSetBack_aFixedTimeTask_doesNotFireAgainAtAnInstantItFiredAt() throws {
        apply([try cronTask("backup", "0 3 * * *")])
        let now = WallTime.now().secondsSinceEpoch
        let firedAt = try XCTUnwrap(try CronExpression(parsing: "0 3 * * *").nextFire(after: now, in: .utc))
        XCTAssertEqual(clockSetBack(after: "backup", at: firedAt)?.secondsSinceEpoch, firedAt + 86_400,
                       "the 03:00 it already ran is not run again; the next day's is next")
    }

    func testClockSetBack_duringTheDrain_armsNothing() throws {
        apply([try cronTask("poll", "*/5 * * * *")])
        onQueue { scheduler.stop() }
        XCTAssertNil(clockSetBack(after: "poll", at: WallTime.now().secondsSinceEpoch + 7_200))
        XCTAssertNil(onQueue { scheduler.tasks["poll"]?.timer })
    }

    func testClockSetBack_anIntervalTask_goesOnFromTheNewTime() throws {
        apply([try cronTask("poll", "*/5 * * * *")])
        let now = WallTime.now().secondsSinceEpoch
        let next = try XCTUnwrap(clockSetBack(after: "poll", at: now + 7_200)?.secondsSinceEpoch)
        XCTAssertLessThanOrEqual(next, now + 300, "every five minutes from the clock's new time, not two hours later")
        XCTAssertGreaterThan(next, now - 1)
    }
}
