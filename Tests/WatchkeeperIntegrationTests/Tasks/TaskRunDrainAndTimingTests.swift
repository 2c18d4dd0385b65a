import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The drain, niceness, sub-second budgets, jitter, progress and output floods, `after`,
/// catch-up and the expiration handler's own budget, on the real daemon.
extension TaskRunTests {
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
        // Deaf to SIGTERM, but its loop ends with this test's process: a failed test SIGKILLs the
        // daemon (DaemonProcess.deinit), which then cannot kill it.
        let (sandbox, daemon, _) = try start("""
            [[task]]
            name = "stubborn"
            every = "1h"
            run_on_start = true
            kill_grace = "11s"
            shell = true
            command = 'trap "" TERM; echo $$ > @DIR@/pid; while kill -0 \(getpid()) 2>/dev/null; do sleep 0.05; done'
            """, daemon: "shutdown_grace = \"200ms\"")
        // The pid, not the file: the shell's redirection makes the file before echo writes.
        let pid = try XCTUnwrap(waitForValue(10) { Int32(lines(sandbox.root + "/pid").first ?? "") }, daemon.stderr)
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
        // STATUS= goes out at most every 500 ms, the latest line at the end of the window:
        // dump again until the line systemd was sent has caught up.
        var sequence = state["sequence"] as? Int ?? 0
        for _ in 0..<20 where (state["status"] as? String)?.contains("chatty 77% (almost done)") != true {
            usleep(100_000)
            sequence += 1
            daemon.send(SIGUSR1)
            state = try XCTUnwrap(sandbox.waitForState(sequence: sequence, timeout: 5))
        }
        XCTAssertTrue((state["status"] as? String)?.contains("chatty 77% (almost done)") ?? false, "\(state["status"] ?? "")")
        let resources = try XCTUnwrap(state["resources"] as? [String: Any])
        XCTAssertLessThan(resources["rss_peak_bytes"] as? Int ?? .max, 80_000_000 + testMemoryAllowanceBytes, "200,000 updates must not grow the daemon")
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
        XCTAssertLessThan(peakKB, 80_000 + testMemoryAllowanceBytes / 1024, "peak RSS \(peakKB) kB after a 30 MB line")
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
        letTimePass(0.3) // report would have run by now
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
        letTimePass(0.6) // a catch-up per missed interval would have run by now
        let runs = lines(sandbox.root + "/runs")
        XCTAssertEqual(runs.count, 2, "caught up once, not once per missed interval")
        let times = runs.compactMap(Self.parseTimestamp)
        XCTAssertEqual(times.count, 2, "\(runs)")
        if times.count == 2 {
            // The catch-up run carries the latest missed instant: two or more intervals after the first run.
            XCTAssertGreaterThanOrEqual(times[1] - times[0], 2.9, "\(runs)")
        }
        XCTAssertEqual(lines(sandbox.root + "/stale").count, 0, "beyond catch_up_window: not run")
        // Waited for: both are logged before the catch-up run starts, but can reach stderr after its line.
        XCTAssertTrue(restarted.waitForStderr(containing: "was missed while watchkeeper was not running", timeout: 10), restarted.stderr)
        XCTAssertTrue(waitFor(10) { restarted.stderr.contains("task stale run") && restarted.stderr.contains("outcome=missed") }, restarted.stderr)
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
