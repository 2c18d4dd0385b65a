import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The sd_notify conversation, observed on a real datagram socket as systemd would.
final class NotifyProtocolTests: XCTestCase {
    func testReady_carriesAStatusLine() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify)
        let ready = try XCTUnwrap(notify.waitFor("READY", "1", timeout: 10), "stderr:\n\(daemon.stderr)")
        let status = try XCTUnwrap(ready["STATUS"])
        XCTAssertTrue(status.hasPrefix("running; config generation 1"), status)
        // Waited for: READY=1 waits at most 100 ms for the ready line to be written.
        XCTAssertTrue(daemon.waitForReadyLine(), daemon.stderr)
        daemon.stop(within: 5)
    }

    func testReloadWithAValidFile_sendsReloadingWithMonotonicTimeThenReady_andAppliesIt() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        try sandbox.writeConfig(DaemonSandbox.basicConfig.replacingOccurrences(of: "shutdown_grace = \"5s\"", with: "shutdown_grace = \"7s\""))

        var before = timespec()
        clock_gettime(CLOCK_MONOTONIC, &before)
        daemon.send(SIGHUP)
        let reloading = try XCTUnwrap(notify.waitFor("RELOADING", "1"))
        var after = timespec()
        clock_gettime(CLOCK_MONOTONIC, &after)
        let monotonic = try XCTUnwrap(reloading["MONOTONIC_USEC"].flatMap(UInt64.init), "RELOADING=1 without MONOTONIC_USEC")
        let lower = UInt64(before.tv_sec) * 1_000_000 + UInt64(before.tv_nsec) / 1_000
        let upper = UInt64(after.tv_sec) * 1_000_000 + UInt64(after.tv_nsec) / 1_000
        XCTAssertTrue((lower...upper).contains(monotonic), "MONOTONIC_USEC \(monotonic) is not CLOCK_MONOTONIC now (\(lower)...\(upper))")
        let ready = try XCTUnwrap(notify.waitFor("READY", "1"))
        XCTAssertTrue(ready["STATUS"]?.contains("config generation 2") ?? false, ready["STATUS"] ?? "no STATUS")

        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let config = try XCTUnwrap((state["daemon"] as? [String: Any])?["config"] as? [String: Any])
        XCTAssertEqual(config["generation"] as? Int, 2)
        XCTAssertEqual(config["shutdown_grace"] as? String, "7s")
        XCTAssertEqual((config["last_reload"] as? [String: Any])?["result"] as? String, "ok")
        daemon.stop(within: 5)
    }

    func testReloadWithABrokenFile_keepsTheOldConfiguration_andReportsEveryError() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        try sandbox.writeConfig("""
            [daemon]
            log_level = "info"
            shutdown_grace = "forever"
            bogus_key = 1
            """)
        daemon.send(SIGHUP)
        XCTAssertNotNil(notify.waitFor("RELOADING", "1"))
        let ready = try XCTUnwrap(notify.waitFor("READY", "1"))
        let status = try XCTUnwrap(ready["STATUS"])
        XCTAssertTrue(status.contains("config generation 1"), status)
        XCTAssertTrue(status.contains("last reload FAILED"), status)
        XCTAssertTrue(daemon.waitForStderr(containing: "unable to reload", timeout: 2))
        XCTAssertTrue(daemon.stderr.contains("\(sandbox.configPath):3:18: bad duration \"forever\""), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("\(sandbox.configPath):4:1: unknown key \"bogus_key\""), daemon.stderr)

        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let config = try XCTUnwrap((state["daemon"] as? [String: Any])?["config"] as? [String: Any])
        XCTAssertEqual(config["generation"] as? Int, 1)
        XCTAssertEqual(config["shutdown_grace"] as? String, "5s", "the old configuration must stay in force")
        let lastReload = try XCTUnwrap(config["last_reload"] as? [String: Any])
        XCTAssertEqual(lastReload["result"] as? String, "failed")
        XCTAssertEqual((lastReload["errors"] as? [String])?.count, 2)
        XCTAssertTrue(daemon.isRunning)
        daemon.stop(within: 5)
    }

    /// Tasks and watches keep their state in one place: a reload that moves it is refused
    /// whole, with the reason, and the old configuration stays in force.
    func testReloadThatChangesStateDir_isRefused_andTheOldStateDirStays() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        try sandbox.writeConfig(DaemonSandbox.basicConfig + "\nstate_dir = \"\(sandbox.root)/elsewhere\"\n")
        daemon.send(SIGHUP)
        let ready = try XCTUnwrap(notify.waitFor("READY", "1"))
        XCTAssertTrue(ready["STATUS"]?.contains("last reload FAILED") ?? false, "\(ready)")
        XCTAssertTrue(daemon.waitForStderr(containing: "state_dir cannot change on reload", timeout: 2), daemon.stderr)
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let config = try XCTUnwrap((state["daemon"] as? [String: Any])?["config"] as? [String: Any])
        XCTAssertEqual(config["state_dir"] as? String, sandbox.root + "/state")
        XCTAssertEqual(config["generation"] as? Int, 1)
        daemon.stop(within: 5)
    }

    /// EMFILE in a burst is a lost job: a limit too small for max_jobs is named at start.
    func testAnOpenFileLimitTooSmallForMaxJobs_isWarnedAboutAtStart_withTheNumbers() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig + "\nmax_jobs = 64\n")
        var saved = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved), 0)
        var small = rlimit(rlim_cur: 256, rlim_max: 256)
        XCTAssertEqual(setrlimit(Int32(RLIMIT_NOFILE.rawValue), &small), 0)
        let daemon: DaemonProcess
        do {
            defer { _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved) }
            daemon = try sandbox.start(notifySocket: notify)
        }
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "RLIMIT_NOFILE=256 (hard 256) is below what max_jobs = 64 needs: 7 per job + the daemon's ", timeout: 2),
                      daemon.stderr)
        daemon.stop(within: 5)
    }

    func testTerminate_sendsStoppingAndLeavesAFinalStateFile() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        daemon.send(SIGTERM)
        let stopping = try XCTUnwrap(notify.waitFor("STOPPING", "1"))
        XCTAssertTrue(stopping["STATUS"]?.hasPrefix("stopping on SIGTERM") ?? false, stopping["STATUS"] ?? "")
        XCTAssertEqual(daemon.waitForExit(timeout: 5), 0)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 1))
        XCTAssertEqual(state["reason"] as? String, "stopped")
        XCTAssertEqual((state["stuck_components"] as? [Any])?.count, 0, "nothing may look stuck while stopping")
        XCTAssertTrue(daemon.stderr.contains("stopped after draining"), daemon.stderr)
    }

    func testWatchdog_pingsAtHalfTheIntervalWhileEveryQueueAnswers() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHDOG_USEC": "200000"])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        // Eight pings, however long a loaded machine takes to deliver them; then their spacing.
        var pings: [NotifySocket.Message] = []
        let deadline = Date().addingTimeInterval(15)
        while pings.count < 8, Date() < deadline {
            if let message = notify.next(timeout: 0.1), message["WATCHDOG"] == "1" { pings.append(message) }
        }
        XCTAssertEqual(pings.count, 8, "stderr:\n\(daemon.stderr)")
        // Half of WATCHDOG_USEC (100 ms): the typical gap stays well inside systemd's 200 ms.
        let gaps = zip(pings, pings.dropFirst()).map { $1.receivedAt.timeIntervalSince($0.receivedAt) }.sorted()
        XCTAssertLessThan(gaps.isEmpty ? .infinity : gaps[gaps.count / 2], 0.2, "gaps between pings: \(gaps)")
        daemon.stop(within: 5)
    }

    func testWatchdog_isWithheldWhileAQueueIsBlocked_andTheDumpReportsItStuck() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify, extra: [
            "WATCHDOG_USEC": "200000",
            "WATCHKEEPER_TEST_STALL": "lifecycle:2s:500ms",
        ])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        let started = Date()
        // Ask for a dump in the middle of the stall.
        var dumpRequested = false
        var messages: [NotifySocket.Message] = []
        // At least 4 s, and on until a ping came after the stall ended (2.5 s), however late.
        func resumed() -> Bool { messages.contains { $0["WATCHDOG"] == "1" && $0.receivedAt.timeIntervalSince(started) > 2.6 } }
        while Date().timeIntervalSince(started) < 4 || (!resumed() && Date().timeIntervalSince(started) < 15) {
            if !dumpRequested && Date().timeIntervalSince(started) > 1.2 {
                daemon.send(SIGUSR1)
                dumpRequested = true
            }
            if let message = notify.next(timeout: 0.05) { messages.append(message) }
        }
        let pingTimes = messages.filter { $0["WATCHDOG"] == "1" }.map { $0.receivedAt.timeIntervalSince(started) }
        XCTAssertFalse(pingTimes.isEmpty)
        let gaps = zip(pingTimes, pingTimes.dropFirst()).map { $1 - $0 }
        let longest = gaps.max() ?? 0
        XCTAssertGreaterThan(longest, 1.5, "pings kept coming while the lifecycle queue was blocked: \(pingTimes)")
        XCTAssertGreaterThan(pingTimes.last ?? 0, 2.6, "pings did not resume after the stall: \(pingTimes)")
        XCTAssertTrue(daemon.waitForStderr(containing: "queue watchkeeper.lifecycle stuck for", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("withholding the watchdog ping"), daemon.stderr)

        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let section = try XCTUnwrap(state["daemon"] as? [String: Any])
        XCTAssertEqual(section["stuck"] as? Bool, true, "the blocked component must be reported as stuck: \(section)")
        XCTAssertEqual(state["stuck_components"] as? [String], ["daemon"])
        let watchdog = try XCTUnwrap(state["watchdog"] as? [String: Any])
        XCTAssertEqual(watchdog["queues_stuck"] as? [String], ["watchkeeper.lifecycle"])
        daemon.stop(within: 10)
    }
}
