import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The real daemon writes its metrics file, the real node_exporter serves it, and a scrape
/// over loopback shows every series with the counts the SIGUSR1 dump gives.
final class NodeExporterScrapeTests: XCTestCase {
    private var sandbox: DaemonSandbox!
    private var daemon: DaemonProcess!

    override func tearDown() {
        if let daemon, daemon.isRunning { daemon.stop(within: 20) }
        daemon = nil
        sandbox = nil
    }

    /// Tasks that run once each, ok, failed and expired, and a watch rule that handles three files.
    private func startDaemon() throws -> String {
        sandbox = try DaemonSandbox()
        let textfiles = sandbox.root + "/textfile"
        for directory in [textfiles, sandbox.root + "/in"] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        try sandbox.writeConfig("""
            [daemon]
            log_level = "info"
            shutdown_grace = "5s"
            dump_component_timeout = "1s"
            metrics_file = "\(textfiles)/watchkeeper.prom"
            metrics_interval = "1s"

            [[task]]
            name = "good"
            every = "1h"
            run_on_start = true
            command = ["/bin/true"]

            [[task]]
            name = "bad"
            every = "1h"
            run_on_start = true
            command = ["/bin/false"]

            [[task]]
            name = "slow"
            every = "1h"
            run_on_start = true
            budget = "300ms"
            kill_grace = "300ms"
            command = ["/bin/sleep", "30"]

            [[watch]]
            name = "inbox"
            path = "\(sandbox.root)/in"
            command = ["/bin/true", "{path}"]
            """)
        daemon = try sandbox.startReady(notifySocket: try NotifySocket())
        for name in ["a", "b", "c"] {
            try "data".write(toFile: sandbox.root + "/in/\(name).csv", atomically: false, encoding: .utf8)
        }
        return textfiles
    }

    private static let expectedJobs: [(kind: String, name: String, outcome: String, count: Double)] = [
        ("task", "good", "ok", 1), ("task", "bad", "failed", 1), ("task", "slow", "expired", 1), ("watch", "inbox", "ok", 3),
    ]

    private func hasEveryExpectedJob(_ text: PrometheusText) -> Bool {
        Self.expectedJobs.allSatisfy { text.value("watchkeeper_jobs_total", ["kind": $0.kind, "name": $0.name, "outcome": $0.outcome]) == $0.count }
    }

    func testNodeExporterScrape_servesEverySeries_withTheJobCountsOfTheStateDump() throws {
        let textfiles = try startDaemon()
        let file = textfiles + "/watchkeeper.prom"
        // Every job has ended and the file written since says so.
        XCTAssertTrue(waitFor(20) {
            hasEveryExpectedJob(PrometheusText((try? String(contentsOfFile: file, encoding: .utf8)) ?? ""))
        }, "metrics file:\n\((try? String(contentsOfFile: file, encoding: .utf8)) ?? "none")\nstderr:\n\(daemon.stderr)")

        let exporter = try NodeExporter(textfileDirectory: textfiles, log: sandbox.root + "/node-exporter.log")
        let body = try XCTUnwrap(exporter.scrape(timeout: 10),
                                 "node_exporter did not answer: \((try? String(contentsOfFile: sandbox.root + "/node-exporter.log", encoding: .utf8)) ?? "")")
        let scrape = PrometheusText(body)
        XCTAssertEqual(scrape.malformed, [])
        XCTAssertEqual(scrape.value("node_textfile_scrape_error"), 0, "node_exporter could not read the file:\n\(body)")
        XCTAssertTrue(hasEveryExpectedJob(scrape), body)

        // Every family is served, with its type, and every configured task and rule has all its outcomes.
        for family in ["watchkeeper_jobs_total", "watchkeeper_job_expirations_total", "watchkeeper_inotify_overflows_total",
                       "watchkeeper_watchdog_pings_withheld_total", "watchkeeper_watch_rescans_total"] {
            XCTAssertEqual(scrape.types[family], "counter", family)
        }
        for family in ["watchkeeper_job_duration_seconds", "watchkeeper_job_start_latency_seconds"] {
            XCTAssertEqual(scrape.types[family], "histogram", family)
        }
        XCTAssertEqual(scrape.all("watchkeeper_jobs_total").count, 4 * 6)
        XCTAssertEqual(scrape.value("watchkeeper_job_expirations_total", ["name": "slow", "reason": "budget"]), 1)
        XCTAssertEqual(scrape.value("watchkeeper_job_duration_seconds_count", ["name": "inbox"]), 3)
        XCTAssertEqual(scrape.value("watchkeeper_job_start_latency_seconds_count", ["name": "inbox"]), 3)
        XCTAssertGreaterThan(scrape.value("watchkeeper_job_last_success_timestamp_seconds", ["name": "good"]) ?? 0, 1_700_000_000)
        XCTAssertGreaterThan(scrape.value("watchkeeper_job_last_failure_timestamp_seconds", ["name": "bad"]) ?? 0, 1_700_000_000)
        XCTAssertEqual(scrape.value("watchkeeper_job_last_success_timestamp_seconds", ["name": "bad"]), 0)
        XCTAssertEqual(scrape.value("watchkeeper_watch_directories_watched", ["watch": "inbox"]), 1)
        XCTAssertEqual(scrape.value("watchkeeper_config_last_reload_successful"), 1)
        XCTAssertEqual(scrape.value("watchkeeper_config_generation"), 1)
        XCTAssertEqual(scrape.all("watchkeeper_build_info").count, 1)

        // The same counts as the dump, outcome by outcome (the dump leaves out zeros).
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 10), daemon.stderr)
        let groups = try XCTUnwrap((state["jobs"] as? [String: Any])?["groups"] as? [[String: Any]])
        XCTAssertEqual(groups.count, 4)
        for group in groups {
            let kind = group["task"] != nil ? "task" : "watch"
            let name = try XCTUnwrap(group[kind] as? String)
            let outcomes = try XCTUnwrap(group["outcomes"] as? [String: Int])
            for series in scrape.all("watchkeeper_jobs_total", ["kind": kind, "name": name]) {
                let outcome = try XCTUnwrap(series.labels["outcome"])
                XCTAssertEqual(series.value, Double(outcomes[outcome] ?? 0), "\(kind) \(name) \(outcome): dump \(outcomes)")
            }
        }
        let watches = try XCTUnwrap(state["watches"] as? [String: Any])
        XCTAssertEqual(scrape.value("watchkeeper_inotify_overflows_total"), (watches["overflows"] as? Int).map(Double.init))
        let rule = try XCTUnwrap((watches["rules"] as? [[String: Any]])?.first)
        XCTAssertEqual(scrape.value("watchkeeper_watch_rescans_total", ["watch": "inbox"]), (rule["rescans"] as? Int).map(Double.init))
        let watchdog = try XCTUnwrap(state["watchdog"] as? [String: Any])
        XCTAssertEqual(scrape.value("watchkeeper_watchdog_pings_withheld_total"), (watchdog["pings_withheld"] as? Int).map(Double.init))
        let metrics = try XCTUnwrap(state["metrics"] as? [String: Any])
        XCTAssertEqual(metrics["file"] as? String, file)
        XCTAssertGreaterThan(metrics["writes"] as? Int ?? 0, 0)
    }
}
