import Foundation
import Synchronization
import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// A TreePoller on a real local directory: what it hands on, when, and what it lists.
final class TreePollerTests: ScratchDirectoryTestCase {
    private final class Locked<Value>: Sendable {
        let value: Mutex<Value>
        init(_ value: sending Value) { self.value = Mutex(value) }
        func withLock<Result>(_ body: (inout sending Value) -> sending Result) -> sending Result { value.withLock(body) }
    }

    private let handedOn = Locked<[(path: String, size: Int64, replacedAnother: Bool)]>([])
    private let reports = Locked<[TreePoller.Report]>([])
    private var poller: TreePoller?

    override func tearDownWithError() throws {
        poller?.stop()
        poller.map { poller in poller.queue.queue.sync {} }
        try super.tearDownWithError()
    }

    private func startPoller(recursive: Bool = true, catchUp: Bool = true, settle: Duration = .milliseconds(300),
                             interval: Duration = .milliseconds(200), followSymlinks: Bool = false, sweepEvery: Int = 1) {
        let tree = PolledTree(relative: [], mountPoint: Array(directory.utf8), fileSystemType: "test", source: "", reason: "test",
                              isRemote: false)
        let poller = TreePoller(
            settings: .init(root: Array(directory.utf8), tree: tree, interval: interval, settle: settle, recursive: recursive,
                            followSymlinks: followSymlinks, catchUp: catchUp, sweepEvery: sweepEvery),
            name: "test", sources: SourceRegistry(), selects: { _ in true }, descend: { _ in true },
            deliver: { [handedOn] _, settled in
                handedOn.withLock { list in list += settled.map { (String(decoding: $0.relative, as: UTF8.self), $0.identity.size, $0.replacedAnother) } }
            },
            report: { [reports] _, report in reports.withLock { $0.append(report) } })
        self.poller = poller
        poller.start()
    }

    private func handed() -> [String] { handedOn.withLock { $0.map(\.path) } }
    private func progress() -> PollProgress { poller!.progress.withLock { $0 } }

    private func write(_ relative: String, _ text: String = "data", append: Bool = false) {
        let fd = open(directory + "/" + relative, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0, relative)
        _ = Array(text.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }

    func testANewFile_isHandedOnOnceAfterTwoLooks_anywhereInTheTree() throws {
        try FileManager.default.createDirectory(atPath: directory + "/a/b", withIntermediateDirectories: true)
        startPoller()
        write("top")
        write("a/b/deep")
        XCTAssertTrue(waitFor(10) { Set(self.handed()) == ["top", "a/b/deep"] }, "\(handed())")
        XCTAssertTrue(waitFor(10) { self.progress().passes >= 3 })
        XCTAssertEqual(handed().count, 2, "each file once: \(handed())")
        write("top", "rewritten in place")
        XCTAssertTrue(waitFor(10) { self.handed().count == 3 }, "a file rewritten in place is new content: \(handed())")
        XCTAssertEqual(handedOn.withLock { $0.last?.size }, 18)
    }

    /// What tells an exchange (renameat2) from a rewrite in place, both the same size at the
    /// same names: after the exchange each name holds another inode than at the look before.
    func testNamesThatHoldAnotherInodeAfterAnExchange_areHandedOnAsSuch_andARewriteInPlaceIsNot() throws {
        write("left", "LLLL")
        write("right", "RRRR")
        write("kept", "KKKK")
        startPoller()
        XCTAssertTrue(waitFor(10) { self.handed().count == 3 }, "\(handed())")
        XCTAssertEqual(handedOn.withLock { $0.filter(\.replacedAnother).count }, 0, "new files replaced nothing")
        WatcherHarness.exchange(directory + "/left", directory + "/right")
        write("kept", "JJJJ")
        XCTAssertTrue(waitFor(10) { self.handed().count == 6 }, "\(handed())")
        let later = handedOn.withLock { Dictionary(uniqueKeysWithValues: $0.dropFirst(3).map { ($0.path, $0.replacedAnother) }) }
        XCTAssertEqual(later, ["left": true, "right": true, "kept": false])
    }

    func testAFileStillBeingWritten_isHandedOnOnlyOnceItStopsChanging() throws {
        startPoller(settle: .milliseconds(500))
        startAppending(to: directory + "/growing", chunks: 15)
        XCTAssertTrue(waitFor(15) { !self.handed().isEmpty }, "\(handed())")
        letTimePass(1)
        XCTAssertEqual(handedOn.withLock { $0.map(\.size) }, [150], "handed on once, whole: \(handedOn.withLock { $0 })")
        XCTAssertGreaterThan(progress().settleRestarts + UInt64(progress().passes), 0)
    }

    func testAnUnchangedDirectory_isNotListedAgain_butItsFilesAreStillLookedAt() throws {
        for index in 0..<5 { try FileManager.default.createDirectory(atPath: directory + "/d\(index)", withIntermediateDirectories: true) }
        for index in 0..<5 { write("d\(index)/f") }
        startPoller()
        XCTAssertTrue(waitFor(10) { self.handed().count == 5 }, "\(handed())")
        // A change is listed twice (a coarse clock hides a second change in the same tick), then no more.
        XCTAssertTrue(waitFor(10) { let now = self.progress(); return now.listedLastPass == 0 && now.unchangedLastPass == 6 }, "\(progress())")
        XCTAssertEqual(progress().statsLastPass, 5, "every file is still stat'ed: an in-place rewrite changes no directory")
        write("d3/new")
        XCTAssertTrue(waitFor(10) { self.handed().contains("d3/new") }, "\(handed())")
    }

    func testOnANetworkFileSystem_anUnchangedDirectorysFilesAreStatedInTurns_yetARewriteInPlaceIsFound() throws {
        for index in 0..<6 { try FileManager.default.createDirectory(atPath: directory + "/d\(index)", withIntermediateDirectories: true) }
        for index in 0..<6 { for file in 0..<10 { write("d\(index)/f\(file)") } }
        startPoller(sweepEvery: 3)
        XCTAssertTrue(waitFor(10) { self.handed().count == 60 }, "\(handed().count)")
        XCTAssertTrue(waitFor(10) { self.progress().listedLastPass == 0 }, "\(progress())")
        XCTAssertLessThan(progress().statsLastPass, 60, "every file of every unchanged directory was stat'ed: \(progress())")
        write("d4/f7", "rewritten in place, its directory unchanged")
        XCTAssertTrue(waitFor(10) { self.handed().count == 61 }, "\(handed().count)")
        XCTAssertEqual(handed().last, "d4/f7")
        // A new file changes its directory: found at the next pass, whatever the turn.
        write("d1/new")
        XCTAssertTrue(waitFor(10) { self.handed().contains("d1/new") })
    }

    func testFifosSocketsAndLinks_areSkippedAndCountedOnce() throws {
        XCTAssertEqual(mkfifo(directory + "/fifo", 0o644), 0)
        XCTAssertEqual(symlink(directory + "/regular", directory + "/link"), 0)
        XCTAssertTrue(makeSocketFile(directory + "/socket"))
        write("regular")
        startPoller()
        XCTAssertTrue(waitFor(10) { self.handed() == ["regular"] }, "\(handed())")
        XCTAssertTrue(waitFor(10) { self.progress().passes >= 4 })
        XCTAssertEqual(handed(), ["regular"])
        var skipped = TreeScanner.TypeCounts()
        for case .skipped(let counts) in reports.withLock({ $0 }) { skipped += counts }
        XCTAssertEqual(skipped[.fifo], 1)
        XCTAssertEqual(skipped[.socket], 1)
        XCTAssertEqual(skipped[.symlink], 1)
    }

    func testWithoutCatchUp_theFilesAlreadyThereAreLeft_andNewOnesHandedOn() throws {
        write("old")
        // What changed within 2 s before the start counts as new (a coarse clock's slack).
        letTimePass(2.2)
        startPoller(catchUp: false)
        XCTAssertTrue(waitFor(10) { self.progress().passes >= 1 })
        write("new")
        XCTAssertTrue(waitFor(10) { self.handed() == ["new"] }, "\(handed())")
        letTimePass(0.5)
        XCTAssertEqual(handed(), ["new"])
    }

    func testADirectoryThatGoes_isForgotten() throws {
        try FileManager.default.createDirectory(atPath: directory + "/gone", withIntermediateDirectories: true)
        write("gone/f")
        startPoller()
        XCTAssertTrue(waitFor(10) { self.handed() == ["gone/f"] }, "\(handed())")
        try FileManager.default.removeItem(atPath: directory + "/gone")
        XCTAssertTrue(waitFor(10) { self.progress().directoriesKnown == 1 && self.progress().filesKnown == 0 }, "\(progress())")
    }
}
