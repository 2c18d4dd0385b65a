import XCTest

@testable import WatchkeeperCore

/// The key layout under the prefix, read back from any key a watch brings.
final class FleetKeysTests: XCTestCase {
    private let keys = FleetKeys(prefix: "/wk/prod")

    func testEveryKindOfKey_isReadBack() throws {
        let instant = try XCTUnwrap(WallTime(iso8601: "2026-11-28T17:00:00.000Z"))
        XCTAssertEqual(keys.parse(keys.fire("report", at: instant)), .fire(task: "report", instant: "2026-11-28T17:00:00.000Z"))
        XCTAssertEqual(keys.parse(keys.running("report")), .running(task: "report"))
        XCTAssertEqual(keys.parse(keys.file("inbox", FleetKeys.pathKey(Array("a b/%c".utf8)))), .file(rule: "inbox", relativeKey: "a%20b/%25c"))
        XCTAssertEqual(keys.parse(keys.member("web-1")), .member(name: "web-1"))
    }

    func testKeysOutsideTheLayout_areNothing() {
        for key in ["/wk/other/tasks/t/running", "/wk/prod/tasks/t", "/wk/prod/tasks/t/fires/a/b", "/wk/prod/tasks/t/runningx",
                    "/wk/prod/watches/inbox", "/wk/prod/watches/inbox/other/x", "/wk/prodx/members/a"] {
            XCTAssertNil(keys.parse(key), key)
        }
    }
}
