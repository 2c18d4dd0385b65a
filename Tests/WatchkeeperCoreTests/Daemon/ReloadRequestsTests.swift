import XCTest

@testable import WatchkeeperCore

/// Which reload answers which caller, as a value.
final class ReloadRequestsTests: XCTestCase {
    private final class Answers: @unchecked Sendable {
        var seen: [String] = []
        func reply(_ name: String) -> ControlReply { { _ in self.seen.append(name) } }
    }

    func testACallerDuringAReload_isAnsweredByTheNextOne_whichASecondRequestStarts() {
        var reloads = ReloadRequests()
        let answers = Answers()
        reloads.wait(answers.reply("first"))
        XCTAssertTrue(reloads.begin())
        reloads.wait(answers.reply("during"))
        XCTAssertFalse(reloads.begin(), "a second reload while one reads the file")
        let (answered, again) = reloads.finished()
        answered.forEach { $0(.success([])) }
        XCTAssertEqual(answers.seen, ["first"], "the caller during the reload read an older file")
        XCTAssertTrue(again)
        XCTAssertTrue(reloads.begin())
        reloads.finished().answered.forEach { $0(.success([])) }
        XCTAssertEqual(answers.seen, ["first", "during"])
    }

    func testStopping_takesEveryoneStillWaiting() {
        var reloads = ReloadRequests()
        let answers = Answers()
        reloads.wait(answers.reply("a"))
        _ = reloads.begin()
        reloads.wait(answers.reply("b"))
        _ = reloads.begin()
        reloads.takeAll().forEach { $0(.success([])) }
        XCTAssertEqual(answers.seen, ["a", "b"])
        XCTAssertFalse(reloads.finished().again, "no reload after a stop")
    }
}
