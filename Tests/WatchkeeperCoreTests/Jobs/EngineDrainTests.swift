import Dispatch
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The shutdown drain through JobEngine.beginDrain with real short jobs: what it reports,
/// the deadlines it announces for systemd, and that every job has its record by then.
final class EngineDrainTests: JobTestCase {
    private struct Drain {
        let reports = Arrivals<DrainReport>()
        let deadlines = Arrivals<UInt64>()
        /// How many completions the callers had when the drain reported.
        let completionsAtReport = Arrivals<Int>()
    }

    /// Starts the drain in the caller's turn of the jobs queue.
    private func beginDrain(_ engine: JobEngine, grace: Duration, completions: Arrivals<JobCompletion>) -> Drain {
        let drain = Drain()
        engine.beginDrain(grace: grace, onPhaseDeadline: { drain.deadlines.add($0.nanoseconds) }) { report in
            drain.completionsAtReport.add(completions.all.count)
            drain.reports.add(report)
        }
        return drain
    }

    func testDrainOfAnIdleEngine_reportsFinishedInTheSameTurn() {
        let engine = makeEngine()
        let drain = engine.queue.queue.sync { beginDrain(engine, grace: .seconds(30), completions: Arrivals()) }
        XCTAssertEqual(drain.reports.all, [.finished], "nothing runs: nothing to wait for")
    }

    func testJobsEndingWithinTheGrace_reportFinished_afterTheirRecords_andTheGraceDeadlineIsAnnounced() {
        let engine = makeEngine()
        let done = Arrivals<JobCompletion>()
        // Far longer than any wait below: a report before it can only be the drain noticing
        // that the jobs ended.
        let grace = Duration.seconds(600)
        var began: UInt64 = 0
        var armed: UInt64 = 0
        let drain = engine.queue.queue.sync {
            for (name, script) in [("quick", "exit 0"), ("short", "sleep 0.2")] {
                let key = JobKey(.task, name)
                engine.configure(shellGroup(key, script))
                engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            }
            XCTAssertEqual(engine.runningCount, 2)
            began = DispatchTime.now().uptimeNanoseconds
            let drain = beginDrain(engine, grace: grace, completions: done)
            armed = DispatchTime.now().uptimeNanoseconds
            return drain
        }
        XCTAssertTrue(drain.reports.wait(timeout: 10), "no report once both jobs ended")
        XCTAssertEqual(drain.reports.all, [.finished])
        XCTAssertEqual(drain.completionsAtReport.all, [2], "the drain reported before every job had its record")
        XCTAssertEqual(done.all.map(\.final.outcome), [.ok, .ok])
        XCTAssertEqual(drain.deadlines.all.count, 1, "one phase, the grace: \(drain.deadlines.all)")
        let deadline = drain.deadlines.first ?? 0
        let graceNanoseconds = UInt64(grace.nanosecondsClamped)
        XCTAssertTrue((began + graceNanoseconds...armed + graceNanoseconds).contains(deadline),
                      "the announced deadline is not the end of shutdown_grace: \(deadline) not in \(began + graceNanoseconds)...\(armed + graceNanoseconds)")
    }

    func testAJobOutlivingTheGrace_isExpired_withARecordBeforeTheReport_andTheExpiryPhaseIsAnnounced() {
        let engine = makeEngine()
        let done = Arrivals<JobCompletion>()
        let key = JobKey(.task, "outlives")
        let grace = Duration.milliseconds(200)
        let killGrace = Duration.milliseconds(200)
        let drain = engine.queue.queue.sync {
            engine.configure(shellGroup(key, "sleep 30") { $0.killGrace = killGrace })
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            return beginDrain(engine, grace: grace, completions: done)
        }
        XCTAssertTrue(drain.reports.wait(timeout: 10), "no report")
        let reportedAt = DispatchTime.now().uptimeNanoseconds
        XCTAssertEqual(drain.reports.all, [.expired(names: ["outlives"])])
        XCTAssertEqual(drain.completionsAtReport.all, [1], "the drain reported before the job had its record")
        let record = done.first?.final
        XCTAssertEqual(record?.outcome, .expired)
        XCTAssertEqual(record?.expiry, .shutdown)
        XCTAssertEqual(record?.exit, .signaled(SIGTERM, coreDumped: false), "sleep ends on stop_signal, before any SIGKILL")
        XCTAssertGreaterThanOrEqual(record?.duration ?? .zero, grace, "expired before shutdown_grace ran out")
        let deadlines = drain.deadlines.all
        XCTAssertEqual(deadlines.count, 2, "the grace, then the expiry sequences: \(deadlines)")
        if deadlines.count == 2 {
            // The expiry phase began when the grace ended and allows kill_grace and a margin.
            let allowed = UInt64((killGrace + EngineDrain.expiryMargin).nanosecondsClamped)
            XCTAssertGreaterThanOrEqual(deadlines[1], deadlines[0] + allowed)
            XCTAssertLessThan(reportedAt, deadlines[1], "the drain waited out its expiry phase although the job had ended")
        }
    }

    func testAJobIgnoringSIGTERM_isKilledOnceItsKillGraceRunsOut_andReportedExpired() throws {
        let engine = makeEngine()
        let done = Arrivals<JobCompletion>()
        let key = JobKey(.task, "deaf")
        let directory = try makeScratchDirectory()
        let grace = Duration.milliseconds(100)
        let killGrace = Duration.milliseconds(300)
        engine.queue.queue.sync {
            // The background sleep inherits the ignored SIGTERM: only the group's SIGKILL ends it.
            engine.configure(shellGroup(key, "trap '' TERM; sleep 30 & echo $! > \(directory)/pid; wait") { $0.killGrace = killGrace })
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        let sleeper = try XCTUnwrap(waitForLine(in: directory + "/pid").flatMap { pid_t($0) }, "the job never started")
        let drain = engine.queue.queue.sync { beginDrain(engine, grace: grace, completions: done) }
        XCTAssertTrue(drain.reports.wait(timeout: 10), "no report")
        XCTAssertEqual(drain.reports.all, [.expired(names: ["deaf"])])
        XCTAssertEqual(drain.completionsAtReport.all, [1])
        let record = done.first?.final
        XCTAssertEqual(record?.outcome, .expired)
        XCTAssertEqual(record?.expiry, .shutdown)
        XCTAssertEqual(record?.exit, .signaled(SIGKILL, coreDumped: false), "it ignored SIGTERM: only SIGKILL could end it")
        XCTAssertGreaterThanOrEqual(record?.duration ?? .zero, grace + killGrace, "SIGKILL came before kill_grace ran out")
        XCTAssertTrue(messages(at: .warning).contains { $0.contains("did not stop within kill_grace 300ms: SIGKILL to its process group") },
                      "\(log.messages)")
        XCTAssertTrue(waitFor(5) { hasExited(sleeper) }, "the job's background process \(sleeper) outlived the drain")
    }

    func testExpireAllNow_duringTheGrace_expiresTheRunningJobsAtOnce() {
        let engine = makeEngine()
        let done = Arrivals<JobCompletion>()
        let key = JobKey(.task, "waited-for")
        // A grace no wait below comes near: only expireAllNow can end this drain in time.
        let grace = Duration.seconds(600)
        let drain = engine.queue.queue.sync {
            engine.configure(shellGroup(key, "sleep 30") { $0.killGrace = .milliseconds(200) })
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            return beginDrain(engine, grace: grace, completions: done)
        }
        XCTAssertFalse(drain.reports.wait(timeout: 0.3), "reported while the job ran and its grace had not run out")
        let second = DispatchTime.now().uptimeNanoseconds
        engine.queue.queue.sync { engine.expireAllNow() }
        XCTAssertTrue(drain.reports.wait(timeout: 10), "no report after expireAllNow")
        XCTAssertEqual(drain.reports.all, [.expired(names: ["waited-for"])])
        XCTAssertEqual(done.first?.final.outcome, .expired)
        XCTAssertEqual(done.first?.final.expiry, .shutdown)
        let deadlines = drain.deadlines.all
        XCTAssertEqual(deadlines.count, 2, "the grace, then the expiry sequences: \(deadlines)")
        if deadlines.count == 2 {
            XCTAssertLessThan(deadlines[1], deadlines[0], "the expiry phase must replace the rest of the grace")
            XCTAssertGreaterThanOrEqual(deadlines[1], second + UInt64(EngineDrain.expiryMargin.nanosecondsClamped))
        }
    }
}
