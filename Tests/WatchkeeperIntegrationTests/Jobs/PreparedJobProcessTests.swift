import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The process that waits to become the next job (wk-next-job, Sources/CWatchkeeperSpawn/
/// prepared.c), seen from outside the daemon: made after a job, becomes the next one, and
/// never outlives the daemon, however the daemon ends.
final class PreparedJobProcessTests: WatchTestCase {
    private static let name = "wk-next-job"

    override func setUpWithError() throws {
        // Built without prepared children (prepared.c): ThreadSanitizer's build forks every
        // job, and only x86_64 and aarch64 children make raw system calls.
        #if WATCHKEEPER_TSAN || !(arch(x86_64) || arch(arm64))
        throw XCTSkip("no prepared children in this build or on this architecture")
        #endif
        try super.setUpWithError()
    }

    private func comm(_ pid: pid_t) -> String? {
        (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .newlines)
    }

    /// Named wk-next-job and not a zombie (one that exited keeps its name until reaped, and
    /// after the daemon's death its new parent reaps it).
    private func isWaiting(_ pid: pid_t) -> Bool {
        guard comm(pid) == Self.name, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        return !stat[close...].hasPrefix(") Z")
    }

    /// The daemon's children waiting as the next job.
    private func prepared() -> [pid_t] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.pid)/task")) ?? []
        let children = tasks.flatMap { task in
            ((try? String(contentsOfFile: "/proc/\(daemon.pid)/task/\(task)/children", encoding: .utf8)) ?? "").split(separator: " ").compactMap { pid_t($0) }
        }
        return children.filter(isWaiting)
    }

    private func startAndRunOne() throws -> pid_t? {
        try start("""
            [[watch]]
            name = "inbox"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        XCTAssertEqual(prepared(), [], "nothing is prepared before a job has run")
        write("first.csv")
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        return waitForValue(10, every: .milliseconds(10)) { self.prepared().first }
    }

    func testAfterAJob_aProcessWaitsAsTheNext_andTheNextFileRunsInIt() throws {
        let waiting = try XCTUnwrap(try startAndRunOne(), "no wk-next-job after the first job; stderr:\n\(daemon.stderr)")
        write("second.csv")
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == 2 }, daemon.stderr)
        // It became the job (its name is the job's now), and another waits after that job.
        XCTAssertFalse(isWaiting(waiting))
        XCTAssertNotNil(waitForValue(10, every: .milliseconds(10)) { self.prepared().first { $0 != waiting } })
        daemon.stop(within: 10)
    }

    /// A hook spawns after every job; it makes its own pipes and leaves the waiting process,
    /// which holds the reserve's, to the next job.
    func testWithAnOnSuccessHook_theNextFileStillRunsInTheWaitingProcess() throws {
        try start("""
            [[watch]]
            name = "inbox"
            path = "@DIR@/in"
            shell = true
            command = 'echo $$ >> @DIR@/pids'
            on_success = 'echo hook >> @DIR@/hooks'
            """)
        write("first.csv")
        XCTAssertTrue(waitFor(10) { self.lines(self.sandbox.root + "/hooks").count == 1 }, daemon.stderr)
        let waiting = try XCTUnwrap(waitForValue(10, every: .milliseconds(10)) { self.prepared().first },
                                    "no wk-next-job after a job and its hook; stderr:\n\(daemon.stderr)")
        write("second.csv")
        XCTAssertTrue(waitFor(10) { self.lines(self.sandbox.root + "/hooks").count == 2 }, daemon.stderr)
        XCTAssertEqual(lines(sandbox.root + "/pids").last, String(waiting), "the second job did not run in wk-next-job \(waiting)")
        daemon.stop(within: 10)
    }

    func testWhenTheDaemonIsKilled_theWaitingProcessEndsToo() throws {
        let waiting = try XCTUnwrap(try startAndRunOne(), "no wk-next-job after the first job; stderr:\n\(daemon.stderr)")
        daemon.send(SIGKILL)
        XCTAssertNotNil(daemon.waitForExit(timeout: 10))
        // It reads EOF on its wake socket once the daemon's end is gone.
        XCTAssertTrue(waitFor(10) { !self.isWaiting(waiting) }, "wk-next-job \(waiting) outlived the daemon")
    }

    func testWhenTheDaemonStops_theWaitingProcessIsEnded() throws {
        let waiting = try XCTUnwrap(try startAndRunOne(), "no wk-next-job after the first job; stderr:\n\(daemon.stderr)")
        daemon.stop(within: 10)
        XCTAssertNil(comm(waiting), "wk-next-job \(waiting) is still there after a clean stop")
    }
}
