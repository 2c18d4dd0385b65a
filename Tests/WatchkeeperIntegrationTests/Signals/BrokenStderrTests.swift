import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's stderr is a pipe whose reader goes away (`watchkeeper run | logger` with
/// logger restarted): its next write raises SIGPIPE, whose default kills the process
/// silently. The daemon must go on, its jobs too.
final class BrokenStderrTests: XCTestCase {
    func testAReaderOfStderrThatGoesAway_doesNotKillTheDaemonNorStopItsJobs() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        let ran = sandbox.root + "/ran"
        try sandbox.writeConfig(DaemonSandbox.basicConfig + """

            [[task]]
            name = "chatty"
            every = "100ms"
            command = ["/bin/sh", "-c", "echo a line for stderr; echo x >> \(ran)"]
            """)
        let fifo = sandbox.root + "/stderr.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // A reader first, so the daemon's open for writing does not wait for one.
        let reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(reader, 0)
        let daemon = try DaemonProcess(arguments: ["run", "--config", sandbox.configPath],
                                       environment: sandbox.environment(notifySocket: notify), stderrPath: fifo)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), "no READY=1")
        close(reader)
        let runsAtClose = lineCount(ran)
        let deadline = Date().addingTimeInterval(10)
        while lineCount(ran) < runsAtClose + 10 && daemon.isRunning && Date() < deadline { usleep(20_000) }
        XCTAssertTrue(daemon.isRunning, "the daemon died once nobody read its stderr")
        XCTAssertGreaterThanOrEqual(lineCount(ran), runsAtClose + 10, "jobs stopped running once nobody read stderr")
        daemon.send(SIGTERM)
        XCTAssertEqual(daemon.waitForExit(timeout: 10), 0)
    }

    private func lineCount(_ path: String) -> Int {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").count
    }
}
