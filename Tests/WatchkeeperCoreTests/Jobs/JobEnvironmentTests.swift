import XCTest

@testable import WatchkeeperCore

final class JobEnvironmentTests: XCTestCase {
    private func variables(_ block: [[UInt8]]) -> [String] { block.map { String(decoding: $0, as: UTF8.self) } }

    func testBlock_holdsTheSharedVariables_withTheSettingsOverTheDaemons_andTheBudgetOverTheSettings() {
        var settings = JobSettings(command: .shell("true"))
        settings.environment = ["PATH": "/opt/bin", "MODE": "fast", "WATCHKEEPER_BUDGET_SECONDS": "1"]
        settings.budget = .seconds(90)
        let shared = JobEnvironment(key: JobKey(.watch, "inbox"), settings: settings, daemonEnvironment: ["PATH": "/usr/bin", "TZ": "UTC", "SECRET": "x"],
                                    account: Account(name: "svc", home: "/var/lib/svc", shell: "/bin/sh"))
        XCTAssertEqual(variables(shared.block(adding: [])), [
            "HOME=/var/lib/svc", "LOGNAME=svc", "MODE=fast", "PATH=/opt/bin", "SHELL=/bin/sh", "TZ=UTC", "USER=svc",
            "WATCHKEEPER_BUDGET_SECONDS=90", "WATCHKEEPER_WATCH=inbox",
        ])
    }

    func testBlock_aJobsOwnVariablesReplaceSharedOnes_andTheLastOfTheSameNameWins() {
        var settings = JobSettings(command: .shell("true"))
        settings.environment = ["WATCHKEEPER_RUN_ID": "from-settings"]
        let shared = JobEnvironment(key: JobKey(.task, "backup"), settings: settings, daemonEnvironment: [:], account: nil)
        let block = variables(shared.block(adding: [("WATCHKEEPER_RUN_ID", Array("r1".utf8)), ("WATCHKEEPER_ATTEMPT", Array("1".utf8)),
                                                    ("WATCHKEEPER_ATTEMPT", Array("2".utf8))]))
        XCTAssertEqual(block.filter { $0.hasPrefix("WATCHKEEPER_RUN_ID=") }, ["WATCHKEEPER_RUN_ID=r1"])
        XCTAssertEqual(block.filter { $0.hasPrefix("WATCHKEEPER_ATTEMPT=") }, ["WATCHKEEPER_ATTEMPT=2"])
        XCTAssertTrue(block.contains("PATH=\(JobEnvironment.defaultPath)"))
        XCTAssertTrue(block.contains("WATCHKEEPER_TASK=backup"))
    }
}
