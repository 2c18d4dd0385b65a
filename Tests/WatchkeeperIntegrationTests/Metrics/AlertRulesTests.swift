import Foundation
import WatchkeeperCore
import XCTest

/// The alert rules shipped in etc/prometheus: valid for Prometheus, firing when they should
/// (promtool's own rule unit tests), and about series the daemon really exports.
final class AlertRulesTests: XCTestCase {
    private static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("etc/prometheus").path
    private static let promtool = "/usr/bin/promtool"

    private func promtool(_ arguments: [String]) throws -> (status: Int32, output: String) {
        guard FileManager.default.isExecutableFile(atPath: Self.promtool) else {
            XCTFail("no \(Self.promtool): install Debian's prometheus package (make deps does)")
            throw XCTSkip("promtool is not installed")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.promtool)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: Self.directory)
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    func testAlertRules_passPromtoolsCheck_andFireAsItsRuleUnitTestsExpect() throws {
        let check = try promtool(["check", "rules", "watchkeeper-alerts.yml"])
        XCTAssertEqual(check.status, 0, check.output)
        XCTAssertTrue(check.output.contains("SUCCESS: 5 rules found"), check.output)
        let test = try promtool(["test", "rules", "watchkeeper-alerts.test.yml"])
        XCTAssertEqual(test.status, 0, test.output)
    }

    /// A rule about a misspelt or renamed series would never fire, and promtool cannot know.
    func testAlertRulesAndTheirTests_nameOnlySeriesTheDaemonExports() throws {
        var exported = Set<String>()
        for family in MetricCatalog.all {
            exported.insert(family.name)
            if family.kind == .histogram { exported.formUnion(["_bucket", "_sum", "_count"].map { family.name + $0 }) }
        }
        for file in ["watchkeeper-alerts.yml", "watchkeeper-alerts.test.yml"] {
            let text = try String(contentsOfFile: Self.directory + "/" + file, encoding: .utf8)
            let used = Set(text.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") })
                .map(String.init).filter { $0.hasPrefix("watchkeeper_") })
            XCTAssertFalse(used.isEmpty, file)
            XCTAssertEqual(used.subtracting(exported).sorted(), [], "\(file) names series the daemon does not export")
        }
    }
}
