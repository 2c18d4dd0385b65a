import XCTest

@testable import WatchkeeperCore

/// `next --from TIME`: the forms systemd-analyze's --base-time takes, read in the machine's
/// zone unless one is named.
final class BaseTimeTests: XCTestCase {
    private func parse(_ text: String, machine: String = "Europe/Berlin") throws -> Int64 {
        try BaseTime.parse(text) { try TimeZoneRules.load(identifier: machine) }.secondsSinceEpoch
    }

    func testForms_secondsDatesTimesAndZones() throws {
        XCTAssertEqual(try parse("@1824897600"), 1_824_897_600)
        XCTAssertEqual(try parse("2027-10-30"), 1_824_847_200)  // 00:00 CEST
        XCTAssertEqual(try parse("2027-10-30 14:00"), 1_824_897_600)
        XCTAssertEqual(try parse("2027-10-30T14:00:00"), 1_824_897_600)
        XCTAssertEqual(try parse("2027-10-30 12:00 UTC"), 1_824_897_600)
        XCTAssertEqual(try parse("2027-10-30T12:00:00Z"), 1_824_897_600)
        XCTAssertEqual(try parse("2027-10-30 08:00 America/New_York"), 1_824_897_600)
    }

    func testAWallTimeShownTwice_isItsFirst_andOneSkipped_isTheGapsEnd() throws {
        XCTAssertEqual(try parse("2027-10-31 02:30"), 1_824_942_600)  // 02:30 CEST, not CET
        XCTAssertEqual(try parse("2027-03-28 02:30"), 1_806_195_600)  // 03:00 CEST, the gap's end
    }

    func testRefusals_sayWhatToWrite() {
        for text in ["next tuesday", "2027-13-01", "2027-02-30", "@-5", "2027-10-30 25:00", "2027-10-30 12:00 Nowhere/City", "27-10-30"] {
            XCTAssertThrowsError(try parse(text), text) { error in
                XCTAssertTrue("\(error)".hasSuffix("write @SECONDS or YYYY-MM-DD [HH:MM[:SS]] [ZONE]"), "\(error)")
            }
        }
    }
}
