import Dispatch
import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Directory handles turned back into paths on a tmpfs of the test's own (FanotifyScratch):
/// what is gone, outside the root or on another file system, and the cache that keeps
/// what it learnt.
final class DirectoryHandleResolverTests: ScratchDirectoryTestCase {
    private lazy var fanotify = FanotifyScratch(in: directory, for: self)

    /// A process still in a removed directory keeps its inode alive, so the handle opens,
    /// and /proc spells it "<path> (deleted)": the link count tells it is gone.
    func testARemovedDirectoryStillOpen_resolvesAsGone() throws {
        try fanotify.watchScratchFileSystem()
        try systemCall { mkdir(fanotify.path("held"), 0o755) }
        let held = OwnedFileDescriptor(adopting: try systemCall { open(fanotify.path("held"), O_RDONLY | O_DIRECTORY | O_CLOEXEC) })
        let handleOfHeld = try fanotify.handle(of: "held")
        try systemCall { rmdir(fanotify.path("held")) }
        XCTAssertEqual(try fanotify.resolve(handleOfHeld), .gone)
        try held.close()
    }

    /// The mark hears the whole file system; the resolver tells the root's tree from the
    /// rest, and keeps both answers.
    func testADirectoryOutsideTheRoot_resolvesAsOutside() throws {
        let mount = try fanotify.mountScratchFileSystem()
        try systemCall { mkdir(mount + "/inside", 0o755) }
        try systemCall { mkdir(mount + "/inside/deeper", 0o755) }
        try systemCall { mkdir(mount + "/inside-not", 0o755) }
        fanotify.resolver = try DirectoryHandleResolver(queue: fanotify.queue, rootPath: Array((mount + "/inside").utf8))
        XCTAssertEqual(try fanotify.resolve(try fanotify.handle(of: "inside")), fanotify.resolved("inside"))
        XCTAssertEqual(try fanotify.resolve(try fanotify.handle(of: "inside/deeper")), fanotify.resolved("inside/deeper"))
        XCTAssertEqual(try fanotify.resolve(try fanotify.handle(of: "inside-not")), .outsideRoot(Array(fanotify.path("inside-not").utf8)),
                       "a sibling whose name starts with the root's is not inside it")
        XCTAssertEqual(try fanotify.resolve(try fanotify.handle(of: "")), .outsideRoot(Array(mount.utf8)))
        XCTAssertEqual(try fanotify.resolve(try fanotify.handle(of: "")), .outsideRoot(Array(mount.utf8)))
        let statistics = fanotify.queue.sync { fanotify.resolver!.statistics }
        XCTAssertEqual(statistics.outsideRoot, 3)
        XCTAssertEqual(statistics.hits, 1)
    }

    /// Through a bind mount of a subdirectory, a directory outside it is not reachable, and
    /// /proc spells it "/": without the check it would pass for the file system's root.
    func testThroughABindMountOfASubdirectory_aDirectoryItDoesNotShowIsOutside() throws {
        let mount = try fanotify.mountScratchFileSystem()
        try systemCall { mkdir(mount + "/shown", 0o755) }
        try systemCall { mkdir(mount + "/shown/child", 0o755) }
        try systemCall { mkdir(mount + "/hidden", 0o755) }
        let bind = directory + "/bind"
        try systemCall { mkdir(bind, 0o755) }
        try nothingOrErrno { Glibc.mount(mount + "/shown", bind, nil, UInt(MS_BIND), nil) }.get()
        defer {
            // The resolver's fd of the root keeps the bind mount busy.
            fanotify.queue.sync { fanotify.resolver = nil }
            XCTAssertNoThrow(try nothingOrErrno { umount2(bind, 0) }.get())
        }
        let viaBind = try DirectoryHandleResolver(queue: fanotify.queue, rootPath: Array(bind.utf8))
        fanotify.resolver = viaBind
        let child = try fanotify.handle(of: "shown/child"), hidden = try fanotify.handle(of: "hidden")
        XCTAssertEqual(fanotify.queue.sync { viaBind.resolve(child) }, .path(Array((bind + "/child").utf8)))
        guard case .outsideRoot(let spelled) = fanotify.queue.sync(execute: { viaBind.resolve(hidden) }) else {
            return XCTFail("a directory the bind mount does not show resolved inside it")
        }
        XCTAssertEqual(String(decoding: spelled, as: UTF8.self), "/", "what this kernel spells")
    }

    func testAHandleOfAnotherFileSystem_isRefusedWithEXDEV() throws {
        try fanotify.watchScratchFileSystem()
        let resolver = try XCTUnwrap(fanotify.resolver)
        let foreign = FanotifyFileHandle(fileSystemID: resolver.fileSystemID &+ 1, type: 1, bytes: [1, 2, 3, 4])
        XCTAssertEqual(fanotify.queue.sync { resolver.resolve(foreign) }, .failed(.improperLink))
        XCTAssertEqual(fanotify.queue.sync { resolver.statistics.failures }, 1)
    }

    func testTheResolversCache_evictsTheLeastRecentlyUsedBeyondItsCapacity() throws {
        try fanotify.watchScratchFileSystem(capacity: 2)
        for name in ["one", "two", "three"] { try systemCall { mkdir(fanotify.path(name), 0o755) } }
        let one = try fanotify.handle(of: "one"), two = try fanotify.handle(of: "two"), three = try fanotify.handle(of: "three")
        XCTAssertEqual(try fanotify.resolve(one), fanotify.resolved("one"))
        XCTAssertEqual(try fanotify.resolve(two), fanotify.resolved("two"))
        XCTAssertEqual(try fanotify.resolve(one), fanotify.resolved("one"), "a hit makes `one` the most recent")
        XCTAssertEqual(try fanotify.resolve(three), fanotify.resolved("three"), "evicts `two`")
        XCTAssertEqual(try fanotify.resolve(one), fanotify.resolved("one"))
        XCTAssertEqual(try fanotify.resolve(two), fanotify.resolved("two"), "a miss again, evicting `three`")
        let statistics = fanotify.queue.sync { fanotify.resolver!.statistics }
        XCTAssertEqual(statistics, .init(hits: 2, misses: 4, evictions: 2, gone: 0, failures: 0, outsideRoot: 0, invalidations: 0))
        XCTAssertEqual(fanotify.queue.sync { fanotify.resolver!.count }, 2)
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
}
