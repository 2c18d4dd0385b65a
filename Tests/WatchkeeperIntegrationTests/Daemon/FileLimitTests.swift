import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A hard RLIMIT_NOFILE too low for the daemon and one job: it used to report READY and
/// then handle nothing. It refuses to start, saying what to raise; a limit with room for
/// fewer jobs than max_jobs is only a warning, and jobs run.
final class FileLimitTests: XCTestCase {
    private func start(limit: Int, _ sandbox: DaemonSandbox, _ notify: NotifySocket) throws -> DaemonProcess {
        try sandbox.start(notifySocket: notify, launcher: ["/usr/bin/prlimit", "--nofile=\(limit):\(limit)", "--"])
    }

    func testALimitWithNoRoomForAJob_refusesToStart_namingTheLimitToRaise() throws {
        for limit in [20, 30, 38] {
            let sandbox = try DaemonSandbox()
            let notify = try NotifySocket()
            try sandbox.writeConfig(DaemonSandbox.basicConfig + """

                [[task]]
                name = "tick"
                every = "100ms"
                command = ["true"]
                """)
            let daemon = try start(limit: limit, sandbox, notify)
            XCTAssertEqual(daemon.waitForExit(timeout: 10 * testDeadlineScale), 71, "limit \(limit): \(daemon.stderr)")
            XCTAssertTrue(daemon.stderr.contains("unable to start: the open file limit RLIMIT_NOFILE=\(limit) (hard \(limit)) leaves no room for a job"),
                          "limit \(limit): \(daemon.stderr)")
            XCTAssertTrue(daemon.stderr.contains("raise LimitNOFILE= in the unit (or ulimit -Hn) to at least"), daemon.stderr)
            XCTAssertNil(notify.next(timeout: 0.2 * testDeadlineScale).flatMap { $0["READY"] }, "limit \(limit): READY=1 sent by a daemon that cannot run a job")
        }
    }

    func testALimitWithRoomForFewerJobsThanMaxJobs_warns_andJobsRun() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        let ran = sandbox.root + "/ran"
        try sandbox.writeConfig(DaemonSandbox.basicConfig + """

            max_jobs = 8

            [[task]]
            name = "tick"
            every = "100ms"
            command = ["/bin/sh", "-c", "echo x >> \(ran)"]
            """)
        let daemon = try start(limit: 48, sandbox, notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "open file limit RLIMIT_NOFILE=48 (hard 48) is below what max_jobs = 8 needs", timeout: 5),
                      daemon.stderr)
        XCTAssertTrue(waitFor(10) { ((try? String(contentsOfFile: ran, encoding: .utf8)) ?? "").count >= 10 }, "no job ran")
        daemon.stop(within: 10)
    }
}
