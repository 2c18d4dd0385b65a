import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Pins what docs/cron.md says of expressions that name dates that never occur: the
/// loader refuses them, where cron would accept them and never run them.
final class ConfigCronScheduleTests: XCTestCase {
    private func task(cron: String) -> String {
        "[[task]]\nname = \"a\"\ncommand = [\"/bin/true\"]\ncron = \"\(cron)\"\n"
    }

    func testParse_february30_isRefusedAtTheValue() {
        for expression in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 feb */2"] {
            guard case .failure(let errors) = ConfigLoader.parse(source: task(cron: expression), path: configPath, environment: [:]) else {
                XCTFail("\(expression) must be refused")
                continue
            }
            XCTAssertEqual(errors.description, "\(configPath):4:8: cron \"\(expression)\" for task.cron never matches a real date")
        }
    }

    func testParse_february29_isAccepted() throws {
        XCTAssertNoThrow(try ConfigLoader.parse(source: task(cron: "0 0 29 2 *"), path: configPath, environment: [:]).get())
    }

    func testParse_february30OrAMonday_isAccepted_sinceEitherDayFieldMatches() throws {
        XCTAssertNoThrow(try ConfigLoader.parse(source: task(cron: "0 0 30 2 mon"), path: configPath, environment: [:]).get())
    }
}
