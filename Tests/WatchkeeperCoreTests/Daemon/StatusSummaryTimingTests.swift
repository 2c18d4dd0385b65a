import XCTest

@testable import WatchkeeperCore

final class StatusSummaryTimingTests: XCTestCase {
    func testAJobStarting_armsTheTimerOnce_untilItFires() {
        var timing = StatusSummaryTiming()
        XCTAssertEqual(timing.changed(running: 1), .arm)
        XCTAssertEqual(timing.changed(running: 2), .none, "armed already: the summary waits for the timer")
        XCTAssertTrue(timing.fired(running: 2, text: "a, b"))
        XCTAssertEqual(timing.changed(running: 1), .arm, "fired: the next change arms it again")
    }

    func testAJobEndingBeforeTheTimer_whenTheLineShowsNone_disarmsIt() {
        var timing = StatusSummaryTiming()
        XCTAssertEqual(timing.changed(running: 1), .arm)
        XCTAssertEqual(timing.changed(running: 0), .disarm, "a timer left armed would fire for nothing, on the next file's path")
        XCTAssertFalse(timing.pending)
        XCTAssertEqual(timing.changed(running: 0), .none, "nothing armed, nothing to disarm")
        XCTAssertEqual(timing.changed(running: 1), .arm)
    }

    func testJobsEnding_whenTheLineShowsThem_keepTheTimer_soTheLineIsCleared() {
        var timing = StatusSummaryTiming()
        XCTAssertEqual(timing.changed(running: 1), .arm)
        XCTAssertTrue(timing.fired(running: 1, text: "backup"))
        XCTAssertEqual(timing.changed(running: 0), .arm, "the line says one runs: it must be told none does")
        XCTAssertEqual(timing.changed(running: 1), .none)
        XCTAssertEqual(timing.changed(running: 0), .none, "still armed for the line's sake")
        XCTAssertTrue(timing.fired(running: 0, text: ""))
        XCTAssertEqual(timing.sent.running, 0)
        XCTAssertEqual(timing.changed(running: 1), .arm)
        XCTAssertEqual(timing.changed(running: 0), .disarm)
    }

    func testAFiring_handsTheSummaryOver_onlyWhenItDiffersFromWhatWasSent() {
        var timing = StatusSummaryTiming()
        _ = timing.changed(running: 1)
        XCTAssertTrue(timing.fired(running: 1, text: "import (batch 7)"))
        _ = timing.changed(running: 1)
        XCTAssertFalse(timing.fired(running: 1, text: "import (batch 7)"), "the same summary: no hop to the lifecycle queue")
        _ = timing.changed(running: 1)
        XCTAssertTrue(timing.fired(running: 1, text: "import (batch 8)"), "a job's progress changes the text")
        XCTAssertEqual(timing.sent.text, "import (batch 8)")
    }
}
