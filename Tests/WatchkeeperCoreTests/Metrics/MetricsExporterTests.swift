import Dispatch
import Foundation
import Logging
// A ThreadSanitizer build (make sanitize) brings its own Mutex from WatchkeeperCore.
#if WATCHKEEPER_TSAN
import struct Synchronization.Atomic
#else
import Synchronization
#endif
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A component reporting whatever the test sets, on a queue of its own that the test can
/// block as a stuck handler would.
private final class FakeContributor: MetricsContributor, @unchecked Sendable {
    let dumpSectionName: String
    let dumpQueue: SubsystemQueue
    private let samples: Mutex<[MetricSample]>

    init(_ name: String, _ samples: [MetricSample]) {
        dumpSectionName = name
        dumpQueue = SubsystemQueue(name: "fake-\(name)")
        self.samples = Mutex(samples)
    }

    func set(_ new: [MetricSample]) { samples.withLock { $0 = new } }
    func sampleMetrics() -> [MetricSample] { samples.withLock { $0 } }
    func describeForDump() -> DumpValue { .null }
}

final class MetricsExporterTests: ScratchDirectoryTestCase {
    private func settings(file: String?, timeout: Duration = .seconds(2)) -> DaemonSettings {
        var settings = DaemonSettings()
        settings.metricsFile = file
        settings.dumpComponentTimeout = timeout
        return settings
    }

    /// A write on the exporter's queue, waited for.
    private func writeNow(_ exporter: MetricsExporter) {
        let done = DispatchSemaphore(value: 0)
        exporter.writeNow { done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "no write within 10 s")
    }

    func testCountersAndGauges_areTheOwnersValuesAsTheyAre_evenWhenACountStartsAgain() throws {
        let owner = FakeContributor("watches", [
            MetricSample(MetricCatalog.rescans, ["inbox"], count: 7),
            MetricSample(MetricCatalog.filesSettling, ["inbox"], value: 3),
        ])
        let exporter = makeExporter(contributors: [owner])
        var text = try rendered(exporter)
        XCTAssertEqual(text.value("watchkeeper_watch_rescans_total", ["watch": "inbox"]), 7)
        XCTAssertEqual(text.value("watchkeeper_watch_files_settling", ["watch": "inbox"]), 3)
        XCTAssertEqual(text.types["watchkeeper_watch_rescans_total"], "counter")
        // A rule set up again by a reload counts from 0: the export follows, it does not add.
        owner.set([MetricSample(MetricCatalog.rescans, ["inbox"], count: 2), MetricSample(MetricCatalog.filesSettling, ["inbox"], value: 0)])
        text = try rendered(exporter)
        XCTAssertEqual(text.value("watchkeeper_watch_rescans_total", ["watch": "inbox"]), 2)
        XCTAssertEqual(text.value("watchkeeper_watch_files_settling", ["watch": "inbox"]), 0)
    }

    func testSeriesNoLongerReported_isDropped_butAStuckOwnerKeepsItsSeries() throws {
        let watches = FakeContributor("watches", [
            MetricSample(MetricCatalog.rescans, ["old"], count: 1),
            MetricSample(MetricCatalog.rescans, ["kept"], count: 4),
        ])
        let watchdog = FakeContributor("watchdog", [MetricSample(MetricCatalog.pingsWithheld, count: 5)])
        let exporter = makeExporter(contributors: [watches, watchdog], settings: settings(file: nil, timeout: .milliseconds(200)))
        XCTAssertEqual(try rendered(exporter).all("watchkeeper_watch_rescans_total").count, 2)

        watches.set([MetricSample(MetricCatalog.rescans, ["kept"], count: 4)])
        watchdog.set([])
        let release = DispatchSemaphore(value: 0)
        watchdog.dumpQueue.async { release.wait() }
        let text = try rendered(exporter)
        release.signal()
        XCTAssertEqual(text.all("watchkeeper_watch_rescans_total").map { $0.labels["watch"] }, ["kept"])
        // It did not answer within the deadline: its last values stay, nothing is dropped.
        XCTAssertEqual(text.value("watchkeeper_watchdog_pings_withheld_total"), 5)
    }

    func testMetricsFile_isWrittenReadableByOthers_andAReloadMovesIt_andUnsetRemovesIt() throws {
        let first = directory + "/first.prom"
        let second = directory + "/second.prom"
        let exporter = makeExporter(contributors: [FakeContributor("watchdog", [MetricSample(MetricCatalog.pingsSent, count: 9)])],
                                    settings: settings(file: first))
        writeNow(exporter)
        let written = try String(contentsOfFile: first, encoding: .utf8)
        XCTAssertEqual(PrometheusText(written).value("watchkeeper_watchdog_pings_sent_total"), 9)
        var status = stat()
        XCTAssertEqual(stat(first, &status), 0)
        XCTAssertEqual(status.st_mode & 0o777, 0o644)

        exporter.apply(settings(file: second))
        writeNow(exporter)
        XCTAssertFalse(FileManager.default.fileExists(atPath: first), "the old file is left for node_exporter to export for ever")
        XCTAssertTrue(FileManager.default.fileExists(atPath: second))

        exporter.apply(settings(file: nil))
        writeNow(exporter)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [])
    }

    func testFailedWrites_areLoggedOnceWithPathAndCause_untilOneSucceeds() throws {
        let log = RecordedLog()
        let missing = directory + "/collector"
        let exporter = makeExporter(settings: settings(file: missing + "/watchkeeper.prom"), logger: log.logger)
        for _ in 0..<3 { writeNow(exporter) }
        let warnings = log.messages.filter { $0.level == .warning }.map(\.message)
        XCTAssertEqual(warnings.count, 1, "\(warnings)")
        XCTAssertTrue(warnings.first?.contains("unable to write \(missing)/watchkeeper.prom: open \(missing): No such file or directory") == true,
                      "\(warnings)")

        XCTAssertEqual(mkdir(missing, 0o755), 0)
        writeNow(exporter)
        writeNow(exporter)
        XCTAssertTrue(FileManager.default.fileExists(atPath: missing + "/watchkeeper.prom"))
        let notices = log.messages.filter { $0.level == .notice }.map(\.message)
        XCTAssertEqual(notices, ["writing the metrics to \(missing)/watchkeeper.prom again"])

        // A new failure after a success is news again.
        XCTAssertEqual(chmod(missing, 0o777), 0)
        writeNow(exporter)
        XCTAssertEqual(log.messages.filter { $0.level == .warning }.count, 2)
    }

    func testSortedByFamily_ordersFamiliesAndSeries_keepingEachHistogramsLinesTogetherAndInOrder() {
        let counterType = "# TYPE b_total counter"
        let counterZ = #"b_total{name="z"} 1"#
        let counterA = #"b_total{name="a"} 2"#
        let histogramType = "# TYPE a_seconds histogram"
        // A label value ending in _sum must not split a histogram's lines.
        let histogramY = [#"a_seconds_bucket{name="y",le="1.0"} 1"#, #"a_seconds_bucket{name="y",le="+Inf"} 1"#,
                          #"a_seconds_sum{name="y"} 0.5"#, #"a_seconds_count{name="y"} 1"#]
        let histogramX = [#"a_seconds_bucket{name="x_sum",le="1.0"} 0"#, #"a_seconds_bucket{name="x_sum",le="+Inf"} 2"#,
                          #"a_seconds_sum{name="x_sum"} 4.0"#, #"a_seconds_count{name="x_sum"} 2"#]
        let emitted = [counterType, counterZ, counterA, histogramType] + histogramY + histogramX
        let sorted = [histogramType] + histogramX + histogramY + [counterType, counterA, counterZ]
        XCTAssertEqual(MetricsExporter.sortedByFamily(emitted.joined(separator: "\n") + "\n"), sorted.joined(separator: "\n") + "\n")
    }
}
