import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Every control command against a real running daemon, through the real CLI.
final class ControlCommandTests: ControlTestCase {
    static let tasks = """
        [[task]]
        name = "by-hand"
        manual = true
        budget = "10s"
        command = ["/bin/sh", "-c", "echo ran >> @DIR@/by-hand.out"]

        [[task]]
        name = "slow"
        manual = true
        budget = "20s"
        warn_at = "50%"
        kill_grace = "2s"
        shell = true
        command = '''
        echo "PROGRESS=42" >&"$WATCHKEEPER_PROGRESS_FD"
        echo "STATUS=copying part 3" >&"$WATCHKEEPER_PROGRESS_FD"
        echo started > @DIR@/slow.started
        sleep 30
        '''
        on_expire = '''echo "$WATCHKEEPER_EXPIRE_REASON" > @DIR@/slow.expired'''

        [[watch]]
        name = "inbox"
        path = "@DIR@/inbox"
        command = ["/bin/true", "{path}"]
        """

    func testTrigger_runsAManualTask_andHistoryShowsTheRun() throws {
        try startDaemon(Self.tasks)
        let trigger = try cli(["trigger", "by-hand"])
        XCTAssertEqual(trigger.status, 0, trigger.stderr)
        let runID = try XCTUnwrap(trigger.stdout.split(separator: " ").firstIndex(of: "run").map { trigger.stdout.split(separator: " ")[$0 + 1] })
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: self.sandbox.root + "/by-hand.out") })
        var history = try cli(["history", "by-hand"])
        XCTAssertTrue(waitFor(10) {
            history = (try? self.cli(["history", "by-hand"])) ?? history
            return history.stdout.contains(String(runID))
        }, history.stdout + history.stderr)
        let row = try XCTUnwrap(history.stdout.split(separator: "\n").first { $0.contains(runID) })
        XCTAssertTrue(row.contains(" ok "), String(row))
        XCTAssertTrue(row.contains(" 0 "), "exit code 0 in: \(row)")
    }

    func testTrigger_unknownTask_exits1WithAMessage() throws {
        try startDaemon(Self.tasks)
        let result = try cli(["trigger", "nope"])
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("no task named nope"), result.stderr)
    }

    func testStatus_showsTheRunningJobWithProgressAndBudgetBars_andNoEscapesWhenPiped() throws {
        try startDaemon(Self.tasks)
        XCTAssertEqual(try cli(["trigger", "slow"]).status, 0)
        var status = try cli(["status"])
        XCTAssertTrue(waitFor(10) {
            status = (try? self.cli(["status"])) ?? status
            // PROGRESS= and STATUS= are two lines: they may be applied in two updates.
            return status.stdout.contains("42%") && status.stdout.contains("copying part 3")
        }, status.stdout + status.stderr)
        XCTAssertEqual(status.status, 0)
        XCTAssertTrue(status.stdout.contains("● watchkeeper"), status.stdout)
        XCTAssertTrue(status.stdout.contains("slow (task)"), status.stdout)
        XCTAssertTrue(status.stdout.contains("progress [██████████"), status.stdout)
        XCTAssertTrue(status.stdout.contains("copying part 3"), status.stdout)
        XCTAssertTrue(status.stdout.contains("of 20s (warns at 10s)"), status.stdout)
        XCTAssertTrue(status.stdout.contains("inbox"), status.stdout)
        XCTAssertFalse(status.stdout.contains("\u{1B}"), "piped output has no escape codes")
        // A terminal without UTF-8 gets ASCII bars.
        let ascii = try cli(["status"], environment: ["LANG": "C"])
        XCTAssertTrue(ascii.stdout.contains("progress [##########"), ascii.stdout)
    }

    /// Piped, --follow prints a snapshot a second, one after the other, until interrupted.
    func testStatusFollow_printsASnapshotEverySecond_untilInterrupted() throws {
        try startDaemon(Self.tasks)
        let output = sandbox.root + "/follow.out"
        let follow = try DaemonProcess(arguments: ["status", "--follow", "--socket", socketPath],
                                       environment: ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"],
                                       stderrPath: sandbox.root + "/follow.err", stdoutPath: output)
        func snapshots() -> Int {
            ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").components(separatedBy: "● watchkeeper").count - 1
        }
        XCTAssertTrue(waitFor(15) { snapshots() >= 3 }, "snapshots so far: \(snapshots())")
        XCTAssertFalse(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("\u{1B}"), "no screen clearing when piped")
        follow.send(SIGINT)
        XCTAssertEqual(follow.waitForExit(timeout: 10), 128 + SIGINT, "Ctrl-C ends it")
    }

    func testCancel_expiresARunningRunThroughOnExpire_withReasonCancelled() throws {
        try startDaemon(Self.tasks)
        XCTAssertEqual(try cli(["trigger", "slow"]).status, 0)
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: self.sandbox.root + "/slow.started") })
        let runID = try XCTUnwrap(try runningRunIDs(task: "slow").first)
        let cancel = try cli(["cancel", runID])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertTrue(cancel.stdout.contains("is expiring"), cancel.stdout)
        XCTAssertTrue(waitFor(10) { (try? String(contentsOfFile: self.sandbox.root + "/slow.expired", encoding: .utf8)) == "cancelled\n" })
        XCTAssertTrue(daemon.waitForStderr(containing: "run \(runID): expired", timeout: 10), daemon.stderr)
        let again = try cli(["cancel", runID])
        XCTAssertEqual(again.status, 1, "a finished run is no longer there to cancel")
        XCTAssertTrue(again.stderr.contains("is waiting or running"), again.stderr)
    }

    func testCancel_aWaitingRun_cancelsItBeforeItStarts() throws {
        try startDaemon(Self.tasks, daemonSettings: "max_jobs = 1")
        XCTAssertEqual(try cli(["trigger", "slow"]).status, 0)
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: self.sandbox.root + "/slow.started") })
        let waiting = try cli(["trigger", "by-hand"])
        let runID = try XCTUnwrap(waiting.stdout.split(separator: " ").firstIndex(of: "run").map { String(waiting.stdout.split(separator: " ")[$0 + 1]) })
        let cancel = try cli(["cancel", runID])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertTrue(cancel.stdout.contains("was waiting and is cancelled"), cancel.stdout)
        let history = try cli(["history", "by-hand", "--json"])
        XCTAssertTrue(history.stdout.contains("\"cancelled\""), history.stdout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/by-hand.out"))
    }

    func testReload_reportsTheNewGeneration_andARefusalWithLineAndColumn() throws {
        try startDaemon(Self.tasks)
        let ok = try cli(["reload"])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertTrue(ok.stdout.contains("generation 2"), ok.stdout)
        try sandbox.writeConfig("[daemon]\nmax_jobs = \"many\"\n")
        let refused = try cli(["reload"])
        XCTAssertEqual(refused.status, 78)
        XCTAssertTrue(refused.stderr.contains("\(sandbox.configPath):2:12: daemon.max_jobs must be an integer"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("generation 2 stays in force"), refused.stderr)
    }

    /// 5,000 unknown keys: 20 errors and a count, in the reply, the log and the dump; not a
    /// line per key kept until the next good reload.
    func testReload_refusedWithThousandsOfErrors_listsTwentyAndHowManyMore() throws {
        try startDaemon(Self.tasks)
        let keys = (0 ..< 5_000).map { "unknown_key_\($0) = 1" }.joined(separator: "\n")
        try sandbox.writeConfig("[daemon]\n" + keys + "\n")
        let refused = try cli(["reload"])
        XCTAssertEqual(refused.status, 78, refused.stderr)
        let lines = refused.stderr.split(separator: "\n")
        XCTAssertEqual(lines.filter { $0.contains("unknown_key_") }.count, 20, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("... and 4980 more error(s), not listed"), refused.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "unable to reload", timeout: 10))
        let reloadLine = try XCTUnwrap(daemon.stderr.split(separator: "\n").first { $0.contains("unable to reload") })
        XCTAssertTrue(reloadLine.contains("5000 error(s)"), String(reloadLine))
        XCTAssertLessThan(reloadLine.utf8.count, 8_192, "the refusal's log line holds 20 errors, not 5,000")
        XCTAssertLessThan(daemon.stderr.utf8.count, 64 * 1024, "the log holds 20 errors and a count")
        let status = try cli(["status"])
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("and 4999 more"), status.stdout)
    }

    /// `watchkeeper reload` still loading a large file when the daemon stops: answered
    /// NotRunning (exit 75), not left to find its connection closed (exit 76).
    func testReloadStillLoadingWhenTheDaemonStops_isAnsweredNotRunning() throws {
        try startDaemon(Self.tasks)
        // Large enough that loading it outlasts a drain with nothing running.
        let keys = (0 ..< 200_000).map { "unknown_key_\($0) = 1" }.joined(separator: "\n")
        try sandbox.writeConfig("[daemon]\n" + keys + "\n")
        let reload = Process()
        reload.executableURL = URL(fileURLWithPath: DaemonProcess.binaryPath)
        reload.arguments = ["reload", "--socket", socketPath]
        let errors = Pipe()
        reload.standardError = errors
        reload.standardOutput = FileHandle.nullDevice
        try reload.run()
        // The reload is loading (RELOADING=1) before the stop.
        XCTAssertNotNil(notify.waitFor("RELOADING", "1", timeout: 10), "the reload did not begin")
        daemon.send(SIGTERM)
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        reload.waitUntilExit()
        XCTAssertEqual(reload.terminationStatus, 75, stderr + "\n" + daemon.stderrTail)
        XCTAssertTrue(stderr.contains("cannot do this now"), stderr)
    }

    func testDump_printsTheStateDump_asTextAndJSON() throws {
        try startDaemon(Self.tasks)
        let text = try cli(["dump"])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertTrue(text.stdout.hasPrefix("watchkeeper state dump #1 (watchkeeper dump)"), text.stdout)
        let json = try cli(["dump", "--json"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(object["format"] as? String, "watchkeeper.state-dump")
        XCTAssertEqual(object["sequence"] as? Int, 2)
        XCTAssertNotNil(object["control"])
    }

    func testMetrics_printsTheCurrentPrometheusText_withTheRunJustFinished() throws {
        try startDaemon(Self.tasks)
        XCTAssertEqual(try cli(["trigger", "by-hand"]).status, 0)
        var metrics = try cli(["metrics"])
        XCTAssertTrue(waitFor(10) {
            metrics = (try? self.cli(["metrics"])) ?? metrics
            return metrics.stdout.contains(#"watchkeeper_jobs_total{kind="task",name="by-hand",outcome="ok"} 1"#)
        }, metrics.stdout + metrics.stderr)
        XCTAssertEqual(metrics.status, 0)
        XCTAssertTrue(metrics.stdout.contains("# HELP watchkeeper_build_info"), metrics.stdout)
        XCTAssertTrue(metrics.stdout.contains(#"watchkeeper_jobs_total{kind="task",name="slow",outcome="failed"} 0"#), "every series from the start")
    }

    func testTasksAndWatches_listEveryEntry() throws {
        try startDaemon(Self.tasks)
        let tasks = try cli(["tasks"])
        XCTAssertEqual(tasks.status, 0, tasks.stderr)
        let taskLines = tasks.stdout.split(separator: "\n")
        XCTAssertTrue(taskLines[0].hasPrefix("TASK"), tasks.stdout)
        XCTAssertTrue(taskLines.contains { $0.hasPrefix("by-hand ") && $0.contains("only when triggered") }, tasks.stdout)
        XCTAssertTrue(taskLines.contains { $0.hasPrefix("slow ") }, tasks.stdout)
        let watches = try cli(["watches"])
        XCTAssertEqual(watches.status, 0, watches.stderr)
        XCTAssertTrue(watches.stdout.split(separator: "\n").contains { $0.hasPrefix("inbox ") && $0.contains(sandbox.root + "/inbox") && $0.contains(" inotify ") }, watches.stdout)
    }

    func testHistory_ofAWatch_listsTheFilesItHandled() throws {
        try startDaemon(Self.tasks)
        FileManager.default.createFile(atPath: sandbox.root + "/inbox/report.csv", contents: Data("x".utf8))
        var history = try cli(["history", "inbox"])
        XCTAssertTrue(waitFor(10) {
            history = (try? self.cli(["history", "inbox"])) ?? history
            return history.stdout.contains("report.csv")
        }, history.stdout + history.stderr)
        XCTAssertTrue(history.stdout.hasPrefix("STARTED"), history.stdout)
        let row = try XCTUnwrap(history.stdout.split(separator: "\n").first { $0.contains("report.csv") })
        XCTAssertTrue(row.contains(" ok "), String(row))
        XCTAssertTrue(row.contains(" 0 "), "the exit code: \(row)")
        XCTAssertTrue(row.range(of: " [0-9a-f]{16} ", options: .regularExpression) != nil, "the run ID: \(row)")
        XCTAssertEqual(try cli(["history", "nothing"]).status, 1)
    }

    func testCommands_whenNoDaemonRuns_sayItIsNotRunning_andExit69() throws {
        sandbox = try DaemonSandbox()
        let result = try cli(["status"])
        XCTAssertEqual(result.status, 69)
        XCTAssertTrue(result.stderr.contains("watchkeeper is not running"), result.stderr)
        XCTAssertTrue(result.stderr.contains(socketPath), result.stderr)
    }

    func testCommands_findTheSocketThroughTheConfiguration() throws {
        try startDaemon(Self.tasks, daemonSettings: "")
        // No --socket: the runtime_dir comes from the environment, as under systemd.
        let result = try cli(["tasks", "--config", sandbox.configPath], environment: ["RUNTIME_DIRECTORY": sandbox.runtimeDirectory], withSocket: false)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdout.contains("by-hand"), result.stdout)
    }

    func testSocket_isRemovedAtStop_andAStaleOneIsReplacedAtStart() throws {
        try startDaemon(Self.tasks)
        var info = stat()
        XCTAssertEqual(lstat(socketPath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o660)
        daemon.stop(within: 15)
        XCTAssertNotEqual(lstat(socketPath, &info), 0, "the socket is gone after a clean stop")
        // A socket file nobody listens on, as a killed daemon leaves it.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let bytes = Array(socketPath.utf8)
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(stale)
        daemon = try sandbox.startReady(notifySocket: notify)
        // Waited for: READY=1 waits at most 100 ms for the lines logged before it.
        XCTAssertTrue(daemon.waitForStderr(containing: "replaced a stale control socket", timeout: 10), daemon.stderr)
        XCTAssertEqual(try cli(["status"]).status, 0)
    }
}
