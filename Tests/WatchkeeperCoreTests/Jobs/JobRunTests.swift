import Dispatch
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// One run from spawn to record, through the engine with real child processes: the
/// record's outcome and duration, leftovers, warn_at and on_expire.
final class JobRunTests: JobTestCase {
    private func runOnce(_ key: JobKey, _ script: String, configure: (inout JobSettings) -> Void = { _ in },
                         engine: JobEngine? = nil, into done: Arrivals<JobCompletion>) -> JobEngine {
        let engine = engine ?? makeEngine()
        engine.queue.queue.sync {
            engine.configure(shellGroup(key, script, configure: configure))
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        return engine
    }

    func testTheRecord_saysOkForExitZero_andFailedWithTheCodeOtherwise() {
        let done = Arrivals<JobCompletion>()
        let engine = runOnce(JobKey(.task, "fine"), "exit 0", into: done)
        _ = runOnce(JobKey(.task, "broken"), "exit 7", engine: engine, into: done)
        XCTAssertTrue(done.wait(2), "not every run got its record")
        let byName = Dictionary(uniqueKeysWithValues: done.all.map { ($0.key.name, $0.final) })
        XCTAssertEqual(byName["fine"]?.outcome, .ok)
        XCTAssertEqual(byName["fine"]?.exit, .exited(0))
        XCTAssertEqual(byName["broken"]?.outcome, .failed)
        XCTAssertEqual(byName["broken"]?.exit, .exited(7))
        XCTAssertNil(byName["broken"]?.expiry)
        XCTAssertNotNil(byName["broken"]?.startedAt)
    }

    /// Both leftovers keep the job's stdout open: the record must not wait for them either.
    func testAJobThatExitsLeavingBackgroundProcesses_getsItsRecord_andTheyAreStopped_SIGKILLAfterKillGrace() throws {
        let directory = try makeScratchDirectory()
        let done = Arrivals<JobCompletion>()
        let engine = runOnce(JobKey(.task, "leaves"), """
            sleep 30 & echo $! > \(directory)/polite
            (trap '' TERM; exec sleep 30) & echo $! > \(directory)/deaf
            exit 0
            """, configure: { $0.killGrace = .milliseconds(300) }, into: done)
        XCTAssertTrue(done.wait(), "no record while the job's background processes lived on")
        XCTAssertEqual(done.first?.final.outcome, .ok)
        XCTAssertEqual(done.first?.final.exit, .exited(0))
        let polite = try XCTUnwrap(waitForLine(in: directory + "/polite").flatMap { pid_t($0) })
        let deaf = try XCTUnwrap(waitForLine(in: directory + "/deaf").flatMap { pid_t($0) })
        XCTAssertTrue(messages(at: .warning).contains { $0.contains("exited but left processes in its process group") && $0.contains("sending SIGTERM, SIGKILL after 300ms") },
                      "\(log.messages)")
        XCTAssertTrue(waitFor(5) { hasExited(polite) }, "the leftover was never sent stop_signal")
        XCTAssertTrue(waitFor(5) { hasExited(deaf) }, "the leftover that ignores SIGTERM was never killed")
        XCTAssertTrue(waitFor(5) { engine.queue.queue.sync { engine.lingering.count == 0 } }, "the engine still holds the leftover group")
    }

    /// The record follows the job's last lines into the log, so it waits while the sink is
    /// behind; the run's duration and finishing time are still those of the exit.
    func testTheRecordsDuration_endsAtTheExit_notWhenTheSinkFinallyTookTheLastLines() {
        stderr.fill()
        let done = Arrivals<JobCompletion>()
        _ = runOnce(JobKey(.task, "brief"), "echo last words", into: done)
        let held = 0.5
        XCTAssertFalse(done.wait(timeout: held), "the record went out before the job's last line")
        let readingFrom = WallTime.now()
        let text = stderr.read(untilContains: ["stdout: last words\n"])
        XCTAssertTrue(text.contains(" brief["), "the line is not the job's: \(text.suffix(200))")
        XCTAssertTrue(done.wait(), "no record once the sink took the last line")
        let record = done.first?.final
        XCTAssertEqual(record?.outcome, .ok)
        XCTAssertLessThan(record?.duration ?? .seconds(3_600), .seconds(held * testDeadlineScale), "the duration includes the wait for the sink")
        XCTAssertLessThan(record?.finishedAt ?? readingFrom, readingFrom, "finished_at is when the sink took the line, not the exit")
    }

    /// Issue 35, item 8: a fence squeezes the expiry sequence to end before the lease can
    /// expire; the warning says the time the job had, not a kill_grace it never got.
    func testAFencesSqueezedKillGrace_isSaidAsTheTimeTheJobHad() throws {
        let directory = try makeScratchDirectory()
        let done = Arrivals<JobCompletion>()
        let key = JobKey(.task, "deaf")
        let engine = runOnce(key, "trap '' TERM; touch \(directory)/deaf; exec sleep 30", configure: { $0.killGrace = .seconds(5) }, into: done)
        // Deaf to SIGTERM from here on.
        XCTAssertTrue(waitFor(5) { FileManager.default.fileExists(atPath: directory + "/deaf") })
        engine.queue.queue.sync { engine.expire(key, reason: .fleetLeaseLost, by: .now + .milliseconds(400)) }
        XCTAssertTrue(done.wait(timeout: 3), "the fenced job did not end by its squeezed deadline: \(log.messages)")
        let warning = messages(at: .warning).first { $0.contains("did not stop") } ?? ""
        XCTAssertFalse(warning.contains("within kill_grace 5s"), warning)
        XCTAssertTrue(warning.contains("its kill_grace of 5s, cut short so that it ends before this host's etcd lease can expire"), warning)
    }

    func testWarnAt_logsAWarningOnceThatShareOfTheBudgetIsUsed() {
        let done = Arrivals<JobCompletion>()
        // Warned at 200 ms, long before the job ends; the budget is far away.
        _ = runOnce(JobKey(.task, "slowish"), "sleep \(0.8 * testDeadlineScale)", configure: {
            $0.budget = .seconds(10)
            $0.warnAt = 0.02
        }, into: done)
        XCTAssertTrue(done.wait(), "no record")
        XCTAssertEqual(done.first?.final.outcome, .ok, "a warning is not an expiry")
        let warnings = messages(at: .warning).filter { $0.contains("has used 2% of its 10s budget") }
        XCTAssertEqual(warnings.count, 1, "\(log.messages)")
        XCTAssertTrue(warnings.first?.hasPrefix("task slowish run ") ?? false, "\(warnings)")
    }

    func testOnExpire_runsWithTheReasonAndTheJobsPid_beforeStopSignalReachesTheJob() throws {
        let directory = try makeScratchDirectory()
        let done = Arrivals<JobCompletion>()
        _ = runOnce(JobKey(.task, "overdue"), """
            trap 'echo "stop_signal $$" >> \(directory)/order; exit 3' TERM
            while :; do sleep 0.05; done
            """, configure: { settings in
                settings.budget = .milliseconds(200)
                settings.killGrace = .seconds(5)
                settings.onExpire = .shell("echo \"on_expire $WATCHKEEPER_EXPIRE_REASON $WATCHKEEPER_PID\" >> \(directory)/order")
            }, into: done)
        XCTAssertTrue(done.wait(), "no record")
        let record = done.first?.final
        XCTAssertEqual(record?.outcome, .expired)
        XCTAssertEqual(record?.expiry, .budget)
        XCTAssertEqual(record?.exit, .exited(3), "the job ended in its own TERM trap, not by SIGKILL")
        let order = try String(contentsOfFile: directory + "/order", encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        XCTAssertEqual(order.map { $0.dropLast().joined(separator: " ") }, ["on_expire budget", "stop_signal"])
        XCTAssertEqual(order.first?.last, order.last?.last, "WATCHKEEPER_PID is not the job's pid: \(order)")
        XCTAssertTrue(messages(at: .warning).contains { $0.contains("is expiring: its budget of 200ms is exhausted") }, "\(log.messages)")
    }

    /// Every placeholder of an argv command reaches the job, the formatted ones ({scheduled},
    /// {budget}) too, now that they are formatted only when a template names them.
    func testPlaceholdersInTheArguments_areExpanded_theFormattedOnesToo() throws {
        let directory = try makeScratchDirectory()
        let done = Arrivals<JobCompletion>()
        _ = runOnce(JobKey(.task, "named"), "", configure: { settings in
            settings.budget = .seconds(30)
            settings.command = .arguments(["/bin/sh", "-c", "printf '%s\\n' \"$@\" > \(directory)/args", "sh",
                                           "{task}", "{run_id}", "{attempt}", "at={scheduled}", "{budget}", "plain"])
        }, into: done)
        XCTAssertTrue(done.wait(), "no record")
        let record = try XCTUnwrap(done.first?.final)
        XCTAssertEqual(record.outcome, .ok)
        let lines = try String(contentsOfFile: directory + "/args", encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 6, "\(lines)")
        XCTAssertEqual(lines.first, "named")
        XCTAssertEqual(lines.dropFirst().first, record.runID)
        XCTAssertEqual(lines.dropFirst(2).first, "1")
        let scheduled = lines.dropFirst(3).first ?? ""
        XCTAssertTrue(scheduled.hasPrefix("at=20") && scheduled.contains("T") && scheduled.hasSuffix("Z"), scheduled)
        XCTAssertEqual(Array(lines.suffix(2)), ["30s", "plain"])
    }
}
