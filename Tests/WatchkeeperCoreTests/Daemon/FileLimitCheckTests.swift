import XCTest

@testable import WatchkeeperCore

/// The verdict on RLIMIT_NOFILE, from the numbers alone.
final class FileLimitCheckTests: XCTestCase {
    func testBeforeTheCount_onlyALimitTooLowForAnyDaemonIsRefused() {
        let check = FileLimitCheck()
        guard case .refuse(let message) = check.verdict(soft: 38, hard: 38, maxJobs: 4, startOnly: true) else {
            return XCTFail("38 descriptors are refused: 30 for the daemon, 7 for a job, 2 in passing")
        }
        XCTAssertTrue(message.contains("RLIMIT_NOFILE=38 (hard 38)"), message)
        XCTAssertTrue(message.contains("to at least 39, and to 60 for max_jobs = 4"), message)
        XCTAssertEqual(check.verdict(soft: 39, hard: 39, maxJobs: 4, startOnly: true), .fine, "the warning waits for the count")
    }

    func testAfterTheCount_whatTheDaemonHoldsDecides() {
        var check = FileLimitCheck()
        check.measure(counted: 50, soft: 64)
        guard case .refuse = check.verdict(soft: 58, hard: 58, maxJobs: 1) else { return XCTFail("50 held + 7 + 2 > 58") }
        guard case .warn(let warning) = check.verdict(soft: 64, hard: 64, maxJobs: 4) else { return XCTFail("room for 2 jobs of 4") }
        XCTAssertTrue(warning.contains("7 per job + the daemon's 50 + 2 = 80"), warning)
        XCTAssertEqual(check.verdict(soft: 80, hard: 1024, maxJobs: 4), .fine)
    }

    func testACountTheDaemonCouldNotTake_isTheLimitReached() {
        var check = FileLimitCheck()
        check.measure(counted: nil, soft: 45)
        XCTAssertEqual(check.held, 45)
        guard case .refuse = check.verdict(soft: 45, hard: 45, maxJobs: 1) else { return XCTFail("no descriptor free is no room for a job") }
    }

    func testACountBelowTheLeastAnyDaemonHolds_isRaisedToIt() {
        var check = FileLimitCheck()
        check.measure(counted: 11, soft: 20)
        XCTAssertEqual(check.held, FileLimitCheck.descriptorsForTheDaemonAtLeast, "opens that failed at the limit do not make room")
    }
}
