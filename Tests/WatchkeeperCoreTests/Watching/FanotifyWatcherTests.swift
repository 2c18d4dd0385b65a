import CWatchkeeperSystem
import Dispatch
import Foundation
import SystemPackage
import XCTest

@_spi(Fuzzing) @testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Real fanotify on a tmpfs the test mounts (a file system mark hears the whole file
/// system, so a private one keeps the rest of the machine out of the events), and the
/// decoder on hand-built buffers. The kernel tests need root: fanotify_init with FID
/// reporting, FAN_MARK_FILESYSTEM, open_by_handle_at and mount all want CAP_SYS_ADMIN.
final class FanotifyWatcherTests: ScratchDirectoryTestCase {
    private let queue = DispatchQueue(label: "watchkeeper.test.fanotify")
    private var log = EventRecorder<FanotifyEvent, Errno>()
    private var watcher: FanotifyWatcher?
    private var resolver: DirectoryHandleResolver?
    /// The tmpfs's mount point as the kernel spells it (realpath), once mounted.
    private var mountPoint: String?

    override func tearDownWithError() throws {
        queue.sync {
            watcher?.cancel()
            watcher = nil
            // Its O_PATH fd of the root would keep the tmpfs busy.
            resolver = nil
        }
        if let mountPoint {
            XCTAssertNoThrow(try nothingOrErrno { umount2(mountPoint, 0) }.get())
        }
        try super.tearDownWithError()
    }

    // MARK: - Setting up

    /// Mounts a tmpfs on the scratch directory's "mnt" and returns its real path.
    private func mountScratchFileSystem() throws -> String {
        mountPoint = try ScratchTmpfs(at: directory + "/mnt").path
        return mountPoint!
    }

    /// A tmpfs, a watcher with `mask` on it, not started, and a resolver of its root.
    /// Events queue in the kernel until `startWatching()`: a test that starts after its
    /// changes sees exactly what the kernel merged, with no read racing the changes.
    @discardableResult
    private func watchScratchFileSystem(_ mask: FanotifyMask = .treeChanges, reportObjectHandles: Bool = false,
                                        capacity: Int = DirectoryHandleResolver.defaultCapacity) throws -> String {
        let root = try mountScratchFileSystem()
        let log = self.log
        let made = try FanotifyWatcher(queue: queue, reportObjectHandles: reportObjectHandles,
                                       onEvents: { log.record(contentsOf: $0) }, onReadFailure: { log.recordFailure($0) })
        watcher = made
        resolver = try DirectoryHandleResolver(queue: queue, rootPath: Array(root.utf8), capacity: capacity)
        try queue.sync {
            try made.markFileSystem(containing: Array(root.utf8), mask: mask).get()
        }
        return root
    }

    private func startWatching() throws {
        try queue.sync { try watcher!.start() }
    }

    private func path(_ relative: String) -> String { mountPoint! + "/" + relative }

    private func createFile(_ relative: String, contents: String = "") throws {
        let fd = try systemCall { open(path(relative), O_CREAT | O_WRONLY | O_CLOEXEC, 0o644) }
        let owned = OwnedFileDescriptor(adopting: fd)
        var bytes = Array(contents.utf8)
        if !bytes.isEmpty { _ = try systemCall { write(fd, &bytes, bytes.count) } }
        try owned.close()
    }

    /// The handle name_to_handle_at gives for `relative`, to compare with an event's.
    private func handle(of relative: String) throws -> FanotifyFileHandle {
        var raw = wk_file_handle()
        var mountID: Int32 = 0
        try systemCall { wk_name_to_handle_at(AT_FDCWD, path(relative), &raw, &mountID, 0) }
        let bytes = withUnsafeBytes(of: raw.f_handle) { Array($0.prefix(Int(raw.handle_bytes))) }
        return FanotifyFileHandle(fileSystemID: try XCTUnwrap(resolver).fileSystemID, type: raw.handle_type, bytes: bytes)
    }

    private func resolve(_ handle: FanotifyFileHandle?) throws -> DirectoryHandleResolver.Resolution {
        let handle = try XCTUnwrap(handle, "the event has no directory handle")
        return queue.sync { resolver!.resolve(handle) }
    }

    private func resolved(_ relative: String) -> DirectoryHandleResolver.Resolution {
        .path(Array((relative.isEmpty ? mountPoint! : path(relative)).utf8))
    }

    private static func names(_ events: [FanotifyEvent]) -> [String] {
        events.map { String(decoding: $0.name, as: UTF8.self) }
    }

    // MARK: - What the kernel reports

    func testAFileWrittenInANestedDirectory_isReportedWithItsDirectorysHandleAndName() throws {
        try watchScratchFileSystem()
        try systemCall { mkdir(path("a"), 0o755) }
        try systemCall { mkdir(path("a/b"), 0o755) }
        try createFile("a/b/f.txt", contents: "hello")
        try startWatching()

        let events = log.wait { $0.contains { $0.mask.contains(.closeWrite) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .onDirectory], [.create, .onDirectory], [.create, .modify, .closeWrite]],
                       "the kernel merges a new file's create, write and close into one event: \(events)")
        XCTAssertEqual(Self.names(events), ["a", "b", "f.txt"])
        XCTAssertEqual(events[0].directory, try handle(of: ""))
        XCTAssertEqual(events[1].directory, try handle(of: "a"))
        XCTAssertEqual(events[2].directory, try handle(of: "a/b"))
        XCTAssertNil(events[2].object, "no FAN_REPORT_FID asked for")
        XCTAssertEqual(events[2].pid, getpid())
        XCTAssertEqual(try resolve(events[0].directory), resolved(""))
        XCTAssertEqual(try resolve(events[2].directory), resolved("a/b"))
        XCTAssertEqual(log.recordedFailures, [])
    }

    /// With only directory handles, one name's events merge while queued, whatever their
    /// order: CREATE|DELETE does not say which came first. With FAN_REPORT_FID the events
    /// on the file itself carry its handle and stay apart, and its DELETE_SELF is reported.
    func testEventsOfOneNameQueuedTogether_mergeIntoOneEvent() throws {
        try watchScratchFileSystem()
        try createFile("f.txt", contents: "hello")
        try systemCall { unlink(path("f.txt")) }
        try systemCall { mkdir(path("d"), 0o755) }
        try systemCall { rmdir(path("d")) }
        try startWatching()

        let events = log.wait { $0.contains { $0.mask.contains(.deleteSelf) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .delete, .modify, .closeWrite], [.create, .delete, .onDirectory],
                                            [.deleteSelf, .onDirectory]], "\(events)")
        XCTAssertEqual(Self.names(events), ["f.txt", "d", "."])
    }

    func testWithObjectHandles_aFilesOwnEventsStayApart_andItsDeletionIsReported() throws {
        try watchScratchFileSystem(reportObjectHandles: true)
        try createFile("f.txt", contents: "hello")
        try systemCall { unlink(path("f.txt")) }
        try startWatching()

        let events = log.wait { $0.contains { $0.mask.contains(.deleteSelf) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .delete], [.modify, .closeWrite], [.attrib, .deleteSelf]], "\(events)")
        let root = try handle(of: "")
        // The directory entry's events name it; the file's own carry its handle, its last
        // (the link count dropping to 0, and its end) that handle alone.
        XCTAssertEqual(events.map { $0.directory == root }, [true, true, false])
        XCTAssertEqual(events.map { $0.object != nil }, [false, true, true])
        XCTAssertEqual(events[1].object, events[2].object)
        XCTAssertEqual(Self.names(events), ["f.txt", "f.txt", ""])
    }

    func testARename_reportsMovedFromAndMovedTo_eachWithItsDirectoryAndName() throws {
        try watchScratchFileSystem()
        try startWatching()
        try systemCall { mkdir(path("from"), 0o755) }
        try systemCall { mkdir(path("to"), 0o755) }
        try createFile("from/old.txt")
        // Read before the rename, or the kernel merges MOVED_FROM into CREATE|CLOSE_WRITE.
        _ = log.wait { $0.contains { $0.mask.contains(.closeWrite) } }
        try systemCall { rename(path("from/old.txt"), path("to/new.txt")) }

        let events = log.wait { $0.contains { $0.mask.contains(.movedTo) } }
        let moves = events.filter { !$0.mask.isDisjoint(with: [.movedFrom, .movedTo]) }
        XCTAssertEqual(moves.map(\.mask), [.movedFrom, .movedTo], "\(events)")
        XCTAssertEqual(Self.names(moves), ["old.txt", "new.txt"])
        XCTAssertEqual(moves[0].directory, try handle(of: "from"))
        XCTAssertEqual(moves[1].directory, try handle(of: "to"))
        XCTAssertEqual(try resolve(moves[0].directory), resolved("from"))
        XCTAssertEqual(try resolve(moves[1].directory), resolved("to"))
    }

    /// FAN_RENAME (Linux 5.17) pairs the two halves, which MOVED_FROM and MOVED_TO do not:
    /// fanotify has no cookie.
    func testFanRename_reportsBothDirectoriesAndNamesInOneEvent() throws {
        try watchScratchFileSystem([.rename, .create])
        try startWatching()
        try systemCall { mkdir(path("from"), 0o755) }
        try systemCall { mkdir(path("to"), 0o755) }
        try createFile("from/old.txt")
        try systemCall { rename(path("from/old.txt"), path("to/new.txt")) }

        let events = log.wait { $0.contains { $0.mask.contains(.rename) } }
        let renamed = try XCTUnwrap(events.first { $0.mask.contains(.rename) }, "\(events)")
        XCTAssertEqual(renamed.mask, .rename)
        XCTAssertEqual(renamed.directory, try handle(of: "from"))
        XCTAssertEqual(renamed.name, Array("old.txt".utf8))
        XCTAssertEqual(renamed.newDirectory, try handle(of: "to"))
        XCTAssertEqual(renamed.newName, Array("new.txt".utf8))
    }

    /// The reason for the backend: inotify's watch follows a renamed directory but the
    /// path the owner keeps for it goes stale; a handle resolves to wherever it is now.
    func testARenamedDirectory_resolvesToItsNewPath() throws {
        try watchScratchFileSystem()
        try startWatching()
        try systemCall { mkdir(path("a"), 0o755) }
        try systemCall { mkdir(path("a/b"), 0o755) }
        try createFile("a/b/before.txt")
        let before = log.wait { $0.contains { $0.name == Array("before.txt".utf8) && $0.mask.contains(.closeWrite) } }
        let handleOfB = try XCTUnwrap(before.last?.directory)
        XCTAssertEqual(try resolve(handleOfB), resolved("a/b"))

        try systemCall { rename(path("a/b"), path("c")) }
        try createFile("c/after.txt")
        let events = log.wait { $0.contains { $0.name == Array("after.txt".utf8) && $0.mask.contains(.closeWrite) } }
        let renameEvents = events.filter { $0.isDirectory && !$0.mask.contains(.create) }
        XCTAssertEqual(renameEvents.map(\.mask), [[.movedFrom, .onDirectory], [.movedTo, .onDirectory], [.moveSelf, .onDirectory]],
                       "\(events)")
        XCTAssertEqual(Self.names(renameEvents), ["b", "c", "."])
        XCTAssertEqual(renameEvents[0].directory, try handle(of: "a"))
        XCTAssertEqual(renameEvents[1].directory, try handle(of: ""))
        XCTAssertEqual(renameEvents[2].directory, handleOfB, "a directory's own MOVE_SELF names itself as \".\"")
        XCTAssertTrue(renameEvents[2].isOnDirectoryItself)

        // Until told, the cache answers with the path it learnt; the rename events empty it.
        XCTAssertEqual(try resolve(handleOfB), resolved("a/b"))
        XCTAssertTrue(queue.sync { resolver!.forgetStalePaths(after: events) })
        let after = try XCTUnwrap(events.last(where: { $0.name == Array("after.txt".utf8) }))
        XCTAssertEqual(after.directory, handleOfB, "the directory keeps its handle across the rename")
        XCTAssertEqual(try resolve(after.directory), resolved("c"))
        let statistics = queue.sync { resolver!.statistics }
        XCTAssertEqual(statistics.misses, 2)
        XCTAssertEqual(statistics.hits, 1)
        XCTAssertEqual(statistics.invalidations, 1)
    }

    func testARemovedDirectory_reportsDeleteSelf_andItsHandleResolvesAsGone() throws {
        try watchScratchFileSystem()
        try startWatching()
        try systemCall { mkdir(path("doomed"), 0o755) }
        let handleOfDoomed = try handle(of: "doomed")
        XCTAssertEqual(try resolve(handleOfDoomed), resolved("doomed"))
        // Read before the removal, or the kernel merges the two into CREATE|DELETE|ONDIR.
        _ = log.wait { $0.contains { $0.mask.contains(.create) } }
        try systemCall { rmdir(path("doomed")) }

        let events = log.wait { $0.contains { $0.mask.contains(.delete) } }
        XCTAssertEqual(events.map(\.mask), [[.create, .onDirectory], [.deleteSelf, .onDirectory], [.delete, .onDirectory]], "\(events)")
        XCTAssertEqual(Self.names(events), ["doomed", ".", "doomed"])
        XCTAssertEqual(events[1].directory, handleOfDoomed)

        XCTAssertFalse(queue.sync { resolver!.forgetStalePaths(after: events) }, "a deletion is no rename")
        XCTAssertEqual(queue.sync { resolver!.count }, 0, "the deleted directory's entry is gone")
        XCTAssertEqual(try resolve(handleOfDoomed), .gone)
        // A new directory of the same name is another inode with another handle.
        try systemCall { mkdir(path("doomed"), 0o755) }
        XCTAssertNotEqual(try handle(of: "doomed"), handleOfDoomed)
        XCTAssertEqual(try resolve(handleOfDoomed), .gone)
        XCTAssertEqual(queue.sync { resolver!.statistics.gone }, 2)
    }

    /// A process still in a removed directory keeps its inode alive, so the handle opens,
    /// and /proc spells it "<path> (deleted)": the link count tells it is gone.
    func testARemovedDirectoryStillOpen_resolvesAsGone() throws {
        try watchScratchFileSystem()
        try systemCall { mkdir(path("held"), 0o755) }
        let held = OwnedFileDescriptor(adopting: try systemCall { open(path("held"), O_RDONLY | O_DIRECTORY | O_CLOEXEC) })
        let handleOfHeld = try handle(of: "held")
        try systemCall { rmdir(path("held")) }
        XCTAssertEqual(try resolve(handleOfHeld), .gone)
        try held.close()
    }

    /// As InotifyWatcherTests does: the group is not read until more events than its
    /// queue holds (fs.fanotify.max_queued_events) are queued. Distinct names, so that no
    /// two merge.
    func testMoreEventsThanTheQueueHolds_reportQueueOverflow() throws {
        let limitText = try String(contentsOfFile: "/proc/sys/fs/fanotify/max_queued_events", encoding: .utf8)
        let limit = try XCTUnwrap(Int(limitText.trimmingCharacters(in: .whitespacesAndNewlines)))
        try XCTSkipIf(limit > 100_000, "max_queued_events is \(limit): too many files to create in a unit test")
        try watchScratchFileSystem(.create)
        for number in 0..<(limit + 16) { try createFile("f\(number)") }
        try startWatching()

        let events = log.wait { $0.contains { $0.mask.contains(.queueOverflow) } }
        let overflow = try XCTUnwrap(events.last)
        XCTAssertEqual(overflow, FanotifyEvent(mask: .queueOverflow, pid: 0), "no records, and no process to blame")
        XCTAssertEqual(events.count, limit + 1, "the queue holds `limit` events, then the overflow marker")
        XCTAssertEqual(queue.sync { watcher!.statistics.overflows }, 1)
        XCTAssertTrue(queue.sync { resolver!.forgetStalePaths(after: [overflow]) }, "a lost rename may have made any path stale")
    }

    /// The mark hears the whole file system; the resolver tells the root's tree from the
    /// rest, and keeps both answers.
    func testADirectoryOutsideTheRoot_resolvesAsOutside() throws {
        let mount = try mountScratchFileSystem()
        try systemCall { mkdir(mount + "/inside", 0o755) }
        try systemCall { mkdir(mount + "/inside/deeper", 0o755) }
        try systemCall { mkdir(mount + "/inside-not", 0o755) }
        resolver = try DirectoryHandleResolver(queue: queue, rootPath: Array((mount + "/inside").utf8))
        XCTAssertEqual(try resolve(try handle(of: "inside")), resolved("inside"))
        XCTAssertEqual(try resolve(try handle(of: "inside/deeper")), resolved("inside/deeper"))
        XCTAssertEqual(try resolve(try handle(of: "inside-not")), .outsideRoot(Array(path("inside-not").utf8)),
                       "a sibling whose name starts with the root's is not inside it")
        XCTAssertEqual(try resolve(try handle(of: "")), .outsideRoot(Array(mount.utf8)))
        XCTAssertEqual(try resolve(try handle(of: "")), .outsideRoot(Array(mount.utf8)))
        let statistics = queue.sync { resolver!.statistics }
        XCTAssertEqual(statistics.outsideRoot, 3)
        XCTAssertEqual(statistics.hits, 1)
    }

    /// Through a bind mount of a subdirectory, a directory outside it is not reachable, and
    /// /proc spells it "/": without the check it would pass for the file system's root.
    func testThroughABindMountOfASubdirectory_aDirectoryItDoesNotShowIsOutside() throws {
        let mount = try mountScratchFileSystem()
        try systemCall { mkdir(mount + "/shown", 0o755) }
        try systemCall { mkdir(mount + "/shown/child", 0o755) }
        try systemCall { mkdir(mount + "/hidden", 0o755) }
        let bind = directory + "/bind"
        try systemCall { mkdir(bind, 0o755) }
        try nothingOrErrno { Glibc.mount(mount + "/shown", bind, nil, UInt(MS_BIND), nil) }.get()
        defer {
            // The resolver's fd of the root keeps the bind mount busy.
            queue.sync { resolver = nil }
            XCTAssertNoThrow(try nothingOrErrno { umount2(bind, 0) }.get())
        }
        let viaBind = try DirectoryHandleResolver(queue: queue, rootPath: Array(bind.utf8))
        resolver = viaBind
        let child = try handle(of: "shown/child"), hidden = try handle(of: "hidden")
        XCTAssertEqual(queue.sync { viaBind.resolve(child) }, .path(Array((bind + "/child").utf8)))
        guard case .outsideRoot(let spelled) = queue.sync(execute: { viaBind.resolve(hidden) }) else {
            return XCTFail("a directory the bind mount does not show resolved inside it")
        }
        XCTAssertEqual(String(decoding: spelled, as: UTF8.self), "/", "what this kernel spells")
    }

    func testAHandleOfAnotherFileSystem_isRefusedWithEXDEV() throws {
        try watchScratchFileSystem()
        let resolver = try XCTUnwrap(resolver)
        let foreign = FanotifyFileHandle(fileSystemID: resolver.fileSystemID &+ 1, type: 1, bytes: [1, 2, 3, 4])
        XCTAssertEqual(queue.sync { resolver.resolve(foreign) }, .failed(.improperLink))
        XCTAssertEqual(queue.sync { resolver.statistics.failures }, 1)
    }

    func testTheResolversCache_evictsTheLeastRecentlyUsedBeyondItsCapacity() throws {
        try watchScratchFileSystem(capacity: 2)
        for name in ["one", "two", "three"] { try systemCall { mkdir(path(name), 0o755) } }
        let one = try handle(of: "one"), two = try handle(of: "two"), three = try handle(of: "three")
        XCTAssertEqual(try resolve(one), resolved("one"))
        XCTAssertEqual(try resolve(two), resolved("two"))
        XCTAssertEqual(try resolve(one), resolved("one"), "a hit makes `one` the most recent")
        XCTAssertEqual(try resolve(three), resolved("three"), "evicts `two`")
        XCTAssertEqual(try resolve(one), resolved("one"))
        XCTAssertEqual(try resolve(two), resolved("two"), "a miss again, evicting `three`")
        let statistics = queue.sync { resolver!.statistics }
        XCTAssertEqual(statistics, .init(hits: 2, misses: 4, evictions: 2, gone: 0, failures: 0, outsideRoot: 0, invalidations: 0))
        XCTAssertEqual(queue.sync { resolver!.count }, 2)
    }

    func testMarkingAPathThatDoesNotExist_failsWithTheKernelsErrno() throws {
        let root = try watchScratchFileSystem()
        let watcher = try XCTUnwrap(watcher)
        queue.sync {
            let missing = watcher.markFileSystem(containing: Array((root + "/missing").utf8), mask: .create)
            XCTAssertEqual(missing.map { true }, .failure(.noSuchFileOrDirectory))
            let withNUL = watcher.markFileSystem(containing: Array(root.utf8) + [0], mask: .create)
            XCTAssertEqual(withNUL.map { true }, .failure(.invalidArgument))
        }
    }

    // MARK: - The least-recently-used map

    func testLeastRecentlyUsed_keepsRecencyOrder_andReusesRemovedSlots() {
        func key(_ n: UInt8) -> FanotifyFileHandle { FanotifyFileHandle(fileSystemID: 7, type: 1, bytes: [n]) }
        var map = LeastRecentlyUsed<[UInt8]>(capacity: 3)
        XCTAssertFalse(map.insert([1], for: key(1)))
        XCTAssertFalse(map.insert([2], for: key(2)))
        XCTAssertFalse(map.insert([3], for: key(3)))
        XCTAssertEqual(map.value(for: key(1)), [1])
        XCTAssertEqual(map.keysByRecency, [key(1), key(3), key(2)])
        XCTAssertTrue(map.insert([4], for: key(4)), "full: the oldest, 2, goes")
        XCTAssertNil(map.value(for: key(2)))
        XCTAssertEqual(map.keysByRecency, [key(4), key(1), key(3)])
        map.remove(key(1))
        XCTAssertEqual(map.keysByRecency, [key(4), key(3)])
        XCTAssertFalse(map.insert([5], for: key(5)), "a removed slot makes room")
        XCTAssertFalse(map.insert([33], for: key(3)), "a new value for a key is no eviction")
        XCTAssertEqual(map.keysByRecency, [key(3), key(5), key(4)])
        XCTAssertEqual(map.value(for: key(3)), [33])
        map.removeAll()
        XCTAssertEqual(map.count, 0)
        XCTAssertEqual(map.keysByRecency, [])
        XCTAssertFalse(map.insert([6], for: key(6)))
        XCTAssertEqual(map.keysByRecency, [key(6)])
    }

    // MARK: - Decoding hand-built buffers

    /// One event as the kernel lays it out: metadata, then the records.
    private static func event(mask: FanotifyMask, pid: Int32 = 42, version: UInt8 = 3, metadataLength: UInt16 = 24,
                              eventLength: UInt32? = nil, records: [[UInt8]] = []) -> [UInt8] {
        let body = records.flatMap { $0 }
        var bytes: [UInt8] = []
        bytes += le(eventLength ?? UInt32(24 + body.count))
        bytes += [version, 0]
        bytes += le(metadataLength)
        bytes += le(mask.rawValue)
        bytes += le(Int32(-1))  // fd: FAN_NOFD
        bytes += le(pid)
        return bytes + body
    }

    /// A `fanotify_event_info_fid` record, NUL-terminated name and padding to 4 bytes
    /// included, as the kernel writes it; `length` overrides the header's length field.
    private static func fileIDRecord(type: UInt8, fsid: UInt64 = 0x1122_3344_5566_7788, handleType: Int32 = 1,
                                     handle: [UInt8] = Array(1...12), handleLength: UInt32? = nil,
                                     name: [UInt8]? = nil, length: UInt16? = nil) -> [UInt8] {
        var body = le(fsid) + le(handleLength ?? UInt32(handle.count)) + le(handleType) + handle
        if let name { body += name + [0] }
        while (4 + body.count) % 4 != 0 { body.append(0) }
        return [type, 0] + le(length ?? UInt16(4 + body.count)) + body
    }

    private static func le<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    private static func decode(_ bytes: [UInt8]) -> ([FanotifyEvent], FanotifyEvent.Decoding) {
        var events: [FanotifyEvent] = []
        let decoding = bytes.withUnsafeBytes { FanotifyEvent.decode($0, into: &events) }
        return (events, decoding)
    }

    func testAHandBuiltDirectoryAndNameEvent_decodesEveryField() {
        let bytes = Self.event(mask: [.create, .onDirectory], records: [Self.fileIDRecord(type: 2, name: Array("new dir".utf8))])
        XCTAssertEqual(bytes.count % 4, 0)
        let (events, decoding) = Self.decode(bytes)
        XCTAssertEqual(events, [FanotifyEvent(mask: [.create, .onDirectory], pid: 42,
                                              directory: FanotifyFileHandle(fileSystemID: 0x1122_3344_5566_7788, type: 1, bytes: Array(1...12)),
                                              name: Array("new dir".utf8))])
        XCTAssertEqual(decoding.consumedBytes, bytes.count)
        XCTAssertNil(decoding.firstMalformation)
    }

    func testAQueueOverflow_decodesWithoutRecords() {
        let bytes = Self.event(mask: .queueOverflow, pid: 0) + Self.event(mask: .create, records: [Self.fileIDRecord(type: 2, name: [0x61])])
        let (events, decoding) = Self.decode(bytes)
        XCTAssertEqual(events.map(\.mask), [.queueOverflow, .create])
        XCTAssertNil(events[0].directory)
        XCTAssertEqual(events[0].name, [])
        XCTAssertEqual(decoding, FanotifyEvent.Decoding(consumedBytes: bytes.count))
    }

    func testRenameAndObjectRecords_decode_andUnknownRecordsAreSkipped() {
        let pidfd: [UInt8] = [4, 0] + Self.le(UInt16(8)) + Self.le(Int32(9))
        let future: [UInt8] = [99, 0] + Self.le(UInt16(12)) + [UInt8](repeating: 0xAB, count: 8)
        let bytes = Self.event(mask: .rename, records: [
            Self.fileIDRecord(type: 10, handle: [1, 1, 1, 1], name: Array("old".utf8)), pidfd,
            Self.fileIDRecord(type: 12, handle: [2, 2, 2, 2], name: Array("new".utf8)), future,
            Self.fileIDRecord(type: 1, handleType: 7, handle: [3, 3, 3, 3, 3, 3, 3, 3]),
        ])
        let (events, decoding) = Self.decode(bytes)
        XCTAssertNil(decoding.firstMalformation)
        let event = try? XCTUnwrap(events.first)
        XCTAssertEqual(event?.directory?.bytes, [1, 1, 1, 1])
        XCTAssertEqual(event?.name, Array("old".utf8))
        XCTAssertEqual(event?.newDirectory?.bytes, [2, 2, 2, 2])
        XCTAssertEqual(event?.newName, Array("new".utf8))
        XCTAssertEqual(event?.object, FanotifyFileHandle(fileSystemID: 0x1122_3344_5566_7788, type: 7, bytes: [3, 3, 3, 3, 3, 3, 3, 3]))
    }

    /// Broken framing stops the decoding where it is; what came before is kept.
    func testBrokenFraming_stopsDecoding_andKeepsTheEventsBefore() {
        let good = Self.event(mask: .create, records: [Self.fileIDRecord(type: 2, name: [0x61])])
        let cases: [(bytes: [UInt8], problem: FanotifyMalformation)] = [
            (Array(good.prefix(23)), .truncatedMetadata),
            (Self.event(mask: .create, version: 2), .unsupportedVersion(2)),
            (Self.event(mask: .create, metadataLength: 20), .metadataLength(20)),
            (Self.event(mask: .create, metadataLength: 28), .metadataLength(28)),
            (Self.event(mask: .create, eventLength: 4096), .eventLength(4096)),
            (Self.event(mask: .create, eventLength: 0), .metadataLength(24)),
            (Array(good.dropLast(4)), .eventLength(UInt32(good.count))),
        ]
        for (bytes, problem) in cases {
            let (events, decoding) = Self.decode(good + bytes)
            XCTAssertEqual(events.count, 1, "\(problem)")
            XCTAssertEqual(decoding.consumedBytes, good.count, "\(problem)")
            XCTAssertEqual(decoding.firstMalformation, problem)
            XCTAssertEqual(decoding.droppedEvents, 0)
        }
    }

    /// A broken record inside a well-framed event drops that event only.
    func testABrokenRecord_dropsItsEvent_andDecodingGoesOn() {
        let good = Self.event(mask: .create, records: [Self.fileIDRecord(type: 2, name: [0x61])])
        let record = Self.fileIDRecord(type: 2, name: [0x62])
        let cases: [(records: [[UInt8]], problem: FanotifyMalformation)] = [
            ([Self.fileIDRecord(type: 2, name: [0x62], length: 0)], .recordLength(type: 2, length: 0)),
            ([Self.fileIDRecord(type: 2, name: [0x62], length: 2)], .recordLength(type: 2, length: 2)),
            ([Self.fileIDRecord(type: 2, name: [0x62], length: 200)], .recordLength(type: 2, length: 200)),
            ([[2, 0, 8, 0]], .truncatedRecordHeader),
            ([[1, 0, 8, 0, 0, 0, 0, 0]], .recordLength(type: 1, length: 8)),
            ([Self.fileIDRecord(type: 2, handleLength: 16, name: [])], .unterminatedName),
            ([Self.fileIDRecord(type: 2, handleLength: 500, name: [0x62])], .handleLength(500)),
            ([Self.fileIDRecord(type: 2, handle: [UInt8](repeating: 9, count: 132), name: [0x62])], .handleLength(132)),
            ([record, record], .duplicateRecord(type: 2)),
            ([record, Self.fileIDRecord(type: 3)], .duplicateRecord(type: 3)),
            ([Array(record.dropLast(4)) + [0x63, 0x63, 0x63, 0x63]], .unterminatedName),
        ]
        for (records, problem) in cases {
            var broken = Self.event(mask: .create, records: records)
            if problem == .truncatedRecordHeader {
                // A header cut short: the event ends two bytes into it.
                broken = Self.event(mask: .create, eventLength: 26, records: []) + [2, 0]
            }
            let (events, decoding) = Self.decode(good + broken + good)
            XCTAssertEqual(events.count, 2, "\(problem)")
            XCTAssertEqual(decoding.droppedEvents, 1, "\(problem)")
            XCTAssertEqual(decoding.firstMalformation, problem)
            XCTAssertEqual(decoding.consumedBytes, 2 * good.count + broken.count, "\(problem)")
        }
    }

    /// Every prefix and every single-byte corruption of a real-looking buffer: no crash,
    /// no read outside it (the address sanitizer would see one), and never more events than
    /// whole events in the bytes.
    func testEveryTruncationAndByteFlip_decodesWithoutReadingOutOfBounds() {
        let buffer = Self.event(mask: [.create, .onDirectory], records: [Self.fileIDRecord(type: 2, name: Array("dir".utf8))])
            + Self.event(mask: .queueOverflow, pid: 0)
            + Self.event(mask: .rename, records: [Self.fileIDRecord(type: 10, name: [0x61]), Self.fileIDRecord(type: 12, name: [0x62])])
        for length in 0...buffer.count {
            // A copy of exactly `length` bytes, so a read past it leaves the allocation.
            let prefix = Array(buffer.prefix(length))
            let (events, decoding) = Self.decode(prefix)
            XCTAssertLessThanOrEqual(decoding.consumedBytes, length)
            XCTAssertLessThanOrEqual(events.count, 3)
        }
        for position in buffer.indices {
            for value: UInt8 in [0, 1, 0x7F, 0xFF] {
                var corrupted = buffer
                corrupted[position] = value
                let (events, decoding) = Self.decode(corrupted)
                XCTAssertLessThanOrEqual(decoding.consumedBytes, corrupted.count)
                XCTAssertLessThanOrEqual(events.count + decoding.droppedEvents, 3)
            }
        }
    }
}
