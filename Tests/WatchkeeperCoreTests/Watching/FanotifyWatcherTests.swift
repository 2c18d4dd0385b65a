import Dispatch
import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Real fanotify on a tmpfs of the test's own (FanotifyScratch): what the kernel reports
/// for each change, and the directory handles its events carry, resolved.
final class FanotifyWatcherTests: ScratchDirectoryTestCase {
    private lazy var fanotify = FanotifyScratch(in: directory, for: self)

    func testAFileWrittenInANestedDirectory_isReportedWithItsDirectorysHandleAndName() throws {
        try fanotify.watchScratchFileSystem()
        try systemCall { mkdir(fanotify.path("a"), 0o755) }
        try systemCall { mkdir(fanotify.path("a/b"), 0o755) }
        try fanotify.createFile("a/b/f.txt", contents: "hello")
        try fanotify.startWatching()

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.closeWrite) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .onDirectory], [.create, .onDirectory], [.create, .modify, .closeWrite]],
                       "the kernel merges a new file's create, write and close into one event: \(events)")
        XCTAssertEqual(FanotifyScratch.names(events), ["a", "b", "f.txt"])
        XCTAssertEqual(events[0].directory, try fanotify.handle(of: ""))
        XCTAssertEqual(events[1].directory, try fanotify.handle(of: "a"))
        XCTAssertEqual(events[2].directory, try fanotify.handle(of: "a/b"))
        XCTAssertNil(events[2].object, "no FAN_REPORT_FID asked for")
        XCTAssertEqual(events[2].pid, getpid())
        XCTAssertEqual(try fanotify.resolve(events[0].directory), fanotify.resolved(""))
        XCTAssertEqual(try fanotify.resolve(events[2].directory), fanotify.resolved("a/b"))
        XCTAssertEqual(fanotify.log.recordedFailures, [])
    }

    /// With only directory handles, one name's events merge while queued, whatever their
    /// order: CREATE|DELETE does not say which came first. With FAN_REPORT_FID the events
    /// on the file itself carry its handle and stay apart, and its DELETE_SELF is reported.
    func testEventsOfOneNameQueuedTogether_mergeIntoOneEvent() throws {
        try fanotify.watchScratchFileSystem()
        try fanotify.createFile("f.txt", contents: "hello")
        try systemCall { unlink(fanotify.path("f.txt")) }
        try systemCall { mkdir(fanotify.path("d"), 0o755) }
        try systemCall { rmdir(fanotify.path("d")) }
        try fanotify.startWatching()

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.deleteSelf) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .delete, .modify, .closeWrite], [.create, .delete, .onDirectory],
                                            [.deleteSelf, .onDirectory]], "\(events)")
        XCTAssertEqual(FanotifyScratch.names(events), ["f.txt", "d", "."])
    }

    func testWithObjectHandles_aFilesOwnEventsStayApart_andItsDeletionIsReported() throws {
        try fanotify.watchScratchFileSystem(reportObjectHandles: true)
        try fanotify.createFile("f.txt", contents: "hello")
        try systemCall { unlink(fanotify.path("f.txt")) }
        try fanotify.startWatching()

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.deleteSelf) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .delete], [.modify, .closeWrite], [.attrib, .deleteSelf]], "\(events)")
        let root = try fanotify.handle(of: "")
        // The directory entry's events name it; the file's own carry its handle, its last
        // (the link count dropping to 0, and its end) that handle alone.
        XCTAssertEqual(events.map { $0.directory == root }, [true, true, false])
        XCTAssertEqual(events.map { $0.object != nil }, [false, true, true])
        XCTAssertEqual(events[1].object, events[2].object)
        XCTAssertEqual(FanotifyScratch.names(events), ["f.txt", "f.txt", ""])
    }

    func testARename_reportsMovedFromAndMovedTo_eachWithItsDirectoryAndName() throws {
        try fanotify.watchScratchFileSystem()
        try fanotify.startWatching()
        try systemCall { mkdir(fanotify.path("from"), 0o755) }
        try systemCall { mkdir(fanotify.path("to"), 0o755) }
        try fanotify.createFile("from/old.txt")
        // Read before the rename, or the kernel merges MOVED_FROM into CREATE|CLOSE_WRITE.
        _ = fanotify.log.wait { $0.contains { $0.mask.contains(.closeWrite) } }
        try systemCall { rename(fanotify.path("from/old.txt"), fanotify.path("to/new.txt")) }

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.movedTo) } }
        let moves = events.filter { !$0.mask.isDisjoint(with: [.movedFrom, .movedTo]) }
        XCTAssertEqual(moves.map(\.mask), [.movedFrom, .movedTo], "\(events)")
        XCTAssertEqual(FanotifyScratch.names(moves), ["old.txt", "new.txt"])
        XCTAssertEqual(moves[0].directory, try fanotify.handle(of: "from"))
        XCTAssertEqual(moves[1].directory, try fanotify.handle(of: "to"))
        XCTAssertEqual(try fanotify.resolve(moves[0].directory), fanotify.resolved("from"))
        XCTAssertEqual(try fanotify.resolve(moves[1].directory), fanotify.resolved("to"))
    }

    /// FAN_RENAME (Linux 5.17) pairs the two halves, which MOVED_FROM and MOVED_TO do not:
    /// fanotify has no cookie.
    func testFanRename_reportsBothDirectoriesAndNamesInOneEvent() throws {
        try fanotify.watchScratchFileSystem([.rename, .create])
        try fanotify.startWatching()
        try systemCall { mkdir(fanotify.path("from"), 0o755) }
        try systemCall { mkdir(fanotify.path("to"), 0o755) }
        try fanotify.createFile("from/old.txt")
        try systemCall { rename(fanotify.path("from/old.txt"), fanotify.path("to/new.txt")) }

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.rename) } }
        let renamed = try XCTUnwrap(events.first { $0.mask.contains(.rename) }, "\(events)")
        XCTAssertEqual(renamed.mask, .rename)
        XCTAssertEqual(renamed.directory, try fanotify.handle(of: "from"))
        XCTAssertEqual(renamed.name, Array("old.txt".utf8))
        XCTAssertEqual(renamed.newDirectory, try fanotify.handle(of: "to"))
        XCTAssertEqual(renamed.newName, Array("new.txt".utf8))
    }

    /// The reason for the backend: inotify's watch follows a renamed directory but the
    /// path the owner keeps for it goes stale; a handle resolves to wherever it is now.
    func testARenamedDirectory_resolvesToItsNewPath() throws {
        try fanotify.watchScratchFileSystem()
        try fanotify.startWatching()
        try systemCall { mkdir(fanotify.path("a"), 0o755) }
        try systemCall { mkdir(fanotify.path("a/b"), 0o755) }
        try fanotify.createFile("a/b/before.txt")
        let before = fanotify.log.wait { $0.contains { $0.name == Array("before.txt".utf8) && $0.mask.contains(.closeWrite) } }
        let handleOfB = try XCTUnwrap(before.last?.directory)
        XCTAssertEqual(try fanotify.resolve(handleOfB), fanotify.resolved("a/b"))

        try systemCall { rename(fanotify.path("a/b"), fanotify.path("c")) }
        try fanotify.createFile("c/after.txt")
        let events = fanotify.log.wait { $0.contains { $0.name == Array("after.txt".utf8) && $0.mask.contains(.closeWrite) } }
        let renameEvents = events.filter { $0.isDirectory && !$0.mask.contains(.create) }
        XCTAssertEqual(renameEvents.map(\.mask), [[.movedFrom, .onDirectory], [.movedTo, .onDirectory], [.moveSelf, .onDirectory]],
                       "\(events)")
        XCTAssertEqual(FanotifyScratch.names(renameEvents), ["b", "c", "."])
        XCTAssertEqual(renameEvents[0].directory, try fanotify.handle(of: "a"))
        XCTAssertEqual(renameEvents[1].directory, try fanotify.handle(of: ""))
        XCTAssertEqual(renameEvents[2].directory, handleOfB, "a directory's own MOVE_SELF names itself as \".\"")
        XCTAssertTrue(renameEvents[2].isOnDirectoryItself)

        // Until told, the cache answers with the path it learnt; the rename events empty it.
        XCTAssertEqual(try fanotify.resolve(handleOfB), fanotify.resolved("a/b"))
        XCTAssertTrue(fanotify.queue.sync { fanotify.resolver!.forgetStalePaths(after: events) })
        let after = try XCTUnwrap(events.last(where: { $0.name == Array("after.txt".utf8) }))
        XCTAssertEqual(after.directory, handleOfB, "the directory keeps its handle across the rename")
        XCTAssertEqual(try fanotify.resolve(after.directory), fanotify.resolved("c"))
        let statistics = fanotify.queue.sync { fanotify.resolver!.statistics }
        XCTAssertEqual(statistics.misses, 2)
        XCTAssertEqual(statistics.hits, 1)
        XCTAssertEqual(statistics.invalidations, 1)
    }

    func testARemovedDirectory_reportsDeleteSelf_andItsHandleResolvesAsGone() throws {
        try fanotify.watchScratchFileSystem()
        try fanotify.startWatching()
        try systemCall { mkdir(fanotify.path("doomed"), 0o755) }
        let handleOfDoomed = try fanotify.handle(of: "doomed")
        XCTAssertEqual(try fanotify.resolve(handleOfDoomed), fanotify.resolved("doomed"))
        // Read before the removal, or the kernel merges the two into CREATE|DELETE|ONDIR.
        _ = fanotify.log.wait { $0.contains { $0.mask.contains(.create) } }
        try systemCall { rmdir(fanotify.path("doomed")) }

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.delete) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .onDirectory], [.deleteSelf, .onDirectory], [.delete, .onDirectory]], "\(events)")
        XCTAssertEqual(FanotifyScratch.names(events), ["doomed", ".", "doomed"])
        XCTAssertEqual(events[1].directory, handleOfDoomed)

        XCTAssertFalse(fanotify.queue.sync { fanotify.resolver!.forgetStalePaths(after: events) }, "a deletion is no rename")
        XCTAssertEqual(fanotify.queue.sync { fanotify.resolver!.count }, 0, "the deleted directory's entry is gone")
        XCTAssertEqual(try fanotify.resolve(handleOfDoomed), .gone)
        // A new directory of the same name is another inode with another handle.
        try systemCall { mkdir(fanotify.path("doomed"), 0o755) }
        XCTAssertNotEqual(try fanotify.handle(of: "doomed"), handleOfDoomed)
        XCTAssertEqual(try fanotify.resolve(handleOfDoomed), .gone)
        XCTAssertEqual(fanotify.queue.sync { fanotify.resolver!.statistics.gone }, 2)
    }

    /// As InotifyWatcherTests does: the group is not read until more events than its
    /// queue holds (fs.fanotify.max_queued_events) are queued. Distinct names, so that no
    /// two merge.
    func testMoreEventsThanTheQueueHolds_reportQueueOverflow() throws {
        let limitText = try String(contentsOfFile: "/proc/sys/fs/fanotify/max_queued_events", encoding: .utf8)
        let limit = try XCTUnwrap(Int(limitText.trimmingCharacters(in: .whitespacesAndNewlines)))
        try XCTSkipIf(limit > 100_000, "max_queued_events is \(limit): too many files to create in a unit test")
        try fanotify.watchScratchFileSystem(.create)
        for number in 0..<(limit + 16) { try fanotify.createFile("f\(number)") }
        try fanotify.startWatching()

        let events = fanotify.log.wait { $0.contains { $0.mask.contains(.queueOverflow) } }
        let overflow = try XCTUnwrap(events.last)
        XCTAssertEqual(overflow, FanotifyEvent(mask: .queueOverflow, pid: 0), "no records, and no process to blame")
        XCTAssertEqual(events.count, limit + 1, "the queue holds `limit` events, then the overflow marker")
        XCTAssertEqual(fanotify.queue.sync { fanotify.watcher!.statistics.overflows }, 1)
        XCTAssertTrue(fanotify.queue.sync { fanotify.resolver!.forgetStalePaths(after: [overflow]) }, "a lost rename may have made any path stale")
    }

    func testMarkingAPathThatDoesNotExist_failsWithTheKernelsErrno() throws {
        let root = try fanotify.watchScratchFileSystem()
        let watcher = try XCTUnwrap(fanotify.watcher)
        fanotify.queue.sync {
            let missing = watcher.markFileSystem(containing: Array((root + "/missing").utf8), mask: .create)
            XCTAssertEqual(missing.map { true }, .failure(.noSuchFileOrDirectory))
            let withNUL = watcher.markFileSystem(containing: Array(root.utf8) + [0], mask: .create)
            XCTAssertEqual(withNUL.map { true }, .failure(.invalidArgument))
        }
    }
}
