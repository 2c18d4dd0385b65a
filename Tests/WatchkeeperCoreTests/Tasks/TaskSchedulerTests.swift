import Dispatch
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The scheduler driven in-process, with real child processes: the manual-trigger
/// entry point the control interface will call.
final class TaskSchedulerTests: XCTestCase {
    /// Where the scheduler keeps its task state; removed after each test.
    private var stateDirectory = ""

    override func setUpWithError() throws {
        stateDirectory = try makeScratchDirectory()
    }

    private func makeScheduler(maxJobs: Int = 2) -> (TaskScheduler, SubsystemQueue) {
        let queue = SubsystemQueue(name: "test.tasks.\(UUIDLess.next())")
        let sink = LogSink(target: .stderr, level: .warning, problemCapacity: 10)
        let context = JobContext(queue: queue, sink: sink, logger: Logger(label: "test"), sources: SourceRegistry(),
                                 daemonEnvironment: ["PATH": "/usr/bin:/bin"])
        return (TaskScheduler(engine: JobEngine(context: context, maxJobs: maxJobs)), queue)
    }

    private func manualTask(_ name: String, _ command: [String], overlap: OverlapPolicy = .skip) -> TaskSettings {
        var task = TaskSettings(name: name, schedule: .manual, job: JobSettings(command: .arguments(command)))
        task.overlap = overlap
        return task
    }

    private func lastOutcome(_ scheduler: TaskScheduler, queue: SubsystemQueue, task: String, timeout: TimeInterval) -> String? {
        waitForValue(timeout) {
            let dump = queue.queue.sync { scheduler.describeForDump() }
            guard case .array(let tasks)? = dump["tasks"],
                  let entry = tasks.first(where: { $0["name"] == .string(task) }),
                  case .array(let runs)? = entry["last_runs"], let run = runs.first,
                  case .string(let outcome)? = run["outcome"] else { return nil }
            return outcome
        }
    }

    func testTrigger_runsAManualTaskNow_andRecordsItsOutcome() {
        let (scheduler, queue) = makeScheduler()
        let result = queue.queue.sync { () -> Result<String, TaskScheduler.TriggerError> in
            scheduler.apply([manualTask("by-hand", ["/bin/true"])], isStart: true, stateDirectory: stateDirectory)
            return scheduler.trigger(task: "by-hand")
        }
        guard case .success(let runID) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(runID.count, 16)
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "by-hand", timeout: 10), "ok")
    }

    func testTrigger_ofAnUnknownTask_saysSo() {
        let (scheduler, queue) = makeScheduler()
        let result = queue.queue.sync { () -> Result<String, TaskScheduler.TriggerError> in
            scheduler.apply([], isStart: true, stateDirectory: stateDirectory)
            return scheduler.trigger(task: "nope")
        }
        XCTAssertEqual(result, .failure(.unknownTask("nope")))
        XCTAssertEqual(TaskScheduler.TriggerError.unknownTask("nope").description, "unable to run task nope: no such task")
    }

    func testTrigger_whileARunIsInProgressWithOverlapSkip_isRefused() {
        let (scheduler, queue) = makeScheduler()
        let (first, second) = queue.queue.sync { () -> (Result<String, TaskScheduler.TriggerError>, Result<String, TaskScheduler.TriggerError>) in
            scheduler.apply([manualTask("slow", ["/bin/sleep", "0.5"])], isStart: true, stateDirectory: stateDirectory)
            return (scheduler.trigger(task: "slow"), scheduler.trigger(task: "slow"))
        }
        guard case .success = first else { return XCTFail("\(first)") }
        XCTAssertEqual(second, .failure(.notStarted("slow", policy: .skip)))
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "slow", timeout: 10), "ok")
    }

    func testTrigger_ofAFailingCommand_recordsFailed() {
        let (scheduler, queue) = makeScheduler()
        _ = queue.queue.sync { () -> Result<String, TaskScheduler.TriggerError> in
            scheduler.apply([manualTask("fails", ["/bin/false"]), manualTask("missing", ["/no/such/program"])], isStart: true, stateDirectory: stateDirectory)
            _ = scheduler.trigger(task: "missing")
            return scheduler.trigger(task: "fails")
        }
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "fails", timeout: 10), "failed")
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "missing", timeout: 10), "failed")
    }
}

extension TaskSchedulerTests {
    func testCancel_ofARunWaitingForASlot_recordsCancelled_andItNeverRuns() throws {
        let (scheduler, queue) = makeScheduler(maxJobs: 1)
        let marker = stateDirectory + "/later-ran"
        unlink(marker)
        let (cancelled, cancelledAgain) = queue.queue.sync { () -> (Bool, Bool) in
            scheduler.apply([manualTask("slow", ["/bin/sleep", "0.3"]), manualTask("later", ["/usr/bin/touch", marker])],
                            isStart: true, stateDirectory: stateDirectory)
            _ = scheduler.trigger(task: "slow")
            guard case .success(let waiting) = scheduler.trigger(task: "later") else { return (false, false) }
            return (scheduler.cancel(runID: waiting), scheduler.cancel(runID: waiting))
        }
        XCTAssertTrue(cancelled)
        XCTAssertFalse(cancelledAgain, "a run is cancelled once")
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "later", timeout: 5), "cancelled")
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "slow", timeout: 5), "ok")
        XCTAssertNotEqual(access(marker, F_OK), 0, "the cancelled run must never start")
    }

    func testCancel_ofARunningJob_isRefused() {
        let (scheduler, queue) = makeScheduler(maxJobs: 1)
        let refused = queue.queue.sync { () -> Bool in
            scheduler.apply([manualTask("slow", ["/bin/sleep", "0.2"])], isStart: true,
                            stateDirectory: stateDirectory)
            guard case .success(let running) = scheduler.trigger(task: "slow") else { return false }
            return !scheduler.cancel(runID: running)
        }
        XCTAssertTrue(refused)
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "slow", timeout: 5), "ok")
    }
}

/// Distinct queue labels without Foundation's UUID.
enum UUIDLess {
    nonisolated(unsafe) static var counter = 0
    static func next() -> Int {
        counter += 1
        return counter
    }
}
