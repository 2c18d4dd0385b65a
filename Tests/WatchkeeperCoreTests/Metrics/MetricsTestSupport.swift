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

extension XCTestCase {
    /// The exporter's text, rendered on its queue, read back; a malformed line fails the test.
    func rendered(_ exporter: MetricsExporter, file: StaticString = #filePath, line: UInt = #line) throws -> PrometheusText {
        let text = EventRecorder<String, Never>()
        exporter.render { text.record($0) }
        let output = try XCTUnwrap(text.wait { !$0.isEmpty }.first, "no rendering within 10 s", file: file, line: line)
        let parsed = PrometheusText(output)
        XCTAssertEqual(parsed.malformed, [], file: file, line: line)
        return parsed
    }

    func makeExporter(contributors: [MetricsContributor] = [], settings: DaemonSettings = DaemonSettings(),
                      logger: Logger = Logger(label: "test")) -> MetricsExporter {
        MetricsExporter(queue: SubsystemQueue(name: "metrics-test"), contributors: contributors, sources: SourceRegistry(),
                        logger: logger, settings: settings)
    }
}

/// What a logger was asked to say, for tests of what is said once.
final class RecordedLog: LogHandler, @unchecked Sendable {
    private let entries = Mutex<[(level: Logger.Level, message: String)]>([])
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        entries.withLock { $0.append((event.level, event.message.description)) }
    }

    var messages: [(level: Logger.Level, message: String)] { entries.withLock { $0 } }

    var logger: Logger { Logger(label: "test") { _ in self } }
}
