import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `method = "fanotify"` (issue 24) on a tmpfs the test mounts: one file system mark in
/// place of an inotify watch per directory, and the same admission as inotify, so a burst
/// runs each file once, an overflow is recovered by a rescan, a directory renamed within
/// the tree keeps its files known, and a root renamed away is followed as inotify mode
/// does. Needs root (mount, fanotify_init, open_by_handle_at): skipped without.
final class FanotifyMethodTests: WatchTestCase {
    private var tmpfs: ScratchTmpfs?

    override func tearDown() {
        // The daemon holds the root open (open_by_handle_at's mount fd): stopped first.
        if let daemon, daemon.isRunning { daemon.stop(within: 20) }
        tmpfs?.unmount()
        super.tearDown()
    }

    private func handled() -> [[UInt8]] { records(sandbox.root + "/handled") }
    private func handledNames() -> [String] { handled().map { String(decoding: $0, as: UTF8.self) } }

    /// A rule on `@DIR@/in` (a fresh tmpfs; `tree` below it) whose jobs append their paths
    /// to @DIR@/handled; `rules` after it.
    private func startOnTmpfs(method: String = "fanotify", tree: String = "", extra: String = "", rules: String = "",
                              environment: [String: String] = [:], prepare: @escaping (String) throws -> Void = { _ in }) throws {
        try start("""
            [[watch]]
            name = "huge"
            path = "@DIR@/in\(tree)"
            recursive = true
            method = "\(method)"
            exclude = ["**/*.part"]
            batch = "stdin"
            settle = "300ms"
            \(extra)
            command = ["/bin/sh", "-c", "cat >> @DIR@/handled"]

            \(rules)
            """, environment: environment) { root in
            self.tmpfs = try ScratchTmpfs(at: root + "/in")
            try prepare(root)
        }
    }

    private func makeDirectory(_ path: String) {
        if mkdir(path, 0o755) != 0 { XCTFail("unable to make \(path): \(String(cString: strerror(errno)))") }
    }

    /// `count` directories as `tops` × (count / tops) under in/, returning the leaves.
    private func makeTree(_ root: String, count: Int, tops: Int = 100) -> [String] {
        var leaves: [String] = []
        leaves.reserveCapacity(count)
        for top in 0..<tops {
            makeDirectory("\(root)/in/d\(top)")
            for leaf in 0..<max(0, count / tops - 1) {
                makeDirectory("\(root)/in/d\(top)/e\(leaf)")
                leaves.append("d\(top)/e\(leaf)")
            }
        }
        return leaves
    }

    func testABurstInAHundredThousandDirectories_isHandledOnce_withOneMarkInsteadOfAWatchEach() throws {
        let count = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_FANOTIFY_DIRECTORIES"] ?? "") ?? 100_000
        var leaves: [String] = []
        try startOnTmpfs { root in
            leaves = self.makeTree(root, count: count)
            // Files from before the start: the catch-up finds them.
            for index in 0..<100 { self.create("\(root)/in/\(leaves[index * 37 % leaves.count])/before-\(index)") }
        }
        XCTAssertTrue(daemon.waitForStderr(containing: "with fanotify, because the rule says method = \"fanotify\": 1 file system mark", timeout: 10), daemon.stderr)
        XCTAssertTrue(waitFor(60) { self.handled().count == 100 }, "\(handled().count)\n\(daemon.stderr.suffix(3000))")
        // The listing for the files already there went on after READY, in slices.
        let listed = "listed \(count + 1) directories of \(tmpfs!.path) for the files already there"
        XCTAssertTrue(daemon.waitForStderr(containing: listed, timeout: 60), daemon.stderr.suffix(3000).description)
        let stderr = daemon.stderr
        XCTAssertLessThan(try XCTUnwrap(stderr.range(of: "ready in ")).lowerBound, try XCTUnwrap(stderr.range(of: listed)).lowerBound)
        let rule = try XCTUnwrap(dumpedRule())
        XCTAssertEqual(rule["tree_method"] as? String, "fanotify")
        XCTAssertEqual(rule["fanotify_marks"] as? Int, 1)
        XCTAssertNil(rule["inotify_watches"], "no inotify watch per directory")

        // 1,000 files written in place and 1,000 written under a temporary name and renamed
        // into place, all over the tree.
        var generator = SeededGenerator(seed: 24)
        var expected = Set(handledNames())
        for index in 0..<2_000 {
            let directory = sandbox.root + "/in/" + leaves[Int.random(in: 0..<leaves.count, using: &generator)]
            if index % 2 == 0 {
                create("\(directory)/burst-\(index)")
            } else {
                create("\(directory)/burst-\(index).part")
                XCTAssertEqual(rename("\(directory)/burst-\(index).part", "\(directory)/burst-\(index)"), 0)
            }
            expected.insert("\(directory)/burst-\(index)")
        }
        XCTAssertTrue(waitFor(60) { self.handled().count >= 2_100 }, "\(handled().count)\n\(daemon.stderr.suffix(3000))")
        letTimePass(1.5)
        let names = handledNames()
        XCTAssertEqual(names.count, 2_100, "each file once")
        XCTAssertEqual(Set(names), expected)
    }

    func testAnOverflow_isRecoveredByARescan_andEveryFileRunsOnce() throws {
        try startOnTmpfs { root in
            self.makeDirectory(root + "/in/a")
        }
        // Stopped, the daemon reads nothing: 20,000 new files are more than fanotify's queue
        // of 16,384 events holds.
        daemon.send(SIGSTOP)
        for index in 0..<20_000 { create(sandbox.root + "/in/a/f\(index)") }
        daemon.send(SIGCONT)
        XCTAssertTrue(daemon.waitForStderr(containing: "fanotify event queue overflowed", timeout: 30), daemon.stderr.suffix(3000).description)
        XCTAssertTrue(waitFor(120) { self.handled().count >= 20_000 }, "\(handled().count)\n\(daemon.stderr.suffix(3000))")
        letTimePass(1.5)
        XCTAssertEqual(handled().count, 20_000)
        XCTAssertEqual(Set(handled()).count, 20_000)
    }

    func testADirectoryRenamedWithinTheTree_keepsItsFilesKnown() throws {
        try startOnTmpfs { root in
            self.makeDirectory(root + "/in/a")
            self.makeDirectory(root + "/in/a/deep")
            self.makeDirectory(root + "/in/b")
        }
        for index in 0..<20 { write("a/deep/f\(index)") }
        XCTAssertTrue(waitFor(20) { self.handled().count == 20 }, "\(handled().count)\n\(daemon.stderr)")
        XCTAssertEqual(rename(sandbox.root + "/in/a", sandbox.root + "/in/b/moved"), 0)
        write("b/moved/deep/after-the-move")
        XCTAssertTrue(waitFor(20) { self.handled().count >= 21 }, "\(handled().count)\n\(daemon.stderr)")
        letTimePass(1.5)
        let names = handledNames()
        XCTAssertEqual(names.count, 21, "the moved files ran again: \(names.filter { $0.contains("/b/moved/") })")
        XCTAssertEqual(names.last, sandbox.root + "/in/b/moved/deep/after-the-move")
        // One directory move, followed once; on a loaded machine the scan of the new path can
        // read the ledger before the store commits that move, and then each file is followed
        // by its identity instead (WatchLedger.handledBefore). Either way nothing ran again.
        let rule = try XCTUnwrap(dumpedRule())
        XCTAssertGreaterThanOrEqual(rule["moves_followed"] as? Int ?? 0, 1, "\(rule)")
    }

    func testARootRenamedAway_isLetGo_andANewDirectoryAtItsPathIsWatched() throws {
        try start("""
            [[watch]]
            name = "huge"
            path = "@DIR@/in/tree"
            recursive = true
            method = "fanotify"
            command = ["/bin/sh", "-c", "printf '%s\\\\0' \\"$1\\" >> @DIR@/handled", "sh", "{path}"]
            """) { root in
            self.tmpfs = try ScratchTmpfs(at: root + "/in")
            self.makeDirectory(root + "/in/tree")
        }
        write("tree/first")
        XCTAssertTrue(waitFor(20) { self.handled().count == 1 }, "\(handled().count)\n\(daemon.stderr)")
        XCTAssertEqual(rename(sandbox.root + "/in/tree", sandbox.root + "/in/old"), 0)
        XCTAssertTrue(daemon.waitForStderr(containing: "was renamed away", timeout: 20), daemon.stderr)
        write("old/not-watched-any-more")
        makeDirectory(sandbox.root + "/in/tree")
        XCTAssertTrue(daemon.waitForStderr(containing: "is there (again); watching it", timeout: 20), daemon.stderr)
        write("tree/second")
        XCTAssertTrue(waitFor(20) { self.handled().count == 2 }, "\(handled().count)\n\(daemon.stderr)")
        letTimePass(1)
        XCTAssertEqual(handledNames(), [sandbox.root + "/in/tree/first", sandbox.root + "/in/tree/second"])
        XCTAssertEqual(dumpedRule()?["tree_method"] as? String, "fanotify", "the new root is marked again")
    }

    func testWithoutCapSysAdmin_theRuleSaysWhy_andItsTreeIsWatchedWithInotify() throws {
        sandbox = try DaemonSandbox()
        tmpfs = try ScratchTmpfs(at: sandbox.root + "/in")
        try sandbox.writeConfig("""
            [[watch]]
            name = "huge"
            path = "\(sandbox.root)/in"
            method = "fanotify"
            command = ["/bin/sh", "-c", "printf '%s\\\\0' \\"$1\\" >> \(sandbox.root)/handled", "sh", "{path}"]
            """)
        let notify = try NotifySocket()
        // Root, as the daemon runs, less the capability a file system mark needs.
        daemon = try sandbox.start(notifySocket: notify, launcher: ["/usr/bin/setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "unable to use fanotify for \(tmpfs!.path) (the rule says method = \"fanotify\"): a fanotify mark on a whole file system needs CAP_SYS_ADMIN, which this process does not have", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("; watching it with inotify"), daemon.stderr)
        write("still-handled")
        XCTAssertTrue(waitFor(10) { self.handled().count == 1 }, daemon.stderr)
        let rule = try XCTUnwrap(dumpedRule())
        XCTAssertEqual(rule["tree_method"] as? String, "inotify")
        XCTAssertEqual(rule["inotify_watches"] as? Int, 1)
    }

    func testAuto_movesATreeThatOutgrowsTheThreshold_toFanotify() throws {
        try startOnTmpfs(method: "auto", environment: ["WATCHKEEPER_TEST_FANOTIFY_ABOVE": "50"]) { root in
            _ = self.makeTree(root, count: 400, tops: 4)
        }
        XCTAssertTrue(daemon.waitForStderr(containing: "with fanotify, because it has more than 50 directories", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("inotify watches are removed"), daemon.stderr)
        XCTAssertEqual(dumpedRule()?["tree_method"] as? String, "fanotify")
        write("d3/e98/late")
        makeDirectory(sandbox.root + "/in/d3/new")
        write("d3/new/in-a-new-directory")
        XCTAssertTrue(waitFor(20) { self.handled().count == 2 }, "\(handled().count)\n\(daemon.stderr)")
    }

    private func bindMount(_ source: String, on target: String) {
        let result = runCommand(["/bin/mount", "--bind", source, target], timeout: 30)
        XCTAssertEqual(result.status, 0, "mount --bind \(source) \(target): \(result.stderr)")
    }

    /// Issue 36: a directory of the tree's own file system bound into the tree is heard by
    /// the file system mark, but its events name the directory by a handle that resolved
    /// through the root's mount to the source's path, outside the tree: its files were never
    /// handled and nothing was said. Each mount of the file system in the tree resolves now.
    func testFilesWrittenIntoABindMountInsideTheTree_areHandledAtTheirPathThere() throws {
        try startOnTmpfs(tree: "/tree") { root in
            for directory in ["tree", "tree/bound", "tree/later", "elsewhere", "elsewhere-too", "not-bound"] { self.makeDirectory(root + "/in/" + directory) }
            self.bindMount(root + "/in/elsewhere", on: root + "/in/tree/bound")
        }
        defer {
            _ = umount2(sandbox.root + "/in/tree/bound", Int32(MNT_DETACH))
            _ = umount2(sandbox.root + "/in/tree/later", Int32(MNT_DETACH))
        }
        create(sandbox.root + "/in/tree/bound/through-the-bind-mount")
        XCTAssertTrue(waitFor(10) { self.handledNames().contains(self.sandbox.root + "/in/tree/bound/through-the-bind-mount") },
                      "\(handledNames())\n\(daemon.stderr.suffix(3_000))")
        // One bound after the start: the mount watcher sees it, and it resolves as well.
        bindMount(sandbox.root + "/in/elsewhere-too", on: sandbox.root + "/in/tree/later")
        XCTAssertTrue(daemon.waitForStderr(containing: "a file system was mounted on \(tmpfs!.path)/tree/later", timeout: 15), daemon.stderr.suffix(2_000).description)
        create(sandbox.root + "/in/tree/later/after-the-start")
        XCTAssertTrue(waitFor(10) { self.handledNames().contains(self.sandbox.root + "/in/tree/later/after-the-start") },
                      "\(handledNames())\n\(daemon.stderr.suffix(3_000))")
        // Written through the source's own path: the tree shows it too, at the bind mount (as
        // inotify's watch of that directory would report it). Outside every bind: nothing.
        create(sandbox.root + "/in/elsewhere/through-the-source")
        create(sandbox.root + "/in/not-bound/outside-the-tree")
        XCTAssertTrue(waitFor(10) { self.handledNames().contains(self.sandbox.root + "/in/tree/bound/through-the-source") },
                      "\(handledNames())\n\(daemon.stderr.suffix(3_000))")
        letTimePass(1.5)
        XCTAssertEqual(Set(handledNames()), [sandbox.root + "/in/tree/bound/through-the-bind-mount", sandbox.root + "/in/tree/later/after-the-start",
                                             sandbox.root + "/in/tree/bound/through-the-source"], "nothing from outside the tree")
        XCTAssertEqual(handledNames().count, 3, "each once")
    }

    /// Issue 36: at the switch to fanotify, inotify's events already queued for the tree's
    /// watches were dropped with the watches: a directory made just before the switch was
    /// never listed, and its file written before the mark was lost (2 and 6 of 120).
    func testAuto_movingATreeToFanotifyWhileDirectoriesAreMade_losesNoneOfTheirFiles() throws {
        try startOnTmpfs(method: "auto", environment: ["WATCHKEEPER_TEST_FANOTIFY_ABOVE": "500"]) { root in
            _ = self.makeTree(root, count: 40, tops: 4)
        }
        // 1,000 new directories with a file each, made as fast as one thread makes them while
        // the daemon reads: the tree passes 500 directories among them and moves to fanotify
        // while they keep coming, with events of directories made just before still queued.
        let root = sandbox.root
        let count = 1_000
        let maker = Thread {
            for index in 0..<count {
                mkdir("\(root)/in/new-\(index)", 0o755)
                let fd = open("\(root)/in/new-\(index)/file", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
                _ = Glibc.write(fd, "x", 1)
                close(fd)
            }
        }
        maker.start()
        XCTAssertTrue(daemon.waitForStderr(containing: "with fanotify, because it has more than 500 directories", timeout: 20), daemon.stderr.suffix(3_000).description)
        XCTAssertTrue(waitFor(60) { self.handled().count >= count }, "\(handled().count) of \(count)\n\(daemon.stderr.suffix(3_000))")
        letTimePass(1.5)
        let names = handledNames()
        XCTAssertEqual(Set(names).count, count, "lost: \(Set((0..<count).map { "\(root)/in/new-\($0)/file" }).subtracting(names).sorted().prefix(10))")
        XCTAssertEqual(names.count, count, "each once")
    }

    /// Issue 36: the switch removed every inotify watch of the tree at once, and each removal
    /// queues an IN_IGNORED: past fs.inotify.max_queued_events the daemon's one inotify queue
    /// overflowed, and every other rule on inotify rescanned its tree.
    func testAuto_movingAHugeTreeToFanotify_doesNotOverflowTheInotifyQueueOfTheOtherRules() throws {
        guard let queued = (try? String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8)).flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }),
              queued <= 65_536 else { throw XCTSkip("fs.inotify.max_queued_events is too large to fill here") }
        let threshold = queued + 1_000
        try startOnTmpfs(method: "auto", rules: """
            [[watch]]
            name = "small"
            path = "@DIR@/small"
            command = ["/bin/sh", "-c", "printf '%s\\\\0' \\"$1\\" >> @DIR@/small-handled", "sh", "{path}"]
            """, environment: ["WATCHKEEPER_TEST_FANOTIFY_ABOVE": "\(threshold)"]) { root in
            self.makeDirectory(root + "/small")
            _ = self.makeTree(root, count: threshold + 2_000, tops: 20)
        }
        XCTAssertTrue(daemon.waitForStderr(containing: "with fanotify, because it has more than \(threshold) directories", timeout: 60),
                      daemon.stderr.suffix(3_000).description)
        create(sandbox.root + "/small/after-the-switch")
        XCTAssertTrue(waitFor(10) { !self.records(self.sandbox.root + "/small-handled").isEmpty }, daemon.stderr.suffix(3_000).description)
        // An overflow is read before the event of that file: once the record of its job is
        // out, so would the overflow's line be.
        XCTAssertTrue(daemon.waitForStderr(containing: "watch small run ", timeout: 10), daemon.stderr.suffix(3_000).description)
        XCTAssertFalse(daemon.stderr.contains("inotify event queue overflowed"), daemon.stderr.suffix(3_000).description)
        XCTAssertEqual(dumpedRule()?["tree_method"] as? String, "fanotify")
    }
}
