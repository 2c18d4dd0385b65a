import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Periodic tasks run by the real daemon: real processes, real signals, real clocks
/// (short durations). Each test reads what the jobs themselves wrote to files and the
/// daemon's run records on stderr.
final class TaskRunTests: XCTestCase {
    func start(_ tasks: String, daemon extra: String = "", environment: [String: String] = [:]) throws
        -> (sandbox: DaemonSandbox, daemon: DaemonProcess, notify: NotifySocket) {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        let grace = extra.contains("shutdown_grace") ? "" : "shutdown_grace = \"5s\""
        let config = """
            [daemon]
            log_level = "debug"
            dump_component_timeout = "1s"
            \(grace)
            \(extra)

            \(tasks.replacingOccurrences(of: "@DIR@", with: sandbox.root))
            """
        try sandbox.writeConfig(config)
        let daemon = try sandbox.startReady(notifySocket: notify, extra: environment)
        return (sandbox, daemon, notify)
    }

    func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func processExists(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        // A zombie left for a reaper that is not ours does not count as running.
        guard let close = stat.lastIndex(of: ")") else { return false }
        return !stat[stat.index(close, offsetBy: 2)...].hasPrefix("Z")
    }

    func testJobOverBudget_runsOnExpireFirst_thenStopSignalToTheGroup() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "slow"
            every = "1h"
            run_on_start = true
            budget = "500ms"
            shell = true
            command = 'trap "echo term >> @DIR@/events; exit 0" TERM; echo started >> @DIR@/events; while :; do sleep 0.05; done'
            on_expire = 'echo "expire $WATCHKEEPER_EXPIRE_REASON $WATCHKEEPER_TASK" >> @DIR@/events'
            """)
        let events = sandbox.root + "/events"
        XCTAssertTrue(waitFor(10) { lines(events).contains("term") }, "events: \(lines(events))\n\(daemon.stderr)")
        XCTAssertEqual(lines(events), ["started", "expire budget slow", "term"])
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=expired", timeout: 5), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("expiry=budget"), daemon.stderr)
        daemon.stop(within: 20)
    }

    func testJobIgnoringTheStopSignal_isKilledAfterKillGrace() throws {
        // Deaf to SIGTERM, but its loop ends with this test's process: a failed test SIGKILLs the
        // daemon (DaemonProcess.deinit), which then cannot kill it.
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "stubborn"
            every = "1h"
            run_on_start = true
            budget = "300ms"
            kill_grace = "700ms"
            shell = true
            command = 'trap "" TERM; echo $$ > @DIR@/pid; while kill -0 \(getpid()) 2>/dev/null; do sleep 0.05; done'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=expired", timeout: 10), daemon.stderr)
        let record = try XCTUnwrap(daemon.stderr.split(separator: "\n").first { $0.contains("outcome=expired") })
        XCTAssertTrue(record.contains("signal=SIGKILL"), String(record))
        XCTAssertTrue(daemon.stderr.contains("did not stop within kill_grace 700ms"), daemon.stderr)
        let durationMS = Int(record.components(separatedBy: "duration_ms=")[1].prefix { $0.isNumber }) ?? 0
        XCTAssertGreaterThanOrEqual(durationMS, 950, "SIGKILL must wait for kill_grace after the budget: \(record)")
        let pid = pid_t(lines(sandbox.root + "/pid").first ?? "") ?? 0
        XCTAssertFalse(processExists(pid))
        daemon.stop(within: 20)
    }

    func testGrandchildStillRunning_isKilledWithItsProcessGroup() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "forker"
            every = "1h"
            run_on_start = true
            budget = "400ms"
            kill_grace = "300ms"
            shell = true
            command = 'sleep 300 & echo $! > @DIR@/grandchild; wait'

            [[task]]
            name = "leaver"
            every = "1h"
            run_on_start = true
            kill_grace = "300ms"
            shell = true
            command = 'sleep 300 & echo $! > @DIR@/leftover; exit 0'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "task forker run", timeout: 10), daemon.stderr)
        // The run is logged as it starts; its shell writes the pid a moment later.
        XCTAssertTrue(waitFor(10) { pid_t(lines(sandbox.root + "/grandchild").first ?? "") != nil }, daemon.stderr)
        XCTAssertTrue(waitFor(10) { pid_t(lines(sandbox.root + "/leftover").first ?? "") != nil }, daemon.stderr)
        let grandchild = try XCTUnwrap(pid_t(lines(sandbox.root + "/grandchild").first ?? ""))
        XCTAssertTrue(waitFor(3) { !processExists(grandchild) }, "grandchild \(grandchild) survived its job's expiry")
        let leftover = try XCTUnwrap(pid_t(lines(sandbox.root + "/leftover").first ?? ""))
        XCTAssertTrue(waitFor(3) { !processExists(leftover) }, "process \(leftover) left behind by a finished job survived")
        // Waited for: the line is logged as the leftover is signalled, and can reach stderr after it is gone.
        XCTAssertTrue(daemon.waitForStderr(containing: "left processes in its process group", timeout: 10), daemon.stderr)
        daemon.stop(within: 20)
    }

    /// The task's dump entry, read from a fresh SIGUSR1 dump.
    func taskEntry(_ sandbox: DaemonSandbox, _ daemon: DaemonProcess, sequence: inout Int) -> [String: Any]? {
        sequence += 1
        daemon.send(SIGUSR1)
        guard let state = sandbox.waitForState(sequence: sequence, timeout: 5) else { return nil }
        return ((state["tasks"] as? [String: Any])?["tasks"] as? [[String: Any]])?.first
    }

    /// Runs block until the test releases them, so what is counted depends on events, not
    /// on how many ticks fit in a wall-clock window on a loaded machine.
    func testOverlapSkip_skipsWhileRunning_andLogsOncePerStreak() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "long"
            every = "100ms"
            run_on_start = true
            shell = true
            command = 'touch @DIR@/started; while [ ! -e @DIR@/release ]; do sleep 0.02; done'
            """)
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: sandbox.root + "/started") }, daemon.stderr)
        var sequence = 0
        var skipped = 0
        XCTAssertTrue(waitFor(20) {
            skipped = (taskEntry(sandbox, daemon, sequence: &sequence)?["skipped_in_a_row"] as? Int) ?? 0
            return skipped >= 3
        }, daemon.stderr)
        FileManager.default.createFile(atPath: sandbox.root + "/release", contents: nil)
        XCTAssertTrue(daemon.waitForStderr(containing: "runs again after skipping", timeout: 10), daemon.stderr)
        let stderr = daemon.stderr
        let skipNotices = stderr.components(separatedBy: "because the previous one is still running").count - 1
        XCTAssertEqual(skipNotices, 1, "one notice per streak:\n\(stderr)")
        let count = stderr.components(separatedBy: "runs again after skipping ").dropFirst().first.flatMap { Int($0.prefix { $0.isNumber }) }
        XCTAssertGreaterThanOrEqual(count ?? 0, skipped, stderr)
        daemon.stop(within: 20)
    }

    func testOverlapQueue_keepsAtMostOneRunWaiting() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "queued"
            every = "100ms"
            run_on_start = true
            overlap = "queue"
            shell = true
            command = 'echo start >> @DIR@/runs; n=$(wc -l < @DIR@/runs); while [ ! -e @DIR@/release$n ]; do sleep 0.02; done'
            """)
        var sequence = 0
        // While the first run blocks, one run waits and every later tick is skipped.
        XCTAssertTrue(waitFor(20) {
            let task = taskEntry(sandbox, daemon, sequence: &sequence)
            return task?["waiting_for_current_run"] as? Bool == true && (task?["skipped_in_a_row"] as? Int ?? 0) >= 2
        }, daemon.stderr)
        XCTAssertEqual(lines(sandbox.root + "/runs").count, 1)
        FileManager.default.createFile(atPath: sandbox.root + "/release1", contents: nil)
        // The waiting run starts as soon as the first ends; again at most one waits behind it.
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/runs").count == 2 }, daemon.stderr)
        XCTAssertTrue(waitFor(20) {
            let task = taskEntry(sandbox, daemon, sequence: &sequence)
            return task?["waiting_for_current_run"] as? Bool == true && (task?["skipped_in_a_row"] as? Int ?? 0) >= 2
        }, daemon.stderr)
        XCTAssertEqual(lines(sandbox.root + "/runs").count, 2, "more than one run was let through while one was running")
        for index in 2...5 { FileManager.default.createFile(atPath: sandbox.root + "/release\(index)", contents: nil) }
        daemon.stop(within: 20)
    }

    func testOverlapReplace_expiresTheRunningOneThenStartsTheNext() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "replaced"
            every = "500ms"
            run_on_start = true
            overlap = "replace"
            budget = "10s"
            shell = true
            command = 'echo "start $WATCHKEEPER_RUN_ID" >> @DIR@/runs; trap "echo term >> @DIR@/runs; exit 0" TERM; while :; do sleep 0.05; done'
            """)
        XCTAssertTrue(waitFor(5) { lines(sandbox.root + "/runs").filter { $0.hasPrefix("start") }.count >= 2 }, daemon.stderr)
        let runs = lines(sandbox.root + "/runs")
        XCTAssertEqual(Array(runs.prefix(3)).map { $0.hasPrefix("start") ? "start" : $0 }, ["start", "term", "start"])
        // Waited for: the next run can start before the log writer's gathering (up to 5 ms)
        // has written the first one's record.
        XCTAssertTrue(daemon.waitForStderr(containing: "expiry=replaced", timeout: 5), daemon.stderr)
        daemon.stop(within: 20)
    }

    func testOverlapAllow_runsConcurrentlyUpToMaxConcurrent() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "parallel"
            every = "100ms"
            run_on_start = true
            overlap = "allow"
            max_concurrent = 3
            shell = true
            command = 'echo $$ >> @DIR@/running; sleep 5'
            """)
        // Three started; each runs for seconds, so the dump sees them all, and no fourth.
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/running").count >= 3 }, daemon.stderr)
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let tasks = try XCTUnwrap(((state["tasks"] as? [String: Any])?["tasks"] as? [[String: Any]])?.first)
        XCTAssertEqual((tasks["running"] as? [Any])?.count, 3, "\(tasks)")
        daemon.stop(within: 20)
    }

    /// Three attempts in all, each with its own record; the backoff's growth is pinned by
    /// RetryPolicyTests, not by timing runs here.
    func testFailedRun_isRetriedUpToItsAttempts_withARecordPerAttempt() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "flaky"
            every = "1h"
            run_on_start = true
            retry = { attempts = 3, backoff = "100ms", max_backoff = "1s" }
            shell = true
            command = 'echo "$WATCHKEEPER_ATTEMPT" >> @DIR@/attempts; exit 3'
            """)
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/attempts").count >= 3 }, daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "attempt=3", timeout: 5), daemon.stderr)
        daemon.stop(within: 20)
        XCTAssertEqual(lines(sandbox.root + "/attempts"), ["1", "2", "3"], "attempts = 3 means three runs in all")
        let records = daemon.stderr.split(separator: "\n").filter { $0.contains("task flaky run") && $0.contains("outcome=failed") }
        XCTAssertEqual(records.count, 3, daemon.stderr)
        XCTAssertTrue(records.allSatisfy { $0.contains("exit_code=3") }, daemon.stderr)
    }

    func testHostileArguments_reachTheJobByteExact() throws {
        let (sandbox, daemon, _) = try start(#"""
            [[task]]
            name = "argv"
            every = "1h"
            run_on_start = true
            command = ["/usr/bin/python3", "-c", "import sys,os; open(sys.argv[1],'wb').write(b'\\0'.join(os.fsencode(a) for a in sys.argv[2:]))", "@DIR@/argv", "a b", "'q' \"dq\"", "$(touch @DIR@/pwned)", "`id`", "line1\nline2", "--rf", "-", "", "*", "{{literal}}", "{task}-{attempt}"]
            """#)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        let written = try Data(contentsOf: URL(fileURLWithPath: sandbox.root + "/argv"))
        let expected = ["a b", "'q' \"dq\"", "$(touch \(sandbox.root)/pwned)", "`id`", "line1\nline2", "--rf", "-", "", "*", "{literal}", "argv-1"]
        XCTAssertEqual(written, Data(expected.joined(separator: "\0").utf8))
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/pwned"))
        daemon.stop(within: 20)
    }

    func testJobEnvironment_describesTheRun_andLeaksNothingOfTheDaemon() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "env"
            every = "1h"
            run_on_start = true
            environment = { GREETING = "hello" }
            command = ["/usr/bin/env"]
            working_directory = "@DIR@"
            shell = false
            """, environment: ["SECRET_OF_THE_DAEMON": "leak"])
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        let output = daemon.stderr.split(separator: "\n").filter { $0.contains("env[") && $0.contains("stdout: ") }
            .map { String($0.components(separatedBy: "stdout: ")[1]) }
        let keys = Set(output.map { String($0.prefix { $0 != "=" }) })
        XCTAssertTrue(keys.isSuperset(of: ["PATH", "WATCHKEEPER_TASK", "WATCHKEEPER_RUN_ID", "WATCHKEEPER_DEADLINE",
                                           "WATCHKEEPER_PROGRESS_FD", "WATCHKEEPER_ATTEMPT", "GREETING", "HOME"]), "\(keys)")
        XCTAssertFalse(keys.contains("SECRET_OF_THE_DAEMON"))
        XCTAssertFalse(keys.contains("NOTIFY_SOCKET"))
        XCTAssertTrue(output.contains("GREETING=hello"))
        XCTAssertTrue(output.contains("WATCHKEEPER_TASK=env"))
        _ = sandbox
        daemon.stop(within: 20)
    }

    func testQueuedJobs_startByPriority_withinMaxJobs() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "first"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'echo first >> @DIR@/order; sleep 0.5'

            [[task]]
            name = "low"
            every = "1h"
            run_on_start = true
            priority = "low"
            shell = true
            command = 'echo low >> @DIR@/order'

            [[task]]
            name = "normal"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'echo normal >> @DIR@/order'

            [[task]]
            name = "urgent"
            every = "1h"
            run_on_start = true
            priority = "high"
            shell = true
            command = 'echo urgent >> @DIR@/order'
            """, daemon: "max_jobs = 1")
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/order").count == 4 }, daemon.stderr)
        XCTAssertEqual(lines(sandbox.root + "/order"), ["first", "urgent", "normal", "low"])
        daemon.stop(within: 20)
    }
}
