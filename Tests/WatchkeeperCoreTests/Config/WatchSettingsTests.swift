import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Pins how `[[watch]]` rules are read through `ConfigLoader.parse`: every key of a valid
/// rule, the defaults, and the exact `LINE:COLUMN` and message of each class of problem.
final class WatchSettingsTests: XCTestCase {
    func testParse_watchRule_readsEveryKey() throws {
        let source = """
            [[watch]]
            name = "inbox"
            path = "/srv/inbox"
            recursive = true
            events = ["closed_write", "moved_in", "deleted"]
            include = ["**/*.csv"]
            exclude = ["**/.*"]
            follow_symlinks = true
            settle = "500ms"
            max_concurrent = 2
            command = ["/usr/local/bin/import", "{watch}", "{path}", "{dir}", "{name}", "{event}"]
            budget = "10m"
            """
        let watch = try XCTUnwrap(parsedConfiguration(source)?.watches.first)
        XCTAssertEqual(watch.name, "inbox")
        XCTAssertEqual(watch.path, "/srv/inbox")
        XCTAssertTrue(watch.recursive)
        XCTAssertEqual(watch.events, [.closedWrite, .movedIn, .deleted])
        XCTAssertTrue(watch.filter.selects(Array("a/b.csv".utf8)))
        XCTAssertFalse(watch.filter.selects(Array("a/.b.csv".utf8)))
        XCTAssertTrue(watch.followSymlinks)
        XCTAssertEqual(watch.settle, .milliseconds(500))
        XCTAssertEqual(watch.maxConcurrent, 2)
        XCTAssertEqual(watch.job.budget, .seconds(600))
    }

    func testParse_watchRuleDefaults_areTheReadyEventsAndNoSettle() throws {
        let watch = try XCTUnwrap(parsedConfiguration("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            command = ["/bin/true"]
            """)?.watches.first)
        XCTAssertEqual(watch.events, [.closedWrite, .movedIn])
        XCTAssertFalse(watch.recursive)
        XCTAssertEqual(watch.settle, .zero)
        XCTAssertTrue(watch.filter.selects(Array("anything".utf8)))
    }

    func testParse_watchWithRelativePath_isRefusedAtTheValue() {
        assertSingleConfigError("""
            [[watch]]
            name = "w"
            path = "srv/w"
            command = ["/bin/true"]
            """, at: (3, 8), #"watch.path must be an absolute path, not the relative "srv/w""#)
    }

    func testParse_watchWithUnknownEvent_listsTheKnownOnes() {
        assertSingleConfigError("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            events = ["closed_write", "opened"]
            command = ["/bin/true"]
            """, at: (4, 10), #"watch.events: unknown event "opened" (known: created, closed_write, moved_in, moved_out, deleted, modified, attrib)"#)
    }

    func testParse_watchWithBadGlob_pointsIntoThePattern() {
        let found = configErrors("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            include = ["ok/*.csv", "bad/[x"]
            command = ["/bin/true"]
            """)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertEqual(found.first?.position?.line, 4)
        XCTAssertTrue(found.first?.message.hasPrefix(#"bad pattern "bad/[x" in watch.include: "#) ?? false, "\(found)")
    }

    func testParse_watchCommandWithATaskPlaceholder_isRefused() {
        let found = configErrors("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            command = ["/bin/echo", "{scheduled}"]
            """)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertTrue(found.first?.message.contains(#"unknown placeholder "{scheduled}""#) ?? false, "\(found)")
    }

    func testParse_batchWatchWithoutPathsElement_isRefused() {
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = true
            settle = "1s"
            command = ["/usr/bin/import", "{path}"]
            """)
        XCTAssertFalse(found.isEmpty)
        XCTAssertTrue(found.contains { $0.message.contains(#"unknown placeholder "{path}""#) }, "\(found)")
    }

    func testParse_batchWatchWithoutSettle_isRefused() {
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = true
            command = ["/usr/bin/import", "{paths}"]
            """)
        XCTAssertEqual(found.map(\.message), [#"batch = true needs a settle window (for example settle = "1s") to collect files in"#])
    }

    func testParse_stdinBatch_takesNoPathsPlaceholder_andWorksWithAShell() throws {
        let watch = try XCTUnwrap(parsedConfiguration("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = "stdin"
            settle = "1s"
            shell = true
            command = "xargs -0 rm --"
            """)?.watches.first)
        XCTAssertTrue(watch.batch)
        XCTAssertEqual(watch.batchInput, .stdin)
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = "stdin"
            settle = "1s"
            command = ["/usr/bin/import", "{paths}"]
            """)
        XCTAssertTrue(found.contains { $0.message.contains(#"unknown placeholder "{paths}""#) }, "\(found)")
    }

    func testParse_batchWithAnUnknownWord_namesTheAllowedValues() {
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = "lines"
            settle = "1s"
            command = ["/usr/bin/import", "{paths}"]
            """)
        XCTAssertEqual(found.map(\.message), [#"watch.batch must be one of true, false, "argv", "stdin", not "lines""#], "\(found)")
        XCTAssertEqual(found.first?.position?.line, 4)
    }
}
