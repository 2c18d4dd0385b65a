import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A root's path can stop naming the watched directory without the root itself moving: an
/// ancestor renamed or removed, or a symbolic link on the path retargeted (issue 22).
final class RootTrackingTests: WatchTestCase {
    private func handled() -> [String] {
        records(sandbox.root + "/handled").map { String(decoding: $0, as: UTF8.self) }
    }

    func testTheRootsParentRenamed_isNoticed_theOldTreeRunsNothing_andTheNewRootIsWatched() throws {
        try start("""
            [[watch]]
            name = "deep"
            path = "@DIR@/p/in"
            \(Self.recorder)
            """) { root in
            try FileManager.default.createDirectory(atPath: root + "/p/in", withIntermediateDirectories: true)
        }
        create(sandbox.root + "/p/in/first")
        XCTAssertTrue(waitFor(10) { handled() == [sandbox.root + "/p/in/first"] }, daemon.stderr)
        XCTAssertEqual(rename(sandbox.root + "/p", sandbox.root + "/p.old"), 0)
        XCTAssertTrue(daemon.waitForStderr(containing: "above it was renamed away", timeout: 10), daemon.stderr)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/p/in", withIntermediateDirectories: true)
        create(sandbox.root + "/p.old/in/written-in-the-old-tree")
        create(sandbox.root + "/p/in/written-in-the-new-root")
        XCTAssertTrue(waitFor(15) { handled().contains(sandbox.root + "/p/in/written-in-the-new-root") }, "\(handled())\n\(daemon.stderr)")
        letTimePass(0.5)
        XCTAssertFalse(handled().contains { $0.hasSuffix("written-in-the-old-tree") }, "a write in the moved tree ran a job on the new root: \(handled())")
        XCTAssertEqual(handled().count, 2, "\(handled())")
    }

    func testASymbolicLinkRootRetargeted_likeADeploy_isFollowedToTheNewTarget() throws {
        try start("""
            [[watch]]
            name = "current"
            path = "@DIR@/current"
            \(Self.recorder)
            """) { root in
            try FileManager.default.createDirectory(atPath: root + "/v1", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: root + "/v2", withIntermediateDirectories: true)
            XCTAssertEqual(symlink(root + "/v1", root + "/current"), 0)
        }
        create(sandbox.root + "/v1/one")
        XCTAssertTrue(waitFor(10) { handled() == [sandbox.root + "/v1/one"] }, daemon.stderr)
        // ln -sfn v2 current, atomically: a new link renamed over the old one.
        XCTAssertEqual(symlink(sandbox.root + "/v2", sandbox.root + "/current.new"), 0)
        XCTAssertEqual(rename(sandbox.root + "/current.new", sandbox.root + "/current"), 0)
        XCTAssertTrue(daemon.waitForStderr(containing: "now leads to \(sandbox.root)/v2", timeout: 10), daemon.stderr)
        create(sandbox.root + "/v2/two")
        create(sandbox.root + "/v1/after-retarget")
        XCTAssertTrue(waitFor(10) { handled().contains(sandbox.root + "/v2/two") }, "\(handled())\n\(daemon.stderr)")
        letTimePass(0.5)
        XCTAssertFalse(handled().contains(sandbox.root + "/v1/after-retarget"), "the old target is still watched: \(handled())")
        XCTAssertEqual(dumpedRule()?["watched_root"] as? String, sandbox.root + "/v2")
    }

    func testWorkWaitingWhenTheRootIsRenamedAway_neverRunsOnTheReplacementsWithTheSameNames() throws {
        let slowReader = #"command = ["/bin/sh", "-c", "sleep 0.3; printf '%s\\t%s\\0' \"$(cat \"$1\")\" \"$1\" >> @DIR@/read", "sh", "{path}"]"#
        try start("""
            [[watch]]
            name = "swap"
            path = "@DIR@/p/in"
            max_concurrent = 1
            \(slowReader)
            """) { root in
            try FileManager.default.createDirectory(atPath: root + "/p/in", withIntermediateDirectories: true)
        }
        for index in 1...5 { create(sandbox.root + "/p/in/f\(index)", "old-\(index)") }
        // The first job runs (0.3 s), the other four wait for it.
        XCTAssertTrue(daemon.waitForStderr(containing: "started watch swap run", timeout: 10), daemon.stderr)
        XCTAssertEqual(rename(sandbox.root + "/p/in", sandbox.root + "/p/in.old"), 0)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/p/in", withIntermediateDirectories: true)
        for index in 1...5 { create(sandbox.root + "/p/in/f\(index)", "new-\(index)") }
        let reads = { self.records(self.sandbox.root + "/read").map { String(decoding: $0, as: UTF8.self) } }
        XCTAssertTrue(waitFor(15) { reads().filter { $0.hasPrefix("new-") }.count >= 5 }, "\(reads())\n\(daemon.stderr)")
        letTimePass(1.5) // the old files' jobs would have run by now
        let contents = reads().map { String($0.split(separator: "\t")[0]) }
        XCTAssertTrue(Set(contents).isSuperset(of: (1...5).map { "new-\($0)" }), "\(reads())")
        // The job that was running reads by path, whichever file is there when it does (its
        // own or a replacement); the four that waited must not run on the replacements.
        XCTAssertLessThanOrEqual(contents.count, 6, "old files' waiting jobs ran on the replacements: \(reads())")
    }
}
