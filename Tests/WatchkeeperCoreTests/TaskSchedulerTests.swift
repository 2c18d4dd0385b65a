import Dispatch
import Logging
import XCTest

@testable import WatchkeeperCore

/// The scheduler driven in-process, with real child processes: the manual-trigger
/// entry point the control interface will call.
final class TaskSchedulerTests: XCTestCase {
    private func makeScheduler() -> (TaskScheduler, SubsystemQueue) {
        let queue = SubsystemQueue(name: "test.tasks.\(UUIDLess.next())")
        let sink = LogSink(target: .stderr, level: .warning, problemCapacity: 10)
        let context = JobContext(queue: queue, sink: sink, logger: Logger(label: "test"), sources: SourceRegistry(),
                                 daemonEnvironment: ["PATH": "/usr/bin:/bin"])
        return (TaskScheduler(context: context, work: WorkTracker(), maxJobs: 2), queue)
    }

    private func manualTask(_ name: String, _ command: [String], overlap: OverlapPolicy = .skip) -> TaskSettings {
        var task = TaskSettings(name: name, schedule: .manual, job: JobSettings(command: .arguments(command)))
        task.overlap = overlap
        return task
    }

    private func lastOutcome(_ scheduler: TaskScheduler, queue: SubsystemQueue, task: String, timeout: TimeInterval) -> String? {
        let deadline = DispatchTime.now() + timeout
        while DispatchTime.now() < deadline {
            let dump = queue.queue.sync { scheduler.describeForDump() }
            if case .array(let tasks)? = dump["tasks"],
               let entry = tasks.first(where: { $0["name"] == .string(task) }),
               case .array(let runs)? = entry["last_runs"], let run = runs.first,
               case .string(let outcome)? = run["outcome"] {
                return outcome
            }
            usleep(20_000)
        }
        return nil
    }

    func testTrigger_runsAManualTaskNow_andRecordsItsOutcome() {
        let (scheduler, queue) = makeScheduler()
        let result = queue.queue.sync { () -> Result<String, TaskScheduler.TriggerError> in
            scheduler.apply([manualTask("by-hand", ["/bin/true"])], maxJobs: 2, isStart: true, stateDirectory: "/tmp/wk-scheduler-tests-\(getpid())")
            return scheduler.trigger(task: "by-hand")
        }
        guard case .success(let runID) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(runID.count, 16)
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "by-hand", timeout: 10), "ok")
    }

    func testTrigger_ofAnUnknownTask_saysSo() {
        let (scheduler, queue) = makeScheduler()
        let result = queue.queue.sync { () -> Result<String, TaskScheduler.TriggerError> in
            scheduler.apply([], maxJobs: 2, isStart: true, stateDirectory: "/tmp/wk-scheduler-tests-\(getpid())")
            return scheduler.trigger(task: "nope")
        }
        XCTAssertEqual(result, .failure(.unknownTask("nope")))
        XCTAssertEqual(TaskScheduler.TriggerError.unknownTask("nope").description, "unable to run task nope: no such task")
    }

    func testTrigger_whileARunIsInProgressWithOverlapSkip_isRefused() {
        let (scheduler, queue) = makeScheduler()
        let (first, second) = queue.queue.sync { () -> (Result<String, TaskScheduler.TriggerError>, Result<String, TaskScheduler.TriggerError>) in
            scheduler.apply([manualTask("slow", ["/bin/sleep", "0.5"])], maxJobs: 2, isStart: true, stateDirectory: "/tmp/wk-scheduler-tests-\(getpid())")
            return (scheduler.trigger(task: "slow"), scheduler.trigger(task: "slow"))
        }
        guard case .success = first else { return XCTFail("\(first)") }
        XCTAssertEqual(second, .failure(.notStarted("slow", policy: .skip)))
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "slow", timeout: 10), "ok")
    }

    func testTrigger_ofAFailingCommand_recordsFailed() {
        let (scheduler, queue) = makeScheduler()
        _ = queue.queue.sync { () -> Result<String, TaskScheduler.TriggerError> in
            scheduler.apply([manualTask("fails", ["/bin/false"]), manualTask("missing", ["/no/such/program"])], maxJobs: 2, isStart: true, stateDirectory: "/tmp/wk-scheduler-tests-\(getpid())")
            _ = scheduler.trigger(task: "missing")
            return scheduler.trigger(task: "fails")
        }
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "fails", timeout: 10), "failed")
        XCTAssertEqual(lastOutcome(scheduler, queue: queue, task: "missing", timeout: 10), "failed")
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
