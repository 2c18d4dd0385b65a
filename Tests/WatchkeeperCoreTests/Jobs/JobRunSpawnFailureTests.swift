import CWatchkeeperSpawn
import Dispatch
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A job whose setup or exec fails in the child ends as a spawn that failed: outcome
/// failed, no exit status, the step and its object in the record's detail, retried like any
/// failed run. A job that others wait behind is cloned without waiting for its exec
/// (nowait.c), so its failure is learnt at the child's exit; the record must not show it (no
/// "exit 127") and must be the one a lone job's spawn, which still waits, gives.
final class JobRunSpawnFailureTests: JobTestCase {
    /// `group`'s job `count` times behind one that holds the engine's only slot: each but
    /// the last starts with another waiting behind it (cloned without waiting), the last
    /// alone (the clone waits for its exec).
    private func runBehindABlocker(_ group: JobGroup, count: Int, into done: Arrivals<JobCompletion>) -> JobEngine {
        let engine = makeEngine(maxJobs: 1)
        let blocker = shellGroup(JobKey(.task, "blocker"), "sleep 0.2")
        engine.queue.queue.sync {
            engine.configure(blocker)
            engine.configure(group)
            engine.submit(blocker.key, subject: .schedule(scheduledAt: nil)) { _ in }
            for _ in 0..<count {
                engine.submit(group.key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            }
        }
        return engine
    }

    func testAMissingWorkingDirectory_failsTheRun_withTheChdirInItsRecord_andNoExitStatus_eitherWay() throws {
        let missing = try makeScratchDirectory() + "/missing"
        let done = Arrivals<JobCompletion>()
        let clonedBefore = wk_spawn_nowait_total()
        _ = runBehindABlocker(shellGroup(JobKey(.task, "nowhere"), "exit 0") { $0.workingDirectory = missing }, count: 3, into: done)
        XCTAssertTrue(done.wait(3), "not every run got its record")
        XCTAssertGreaterThanOrEqual(wk_spawn_nowait_total() - clonedBefore, 2, "the runs with others behind them waited for their exec")
        for record in done.all.map(\.final) {
            XCTAssertEqual(record.outcome, .failed)
            XCTAssertNil(record.exit, "a spawn that failed has no exit status")
            XCTAssertNil(record.expiry)
            XCTAssertNotNil(record.startedAt)
            XCTAssertEqual(record.detail, "unable to run \"/bin/sh\": chdir \(missing): No such file or directory")
        }
    }

    /// Each attempt fails in its execve, and each is retried under the group's policy.
    func testAProgramThatCannotBeExecuted_failsEveryAttempt_withTheExecveInEachRecord() throws {
        let program = try makeScratchDirectory() + "/not-executable"
        XCTAssertTrue(FileManager.default.createFile(atPath: program, contents: Data("#!/bin/sh\nexit 0\n".utf8), attributes: [.posixPermissions: 0o644]))
        let done = Arrivals<JobCompletion>()
        var group = JobGroup(key: JobKey(.task, "unrunnable"), settings: JobSettings(command: .arguments([program])), limit: 10,
                             retry: RetryPolicy(attempts: 3, backoff: .milliseconds(10), maxBackoff: .milliseconds(20)), retryExpired: false)
        group.settings.budget = .seconds(30)
        let clonedBefore = wk_spawn_nowait_total()
        _ = runBehindABlocker(group, count: 2, into: done)
        XCTAssertTrue(done.wait(2), "not every run got its records")
        XCTAssertGreaterThanOrEqual(wk_spawn_nowait_total() - clonedBefore, 1, "the run with another behind it waited for its exec")
        for records in done.all.map(\.records) {
            XCTAssertEqual(records.map(\.outcome), [.failed, .failed, .failed])
            XCTAssertEqual(records.map(\.attempt), [1, 2, 3])
            XCTAssertEqual(records.map { $0.exit == nil }, [true, true, true])
            XCTAssertEqual(Set(records.compactMap(\.detail)), ["unable to run \"\(program)\": execve \(program): Permission denied"])
        }
    }

    private static let shortage = SpawnError(step: .dup, errorNumber: EMFILE, description: "unable to run \"/bin/sh\": dup2: Too many open files")

    /// A job that marks each start in `marks`, running once this returns.
    private func startMarkingJob(into done: Arrivals<JobCompletion>) throws -> (JobEngine, marks: String) {
        let marks = try makeScratchDirectory() + "/runs"
        let engine = makeEngine()
        let group = shellGroup(JobKey(.task, "short"), "echo run >> \(marks); sleep 0.3")
        engine.queue.queue.sync {
            engine.configure(group)
            engine.submit(group.key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        XCTAssertTrue(waitFor(10) { (try? String(contentsOfFile: marks, encoding: .utf8)) == "run\n" }, "the first run never started")
        return (engine, marks)
    }

    /// A child short of descriptors (EMFILE in its setup, learnt at its exit): as when the
    /// spawn throws it, nothing is recorded and the job goes back in line, then runs once
    /// the hold lets it; the started count is taken back. Driven through `spawnFailed`, as
    /// a child cannot be made to run out of descriptors the daemon still has.
    func testAChildShortOfDescriptors_putsItsJobBackInLine_withoutARecord() throws {
        let done = Arrivals<JobCompletion>()
        let (engine, marks) = try startMarkingJob(into: done)
        let (waiting, started) = engine.queue.queue.sync { () -> (Int, UInt64) in
            engine.activeRuns.first?.run?.spawnFailed(Self.shortage)
            return (engine.waitingCount, engine.startedTotal)
        }
        XCTAssertEqual(waiting, 1, "the job was not put back in line")
        XCTAssertEqual(started, 0, "a job that never ran was counted as started")
        XCTAssertTrue(done.wait(), "the job put back never ran again")
        let records = try XCTUnwrap(done.first?.records)
        XCTAssertEqual(records.map(\.outcome), [.ok], "the first start left a record")
        XCTAssertEqual(records.first?.attempt, 1)
        XCTAssertEqual(try String(contentsOfFile: marks, encoding: .utf8), "run\nrun\n")
        XCTAssertEqual(engine.queue.queue.sync { engine.startedTotal }, 1)
        XCTAssertFalse(done.wait(2, timeout: 1), "the first run's end was recorded too")
    }

    /// The same, after the engine stopped accepting (the daemon is stopping): nothing would
    /// start it again, so it gets the record the waiting jobs got instead of none.
    func testAChildShortOfDescriptors_whileTheDaemonStops_isCancelledWithARecord() throws {
        let done = Arrivals<JobCompletion>()
        let (engine, _) = try startMarkingJob(into: done)
        let waiting = engine.queue.queue.sync { () -> Int in
            engine.stopAccepting()
            engine.activeRuns.first?.run?.spawnFailed(Self.shortage)
            return engine.waitingCount
        }
        XCTAssertEqual(waiting, 0, "put back in a line nothing starts any more")
        XCTAssertTrue(done.wait(), "no record")
        XCTAssertEqual(done.first?.final.outcome, .cancelled)
        XCTAssertEqual(done.first?.final.detail, "cancelled: the daemon is stopping")
    }
}
