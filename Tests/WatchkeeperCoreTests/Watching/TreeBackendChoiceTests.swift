import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore

/// Which backend a rule's tree has: the pure value's decisions, and the watcher acting on
/// them with fake backends (a fanotify that takes the tree, or refuses it).
final class TreeBackendChoiceTests: XCTestCase {
    func testTheDecisions_byMethodAndEvent() {
        struct Row {
            let method: WatchMethod
            let directories: Int
            let atLimit: Bool
            let step: TreeBackendChoice.Step
        }
        let rows: [Row] = [
            Row(method: .auto, directories: 3, atLimit: false, step: .stay),
            Row(method: .auto, directories: 4, atLimit: false, step: .moveToFanotify(why: "it has more than 3 directories")),
            Row(method: .inotify, directories: 10, atLimit: false, step: .stay),
            Row(method: .auto, directories: 1, atLimit: true,
                step: .moveToFanotify(why: "the inotify watch limit (fs.inotify.max_user_watches=8192) was reached")),
            Row(method: .inotify, directories: 1, atLimit: true, step: .stay),
        ]
        for row in rows {
            var choice = TreeBackendChoice()
            var step = TreeBackendChoice.Step.stay
            for _ in 0..<row.directories { step = choice.watchedDirectory(method: row.method, above: 3) }
            if row.atLimit { step = choice.watchLimitReached(method: row.method, limit: "8192") }
            XCTAssertEqual(step, row.step, "\(row)")
        }
        XCTAssertEqual(TreeBackendChoice().atStart(method: .fanotify), .moveToFanotify(why: "the rule says method = \"fanotify\""))
        XCTAssertEqual(TreeBackendChoice().atStart(method: .auto), .stay)
    }

    func testARefusal_isSaidOnce_andNotAskedAgain_untilTheTreeIsWatchedAnew() {
        var choice = TreeBackendChoice()
        XCTAssertTrue(choice.fanotifyRefused("no CAP_SYS_ADMIN"))
        XCTAssertEqual(choice.watchLimitReached(method: .auto, limit: "1"), .stay)
        XCTAssertEqual(choice.watchedDirectory(method: .auto, above: 0), .stay)
        choice.unwatched()
        XCTAssertEqual(choice.watchLimitReached(method: .auto, limit: "1"), .moveToFanotify(why: "the inotify watch limit (fs.inotify.max_user_watches=1) was reached"))
        XCTAssertFalse(choice.fanotifyRefused("no CAP_SYS_ADMIN"), "the same reason again is not said again")
        XCTAssertTrue(choice.fanotifyRefused("another reason"))
    }

    func testMovingToFanotify_returnsTheInotifyWatchesToHandOver_andStopsCounting() {
        var choice = TreeBackendChoice()
        for _ in 0..<5 { _ = choice.watchedDirectory(method: .auto, above: 100) }
        XCTAssertEqual(choice.movedToFanotify(), 5)
        XCTAssertTrue(choice.usesFanotify)
        XCTAssertEqual(choice.watchedDirectory(method: .auto, above: 0), .stay)
        XCTAssertEqual(choice.inotifyDirectories, 0)
    }

    // MARK: The watcher acting on them

    func testAtTheWatchLimit_withoutFanotify_theDirectoryIsScannedByTheFallback() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-limit-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let h = try WatcherHarness(scratch: scratch)
        try FileManager.default.createDirectory(atPath: h.path("deep"), withIntermediateDirectories: true)
        h.backend.refusals[Array(h.path("deep").utf8)] = .noSpace
        h.start([h.rule { $0.recursive = true }])
        XCTAssertFalse(h.backend.isWatching(h.path("deep")))
        h.write("deep/file", "content")
        // No event can come from an unwatched directory: the fallback scan (30 s) finds it.
        h.advance(.seconds(29))
        XCTAssertEqual(h.submitted, [])
        h.advance(.seconds(5))
        XCTAssertEqual(h.submitted, ["deep/file"])
        h.step {
            XCTAssertEqual(h.watcher.rules["inbox"]?.backend.usesFanotify, false)
            XCTAssertNotNil(h.watcher.rules["inbox"]?.backend.refused, "fanotify's refusal is kept until the tree is watched anew")
        }
    }

    func testAtTheWatchLimit_theTreeMovesToFanotify_itsInotifyWatchesGo_andItsEventsComeFromTheMark() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-switch-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let h = try WatcherHarness(scratch: scratch, fanotify: true)
        try FileManager.default.createDirectory(atPath: h.path("deep"), withIntermediateDirectories: true)
        h.backend.refusals[Array(h.path("deep").utf8)] = .noSpace
        h.start([h.rule { $0.recursive = true }])
        h.step {
            XCTAssertEqual(h.watcher.rules["inbox"]?.backend.usesFanotify, true)
            XCTAssertEqual(h.watcher.rules["inbox"]?.treeMethod, "fanotify")
        }
        XCTAssertFalse(h.backend.isWatching(h.root), "the tree's inotify watches are handed over")
        XCTAssertEqual(h.marks.trees[.rule("inbox")], Array(h.root.utf8))
        h.write("deep/file", "content")
        // As FanotifyBackend splits the bits the kernel merged: the write, then the close.
        h.step { h.marks.read([.modify, .closeWrite], rule: "inbox", "deep", "file") }
        XCTAssertEqual(h.submitted, ["deep/file"])
    }
}
