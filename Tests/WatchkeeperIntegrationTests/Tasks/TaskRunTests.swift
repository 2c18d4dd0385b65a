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
    private func start(_ tasks: String, daemon extra: String = "", environment: [String: String] = [:]) throws
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

    private func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    private func processExists(_ pid: pid_t) -> Bool {
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
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "stubborn"
            every = "1h"
            run_on_start = true
            budget = "300ms"
            kill_grace = "700ms"
            shell = true
            command = 'trap "" TERM; echo $$ > @DIR@/pid; while :; do sleep 0.05; done'
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
        let grandchild = try XCTUnwrap(pid_t(lines(sandbox.root + "/grandchild").first ?? ""))
        XCTAssertTrue(waitFor(3) { !processExists(grandchild) }, "grandchild \(grandchild) survived its job's expiry")
        let leftover = try XCTUnwrap(pid_t(lines(sandbox.root + "/leftover").first ?? ""))
        XCTAssertTrue(waitFor(3) { !processExists(leftover) }, "process \(leftover) left behind by a finished job survived")
        XCTAssertTrue(daemon.stderr.contains("left processes in its group"), daemon.stderr)
        daemon.stop(within: 20)
    }

    /// The task's dump entry, read from a fresh SIGUSR1 dump.
    private func taskEntry(_ sandbox: DaemonSandbox, _ daemon: DaemonProcess, sequence: inout Int) -> [String: Any]? {
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
        XCTAssertTrue(daemon.stderr.contains("expiry=replaced"), daemon.stderr)
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

    func testDrain_expiresJobsStillRunningAtTheEndOfShutdownGrace_andExtendsTheStopTimeout() throws {
        let (sandbox, daemon, notify) = try start("""
            [[task]]
            name = "endless"
            every = "1h"
            run_on_start = true
            kill_grace = "300ms"
            shell = true
            command = 'trap "echo term >> @DIR@/events; exit 0" TERM; touch @DIR@/trapped; while :; do sleep 0.05; done'
            on_expire = 'echo "expire $WATCHKEEPER_EXPIRE_REASON" >> @DIR@/events'

            [[task]]
            name = "waiting"
            every = "1h"
            run_on_start = true
            command = ["/bin/true"]
            """, daemon: "max_jobs = 1\nshutdown_grace = \"800ms\"")
        // The job runs and has its trap in place: the TERM below finds it running, whatever the load.
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: sandbox.root + "/trapped") }, daemon.stderr)
        daemon.send(SIGTERM)
        let stopping = notify.waitFor("STOPPING", "1", timeout: 5)
        XCTAssertNotNil(stopping)
        XCTAssertNotNil(notify.waitFor(timeout: 3) { $0["EXTEND_TIMEOUT_USEC"] != nil }, "no EXTEND_TIMEOUT_USEC while a job was finishing")
        XCTAssertEqual(daemon.waitForExit(timeout: 15), 0, daemon.stderr)
        XCTAssertEqual(lines(sandbox.root + "/events"), ["expire shutdown", "term"])
        XCTAssertTrue(daemon.stderr.contains("expiry=shutdown"), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("task waiting run") && daemon.stderr.contains("outcome=cancelled"), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("expired at the end of shutdown_grace: endless"), daemon.stderr)
    }

    /// The old drain gave up 10 s after shutdown_grace and exited 0 with the job alive
    /// (PPID 1) and no record. Now it waits out the job's kill_grace, kills it, records it.
    func testDrain_withAKillGraceOverTenSeconds_endsTheJobAndWritesItsRecordBeforeExiting() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "stubborn"
            every = "1h"
            run_on_start = true
            kill_grace = "11s"
            shell = true
            command = 'trap "" TERM; echo $$ > @DIR@/pid; while :; do sleep 0.05; done'
            """, daemon: "shutdown_grace = \"200ms\"")
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: sandbox.root + "/pid") }, daemon.stderr)
        let pid = try XCTUnwrap(Int32(lines(sandbox.root + "/pid").first ?? ""))
        daemon.stop(within: 30)
        XCTAssertEqual(kill(pid, 0), -1, "the job outlived the daemon")
        XCTAssertTrue(daemon.stderr.contains("task stubborn run") && daemon.stderr.contains("outcome=expired"), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("expiry=shutdown"), daemon.stderr)
    }

    /// Niceness is set in the child before exec: every low run at base + 10, every other
    /// at the daemon's base, whichever worker thread spawned it (it was 7 of 20 at 0).
    func testPriorityLow_runsEveryJobAtNiceTen_andOthersAtTheBase() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "low"
            every = "100ms"
            priority = "low"
            overlap = "allow"
            max_concurrent = 4
            shell = true
            command = 'cut -d" " -f19 /proc/self/stat >> @DIR@/low'

            [[task]]
            name = "normal"
            every = "100ms"
            overlap = "allow"
            max_concurrent = 4
            shell = true
            command = 'cut -d" " -f19 /proc/self/stat >> @DIR@/normal'
            """)
        XCTAssertTrue(waitFor(20) { lines(sandbox.root + "/low").count >= 20 && lines(sandbox.root + "/normal").count >= 20 }, daemon.stderr)
        daemon.stop(within: 20)
        let base = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        XCTAssertEqual(Set(lines(sandbox.root + "/low")), [String(min(base + 10, 19))])
        XCTAssertEqual(Set(lines(sandbox.root + "/normal")), [String(base)])
    }

    /// A 500 ms budget is half a second, not 0, and the deadline keeps its milliseconds.
    func testSubSecondBudget_isToldToTheJobExactly() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "quick"
            every = "1h"
            run_on_start = true
            budget = "500ms"
            shell = true
            command = 'echo "$WATCHKEEPER_BUDGET_SECONDS $WATCHKEEPER_DEADLINE" > @DIR@/budget'
            """)
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/budget").count == 1 }, daemon.stderr)
        daemon.stop(within: 20)
        let fields = (lines(sandbox.root + "/budget").first ?? "").split(separator: " ").map(String.init)
        XCTAssertEqual(fields.first, "0.5")
        XCTAssertEqual(fields.count, 2)
        XCTAssertTrue(daemon.stderr.contains("run_id="), daemon.stderr)
        let started = try XCTUnwrap(daemon.stderr.components(separatedBy: "started_at=").dropFirst().first?.prefix(24))
        let deadline = try XCTUnwrap(Self.parseTimestamp(fields.last ?? ""))
        let start = try XCTUnwrap(Self.parseTimestamp(String(started)))
        XCTAssertEqual(deadline - start, 0.5, accuracy: 0.0015, "the deadline is the start plus the whole budget")
    }

    /// jitter delays the first run too: with every = 4s and jitter = 3s, nothing runs
    /// before a whole interval has passed (it used to fire at the jitter offset alone).
    func testJitter_delaysTheFirstRunByAWholeIntervalAtLeast() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "jittery"
            every = "4s"
            jitter = "3s"
            command = ["/bin/true"]
            """)
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let task = try XCTUnwrap(((state["tasks"] as? [String: Any])?["tasks"] as? [[String: Any]])?.first)
        let next = try XCTUnwrap((task["next_run"] as? String)?.prefix(24))
        let now = try XCTUnwrap(Self.parseTimestamp(state["time"] as? String ?? ""))
        let uptime = try XCTUnwrap(state["uptime_s"] as? Double)
        let first = try XCTUnwrap(Self.parseTimestamp(String(next)))
        // Measured from the daemon's start: at least the interval, at most interval + jitter.
        let sinceStart = first - (now - uptime)
        XCTAssertGreaterThanOrEqual(sinceStart, 4.0, "\(task)")
        XCTAssertLessThan(sinceStart, 7.1, "\(task)")
        daemon.stop(within: 20)
    }

    func testProgressFlood_isCoalesced_andTheLatestValueIsShown() throws {
        let (sandbox, daemon, _) = try start(#"""
            [[task]]
            name = "chatty"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'awk "BEGIN { for (i = 0; i < 200000; i++) printf \"PROGRESS=%d\\n\", i % 100; printf \"PROGRESS=77\\nSTATUS=almost done\\n\" }" >&3; touch @DIR@/sent; sleep 30'
            """#)
        XCTAssertTrue(waitFor(20) { FileManager.default.fileExists(atPath: sandbox.root + "/sent") }, daemon.stderr)
        // The daemon reads the flood at its own pace: dump until it has read it all.
        var state: [String: Any] = [:]
        var run: [String: Any] = [:]
        for sequence in 1...100 {
            daemon.send(SIGUSR1)
            state = try XCTUnwrap(sandbox.waitForState(sequence: sequence, timeout: 5))
            let task = try XCTUnwrap(((state["tasks"] as? [String: Any])?["tasks"] as? [[String: Any]])?.first)
            run = try XCTUnwrap((task["running"] as? [[String: Any]])?.first, "\(task)")
            if run["progress_updates"] as? Int == 200_002 { break }
            usleep(100_000)
        }
        XCTAssertEqual(run["progress"] as? Double, 77)
        XCTAssertEqual(run["status"] as? String, "almost done")
        XCTAssertEqual(run["progress_updates"] as? Int, 200_002)
        let sources = try XCTUnwrap(state["sources"] as? [[String: Any]])
        let progressSource = try XCTUnwrap(sources.first {
            ($0["owner"] as? String)?.hasPrefix("task chatty run") == true && ($0["target"] as? String)?.hasPrefix("progress pipe") == true
        })
        XCTAssertLessThan(progressSource["events"] as? Int ?? .max, 2_000, "200,000 updates must not mean 200,000 wake-ups")
        XCTAssertTrue((state["status"] as? String)?.contains("chatty 77% (almost done)") ?? false, "\(state["status"] ?? "")")
        let resources = try XCTUnwrap(state["resources"] as? [String: Any])
        XCTAssertLessThan(resources["rss_peak_bytes"] as? Int ?? .max, 80_000_000, "200,000 updates must not grow the daemon")
        daemon.stop(within: 20)
    }

    func testOutputFloodWithoutNewlines_keepsDaemonMemoryBounded() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "flood"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'head -c 30000000 /dev/zero | tr "\\\\0" x; echo; echo done'
            """)
        // 30 MB in one line: read only the end of the daemon's (large) stderr.
        XCTAssertTrue(waitFor(60) { daemon.stderrTail.contains("outcome=ok") }, daemon.stderrTail)
        let status = try String(contentsOfFile: "/proc/\(daemon.pid)/status", encoding: .utf8)
        let peakKB = Int(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }?.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? .max
        // The daemon keeps one 64 KiB read buffer and one 16 KiB partial line per stream.
        XCTAssertLessThan(peakKB, 80_000, "peak RSS \(peakKB) kB after a 30 MB line")
        XCTAssertTrue(daemon.stderrTail.contains("flood["), "the output must reach the log")
        XCTAssertTrue(daemon.stderrTail.contains("stdout: done"), daemon.stderrTail)
        _ = sandbox
        daemon.stop(within: 20)
    }

    func testAfter_aRunWaitsForItsDependencyToSucceed_andIsCancelledWhenItFails() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "publish"
            every = "1h"
            run_on_start = true
            after = ["prepare"]
            shell = true
            command = 'echo publish >> @DIR@/order'

            [[task]]
            name = "prepare"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'sleep 0.4; echo prepare >> @DIR@/order'

            [[task]]
            name = "report"
            every = "1h"
            run_on_start = true
            after = ["broken"]
            shell = true
            command = 'echo report >> @DIR@/order'

            [[task]]
            name = "broken"
            every = "1h"
            run_on_start = true
            command = ["/bin/false"]
            """)
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/order").count >= 2 }, daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "dependency broken did not succeed", timeout: 5), daemon.stderr)
        usleep(300_000)
        XCTAssertEqual(lines(sandbox.root + "/order"), ["prepare", "publish"], "report must not run after broken failed")
        XCTAssertTrue(daemon.stderr.contains("task report run") && daemon.stderr.contains("outcome=cancelled"), daemon.stderr)
        daemon.stop(within: 20)
    }

    func testPersistentTask_catchesUpTheLatestMissedRunOnceAfterARestart_andOlderOnesAreRecordedMissed() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "nightly"
            every = "1500ms"
            persistent = true
            catch_up_window = "1h"
            shell = true
            command = 'echo "$WATCHKEEPER_SCHEDULED_AT" >> @DIR@/runs'

            [[task]]
            name = "stale"
            every = "1h"
            persistent = true
            catch_up_window = "1s"
            shell = true
            command = 'echo stale >> @DIR@/stale'
            """)
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/runs").count == 1 }, daemon.stderr)
        daemon.stop(within: 20)
        XCTAssertTrue(FileManager.default.fileExists(atPath: sandbox.root + "/state/watchkeeper.sqlite3"))
        // stale last fell due 90 minutes ago: its latest missed run is 30 minutes old, beyond its window.
        let store = try TaskStore(directory: sandbox.root + "/state")
        let now = WallTime.now()
        try store.recordScheduled(task: "stale", scheduledAt: WallTime(secondsSinceEpoch: now.secondsSinceEpoch - 5_400, nanoseconds: now.nanoseconds))
        store.close()
        // Down for longer than two intervals: nightly's next runs are missed; only the latest is caught up.
        usleep(3_200_000)
        try FileManager.default.removeItem(atPath: sandbox.statePath) // the first life's final dump
        let notify = try NotifySocket()
        let restarted = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        XCTAssertTrue(waitFor(10) { lines(sandbox.root + "/runs").count == 2 }, "the missed run was not caught up at start:\n\(restarted.stderr)")
        usleep(600_000)
        let runs = lines(sandbox.root + "/runs")
        XCTAssertEqual(runs.count, 2, "caught up once, not once per missed interval")
        let times = runs.compactMap(Self.parseTimestamp)
        XCTAssertEqual(times.count, 2, "\(runs)")
        if times.count == 2 {
            // The catch-up run carries the latest missed instant: two or more intervals after the first run.
            XCTAssertGreaterThanOrEqual(times[1] - times[0], 2.9, "\(runs)")
        }
        XCTAssertEqual(lines(sandbox.root + "/stale").count, 0, "beyond catch_up_window: not run")
        XCTAssertTrue(restarted.stderr.contains("was missed while watchkeeper was not running"), restarted.stderr)
        XCTAssertTrue(restarted.stderr.contains("task stale run") && restarted.stderr.contains("outcome=missed"), restarted.stderr)
        // History survives the restart: the dump shows the first life's run.
        restarted.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let nightly = try XCTUnwrap(((state["tasks"] as? [String: Any])?["tasks"] as? [[String: Any]])?.first { $0["name"] as? String == "nightly" })
        XCTAssertGreaterThanOrEqual((nightly["last_runs"] as? [Any])?.count ?? 0, 2, "\(nightly)")
        restarted.stop(within: 20)
    }

    func testExpireHandler_keepsItsOwnBudget_evenAfterTheJobEndedOnItsOwn() throws {
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "shortlived"
            every = "1h"
            run_on_start = true
            budget = "200ms"
            on_expire_budget = "600ms"
            shell = true
            command = 'sleep 0.4'
            on_expire = 'echo $$ > @DIR@/handler; sleep 30'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=expired", timeout: 10), daemon.stderr)
        let handler = try XCTUnwrap(pid_t(lines(sandbox.root + "/handler").first ?? ""))
        XCTAssertTrue(waitFor(3) { !processExists(handler) }, "the on_expire handler outlived its budget")
        XCTAssertTrue(daemon.waitForStderr(containing: "on_expire handler exceeded its 600ms budget", timeout: 2), daemon.stderr)
        daemon.stop(within: 20)
    }

    /// "2026-11-22T01:02:03.456Z" as seconds since the epoch.
    static func parseTimestamp(_ text: String) -> Double? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text).map { $0.timeIntervalSince1970 }
    }
}
