import CWatchkeeperSpawn
import Foundation
import Synchronization
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// A fleet job starts under its lease's fence point (docs/fleet.md): the engine passes the
/// instant the gate gave it to the job's child, which does not exec after it. A daemon
/// stopped between the gate and the spawn (SIGSTOP, then SIGCONT past the instant) must
/// not run the job late, when another host may have taken its claim over.
final class FleetExecDeadlineTests: JobTestCase {
    /// Lets every fleet job start, each to exec before `by`; records each claim's end.
    final class FixedGate: FleetJobStarts, Sendable {
        let by: MonotonicInstant
        let ends = Mutex<[(RunID, Bool)]>([])

        init(by: MonotonicInstant) { self.by = by }

        func beforeStart(_ job: FleetJob, runID: RunID, answered: @escaping @Sendable (FleetStartDecision) -> Void) -> FleetStartDecision {
            guard case .claimed(let hold) = job else { return .start(nil, by: nil) }
            return .start(hold, by: by)
        }

        func ended(_ job: FleetJob, hold: FleetClaimHold, runID: RunID, ok: Bool) {
            ends.withLock { $0.append((runID, ok)) }
        }
    }

    /// Claimed fires of one fleet task through a one-slot engine, each way a job's child is
    /// made: two together (the first starts with the second waiting behind it, so its clone
    /// does not wait for the exec; the second alone, so its clone waits or it takes a child
    /// prepared at the first one's exit), then, once a job of another task has run and the
    /// engine has prepared a child, a third (woken, not cloned).
    /// Each writes a line to the returned file if its program runs.
    private func runClaimedFires(gate: FixedGate, into done: Arrivals<JobCompletion>) throws -> String {
        let marks = try makeScratchDirectory() + "/runs"
        let engine = makeEngine(maxJobs: 1, fleetStarts: gate)
        var group = shellGroup(JobKey(.task, "fleet-task"), "echo ran >> \(marks)")
        group.fleet = true
        group.retry = RetryPolicy(attempts: 3, backoff: .milliseconds(10), maxBackoff: .milliseconds(20))
        func submit(_ revision: Int64) {
            _ = engine.submitClaimed(group.key, subject: .schedule(scheduledAt: nil), runID: .random(),
                                     claim: FleetClaimHold(lease: 7, revision: revision)) { done.add($0) }
        }
        let preparedBefore = wk_spawn_prepared_total()
        engine.queue.queue.sync {
            engine.configure(group)
            submit(1)
            submit(2)
        }
        XCTAssertTrue(done.wait(2), "the first two fires got no record")
        // A child is prepared when a job's child has exited after running its program.
        let warmUp = shellGroup(JobKey(.task, "warm-up"), "exit 0")
        let warmedUp = Arrivals<JobCompletion>()
        engine.queue.queue.sync {
            engine.configure(warmUp)
            engine.submit(warmUp.key, subject: .schedule(scheduledAt: nil)) { warmedUp.add($0) }
        }
        XCTAssertTrue(warmedUp.wait(), "the warm-up job got no record")
        XCTAssertTrue(waitFor(10) { self.context.queue.queue.sync { self.context.pipeReserve.preparedPID != nil } }, "no child was prepared")
        engine.queue.queue.sync { submit(3) }
        XCTAssertTrue(done.wait(1), "the third fire got no record")
        XCTAssertGreaterThanOrEqual(wk_spawn_prepared_total() - preparedBefore, 1, "the third fire's job did not start in the prepared child")
        return marks
    }

    func testAFleetJobWhoseExecWouldComePastItsFencePoint_neverRuns_isCancelledOnce_andReleasesItsClaim() throws {
        let gate = FixedGate(by: .now - .milliseconds(1))
        let done = Arrivals<JobCompletion>()
        let marks = try runClaimedFires(gate: gate, into: done)
        XCTAssertEqual(done.all.count, 3)
        for completion in done.all {
            XCTAssertEqual(completion.records.map(\.outcome), [.cancelled], "retried or ran: \(completion.records.map(\.detail))")
            XCTAssertNil(completion.final.exit)
            XCTAssertNil(completion.final.startedAt, "a fire with a start time is recorded as run, not released")
            XCTAssertEqual(completion.final.detail, "cancelled: not started, as its exec came after this host's etcd lease stopped being known alive (the daemon was stopped or starved between the start and the exec); its claim is released")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: marks), "a job's program ran past its fence point")
        XCTAssertEqual(gate.ends.withLock { $0.map(\.1) }, [false, false, false], "each claim is released, not recorded as handled")
    }

    func testAFleetJobThatExecsBeforeItsFencePoint_runs() throws {
        let gate = FixedGate(by: .now + .seconds(60))
        let done = Arrivals<JobCompletion>()
        let marks = try runClaimedFires(gate: gate, into: done)
        XCTAssertEqual(done.all.map(\.final.outcome), [.ok, .ok, .ok])
        XCTAssertEqual(try String(contentsOfFile: marks, encoding: .utf8), "ran\nran\nran\n")
        XCTAssertEqual(gate.ends.withLock { $0.map(\.1) }, [true, true, true])
    }

    /// A shared inbox's file whose exec would come past the fence point: held, as a file
    /// whose claim was won too late is, so that the watcher tries it again (FleetInbox).
    func testAFileWhoseExecWouldComePastItsFencePoint_isHeldForAnotherClaim_andNeverRuns() throws {
        let gate = FixedGate(by: .now - .milliseconds(1))
        let inbox = try makeScratchDirectory()
        let marks = inbox + "/runs"
        let engine = makeEngine(maxJobs: 1, fleetStarts: gate)
        var group = shellGroup(JobKey(.watch, "inbox"), "echo ran >> \(marks)")
        group.fleet = true
        let done = Arrivals<JobCompletion>()
        let file = FileSubject(path: Array((inbox + "/a.dat").utf8), rootLength: inbox.utf8.count, event: .closedWrite, identity: nil)
        engine.queue.queue.sync {
            engine.configure(group)
            _ = engine.submitClaimed(group.key, subject: .file(file), runID: .random(), claim: FleetClaimHold(lease: 7, revision: 1)) { done.add($0) }
        }
        XCTAssertTrue(done.wait(), "the file got no record")
        XCTAssertEqual(done.first?.final.outcome, .held)
        XCTAssertNil(done.first?.final.startedAt)
        XCTAssertEqual(done.first?.final.detail?.hasPrefix("held: not started, as its exec came after"), true, "\(String(describing: done.first?.final.detail))")
        XCTAssertFalse(FileManager.default.fileExists(atPath: marks), "the file's job ran past its fence point")
        XCTAssertEqual(gate.ends.withLock { $0.map(\.1) }, [false])
    }
}
