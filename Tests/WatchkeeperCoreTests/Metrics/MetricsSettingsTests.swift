import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// `[daemon] metrics_file` and `metrics_interval`: parsed like every other key, with a
/// line:column error for each mistake.
final class MetricsSettingsTests: XCTestCase {
    func testDefaults_writeNoFile_every15s() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("[daemon]\n"))
        XCTAssertNil(configuration.daemon.metricsFile)
        XCTAssertEqual(configuration.daemon.metricsInterval, .seconds(15))
    }

    func testFileAndInterval_areRead() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [daemon]
            metrics_file = "/var/lib/prometheus/node-exporter/watchkeeper.prom"
            metrics_interval = "1m"
            """))
        XCTAssertEqual(configuration.daemon.metricsFile, "/var/lib/prometheus/node-exporter/watchkeeper.prom")
        XCTAssertEqual(configuration.daemon.metricsInterval, .seconds(60))
    }

    func testRelativeFile_isRefusedAtItsValue() {
        assertSingleConfigError("[daemon]\nmetrics_file = \"watchkeeper.prom\"\n", at: (2, 16),
                                #"daemon.metrics_file must be an absolute path, not the relative "watchkeeper.prom""#)
    }

    func testFileNotEndingInProm_isRefused_sinceNodeExporterWouldNeverReadIt() {
        assertSingleConfigError("[daemon]\nmetrics_file = \"/var/lib/watchkeeper/metrics.txt\"\n", at: (2, 16),
                                #"daemon.metrics_file = "/var/lib/watchkeeper/metrics.txt" must name a *.prom file: node_exporter's textfile collector reads no other"#)
        XCTAssertEqual(configErrors("[daemon]\nmetrics_file = \"/.prom\"\n").count, 1)
    }

    func testIntervalOutOfRangeOrMalformed_isRefusedAtItsValue() {
        assertSingleConfigError("[daemon]\nmetrics_interval = \"500ms\"\n", at: (2, 20),
                                #"daemon.metrics_interval = "500ms" is out of range (1s to 1h)"#)
        assertSingleConfigError("[daemon]\nmetrics_interval = 15\n", at: (2, 20),
                                "daemon.metrics_interval must be a string, not an integer")
    }
}
