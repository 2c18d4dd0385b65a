import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The metrics file over the daemon's life: written at start, moved by a reload, and
/// written one last time when the drain ends, with the counts of the jobs it waited for.
final class MetricsFileTests: XCTestCase {
    private func config(metricsFile: String, root: String) -> String {
        """
        [daemon]
        log_level = "info"
        shutdown_grace = "20s"
        dump_component_timeout = "1s"
        metrics_file = "\(metricsFile)"
        metrics_interval = "1h"

        [[task]]
        name = "late"
        every = "1h"
        run_on_start = true
        command = ["/bin/sh", "-c", "touch \(root)/started; sleep 5"]
        """
    }

    private func metrics(_ path: String) -> PrometheusText? {
        (try? String(contentsOfFile: path, encoding: .utf8)).map(PrometheusText.init)
    }

    func testReload_movesTheFile_andTheDrainWritesTheFinalCounts() throws {
        let sandbox = try DaemonSandbox()
        let first = sandbox.root + "/first.prom"
        let second = sandbox.root + "/second.prom"
        try sandbox.writeConfig(config(metricsFile: first, root: sandbox.root))
        let notify = try NotifySocket()
        let daemon = try sandbox.startReady(notifySocket: notify)
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: sandbox.root + "/started") }, daemon.stderr)
        let atStart = try XCTUnwrap(waitForValue(10) { metrics(first) }, daemon.stderr)
        XCTAssertEqual(atStart.value("watchkeeper_jobs_total", ["name": "late", "outcome": "ok"]), 0)

        try sandbox.writeConfig(config(metricsFile: second, root: sandbox.root))
        daemon.send(SIGHUP)
        XCTAssertTrue(waitFor(10) {
            metrics(second)?.value("watchkeeper_config_generation") == 2 && !FileManager.default.fileExists(atPath: first)
        }, "first: \(FileManager.default.fileExists(atPath: first)), second: \(String(describing: metrics(second)?.value("watchkeeper_config_generation")))\n\(daemon.stderr)")
        XCTAssertEqual(metrics(second)?.value("watchkeeper_jobs_running"), 1)

        // metrics_interval is an hour: only the write at the end of the drain can show the run's end.
        daemon.stop(within: 30)
        let final = try XCTUnwrap(metrics(second))
        XCTAssertEqual(final.value("watchkeeper_jobs_total", ["name": "late", "outcome": "ok"]), 1, daemon.stderr)
        XCTAssertEqual(final.value("watchkeeper_jobs_running"), 0)
        let state = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: sandbox.statePath))) as? [String: Any])
        let group = try XCTUnwrap(((state["jobs"] as? [String: Any])?["groups"] as? [[String: Any]])?.first)
        XCTAssertEqual(group["outcomes"] as? [String: Int], ["ok": 1])
    }
}
