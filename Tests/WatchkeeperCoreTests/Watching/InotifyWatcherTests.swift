import Dispatch
import Foundation
import SystemPackage
import XCTest

@_spi(Fuzzing) @testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Real inotify on real temporary directories: what the kernel reports and how it is decoded.
final class InotifyWatcherTests: ScratchDirectoryTestCase {
    private let queue = DispatchQueue(label: "watchkeeper.test.inotify")
    /// Events the watcher delivered, collected on its queue and read from the test's thread.
    private var log = EventRecorder<InotifyEvent, Errno>()
    private var watcher: InotifyWatcher?

    override func setUpWithError() throws {
        try super.setUpWithError()
        log = EventRecorder()
        let log = self.log
        watcher = try InotifyWatcher(queue: queue, onEvents: { log.record(contentsOf: $0) }, onReadFailure: { log.recordFailure($0) })
    }

    override func tearDownWithError() throws {
        queue.sync { watcher?.cancel() }
        watcher = nil
        try super.tearDownWithError()
    }

    private func path(_ relative: String) -> String { directory + "/" + relative }

    private func watch(_ relative: String, _ mask: InotifyMask, existing: InotifyWatcher.ExistingWatch = .addToMask) throws -> WatchDescriptor {
        let bytes = Array((relative.isEmpty ? directory : path(relative)).utf8)
        return try queue.sync { watcher!.addWatch(path: bytes, mask: mask, existing: existing) }.get()
    }

    private func start() throws {
        try queue.sync { try watcher!.start() }
    }

    private func createFile(_ relative: String, contents: String = "") throws {
        let fd = try systemCall { open(path(relative), O_CREAT | O_WRONLY | O_CLOEXEC, 0o644) }
        let owned = OwnedFileDescriptor(adopting: fd)
        var bytes = Array(contents.utf8)
        if !bytes.isEmpty { _ = try systemCall { write(fd, &bytes, bytes.count) } }
        try owned.close()
    }

    func testCreateWriteAndRename_areDecoded_withOneCookieForTheRenamesTwoHalves() throws {
        let wd = try watch("", [.create, .closeWrite, .movedFrom, .movedTo])
        try start()
        try createFile("a.txt", contents: "hello")
        try systemCall { rename(path("a.txt"), path("b.txt")) }

        let events = log.wait { $0.count >= 4 }
        XCTAssertEqual(events.map(\.mask), [.create, .closeWrite, .movedFrom, .movedTo], "\(events)")
        XCTAssertEqual(events.map { String(decoding: $0.name, as: UTF8.self) }, ["a.txt", "a.txt", "a.txt", "b.txt"])
        XCTAssertTrue(events.allSatisfy { $0.wd == wd })
        XCTAssertEqual(events[0].cookie, 0)
        XCTAssertNotEqual(events[2].cookie, 0)
        XCTAssertEqual(events[2].cookie, events[3].cookie)
    }

    func testARootRenamedAway_reportsMoveSelfForItsDescriptor_andTheTableStopsAttributingIt() throws {
        try systemCall { mkdir(path("root"), 0o755) }
        let wd = try watch("root", [.create, .moveSelf])
        try start()
        var table = WatchTable<String>()
        table.insert(wd, for: .init(owner: "rule", relative: []))

        try systemCall { rename(path("root"), path("elsewhere")) }
        let moved = log.wait { $0.contains { $0.mask.contains(.moveSelf) } }
        XCTAssertEqual(moved.first { $0.mask.contains(.moveSelf) }?.wd, wd, "\(moved)")
        XCTAssertEqual(table.interpret(moved[0]), .movedAway(wd, locations: [.init(owner: "rule", relative: [])]))

        // The watch followed the directory: its events now come from "elsewhere".
        try createFile("elsewhere/late.txt")
        let later = log.wait { $0.contains { $0.mask.contains(.create) } }
        let create = try XCTUnwrap(later.first { $0.mask.contains(.create) })
        XCTAssertEqual(create.wd, wd)
        XCTAssertEqual(table.interpret(create), .unattributed(create))
    }

    func testADeletedDirectory_reportsDeleteSelfThenIgnored() throws {
        try systemCall { mkdir(path("doomed"), 0o755) }
        let wd = try watch("doomed", [.deleteSelf, .create])
        try start()
        var table = WatchTable<String>()
        let location = WatchTable<String>.Location(owner: "rule", relative: Array("doomed".utf8))
        table.insert(wd, for: location)

        try systemCall { rmdir(path("doomed")) }
        let events = log.wait { $0.contains { $0.mask.contains(.ignored) } }
        XCTAssertEqual(events.map(\.mask), [.deleteSelf, .ignored], "\(events)")
        XCTAssertTrue(events.allSatisfy { $0.wd == wd })
        XCTAssertEqual(table.interpret(events[0]), .deleted(wd, locations: [location]))
        XCTAssertEqual(table.interpret(events[1]), .watchGone(wd, locations: [location]))
        XCTAssertEqual(table.descriptorCount, 0)
    }

    func testAnUnmountedFileSystem_reportsUnmountThenIgnored_forTheWatchInsideIt() throws {
        try XCTSkipUnless(geteuid() == 0, "mounting a tmpfs needs root")
        try systemCall { mkdir(path("mnt"), 0o755) }
        switch nothingOrErrno({ mount("watchkeeper-test", path("mnt"), "tmpfs", 0, nil) }) {
        case .success: break
        case .failure(let failure) where failure == .notPermitted:
            throw XCTSkip(failure.unable("mount a tmpfs on \(path("mnt"))") + " (no CAP_SYS_ADMIN here)")
        case .failure(let failure): return XCTFail(failure.unable("mount a tmpfs on \(path("mnt"))"))
        }
        let wd = try watch("mnt", [.create])
        try start()
        var table = WatchTable<String>()
        let location = WatchTable<String>.Location(owner: "rule", relative: Array("mnt".utf8))
        table.insert(wd, for: location)

        XCTAssertNoThrow(try nothingOrErrno { umount2(path("mnt"), 0) }.get())
        let events = log.wait { $0.contains { $0.mask.contains(.ignored) } }
        // The watched inode is the mount's root directory, so the kernel adds IN_ISDIR.
        XCTAssertEqual(events.map(\.mask), [[.unmount, .isDirectory], .ignored], "\(events)")
        XCTAssertTrue(events.allSatisfy { $0.wd == wd })
        XCTAssertEqual(table.interpret(events[0]), .unmounted(wd, locations: [location]))
        XCTAssertEqual(table.interpret(events[1]), .watchGone(wd, locations: [location]))
    }

    /// The queue limit (fs.inotify.max_queued_events) is machine-wide and read at each
    /// inotify_init, so lowering it would also shrink the queues of anything else starting
    /// meanwhile; instead the watcher is not started until more events than the limit are
    /// queued, which overflows it on any machine.
    func testMoreEventsThanTheQueueHolds_reportQueueOverflow() throws {
        let limitText = try String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8)
        let limit = try XCTUnwrap(Int(limitText.trimmingCharacters(in: .whitespacesAndNewlines)))
        try XCTSkipIf(limit > 1_000_000, "max_queued_events is \(limit): too many events to queue in a unit test")
        try createFile("busy")
        _ = try watch("", [.open, .closeNoWrite])
        // Open and close alternate, so no event equals the one before it, which is the
        // only case the kernel merges.
        for _ in 0..<(limit / 2 + 64) {
            let fd = try systemCall { open(path("busy"), O_RDONLY | O_CLOEXEC) }
            try OwnedFileDescriptor(adopting: fd).close()
        }
        try start()

        let events = log.wait { $0.contains { $0.mask.contains(.queueOverflow) } }
        let overflow = try XCTUnwrap(events.first { $0.mask.contains(.queueOverflow) })
        XCTAssertEqual(overflow.wd, .none)
        XCTAssertEqual(events.count, limit + 1, "the queue holds `limit` events, then the overflow marker")
        var table = WatchTable<String>()
        XCTAssertEqual(table.interpret(overflow), .overflow)
        XCTAssertEqual(queue.sync { watcher!.statistics.overflows }, 1)
    }

    func testNamesWithEveryByteExceptNULAndSlash_decodeExactly() throws {
        let everyByte = (UInt8(1)...UInt8(255)).filter { $0 != UInt8(ascii: "/") }
        let names: [[UInt8]] = [everyByte, [0xFF], [0x80, 0x01, 0x7F], Array(" \t\n\\".utf8), [UInt8(ascii: "."), 0xC3]]
        let wd = try watch("", [.create])
        try start()
        for name in names {
            let full = Array(directory.utf8) + [UInt8(ascii: "/")] + name + [0]
            let fd = try full.withUnsafeBufferPointer { bytes in
                try bytes.withMemoryRebound(to: CChar.self) { path in
                    try systemCall { open(path.baseAddress!, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600) }
                }
            }
            try OwnedFileDescriptor(adopting: fd).close()
        }
        let events = log.wait { $0.count >= names.count }
        XCTAssertEqual(events.map(\.name), names)
        XCTAssertTrue(events.allSatisfy { $0.wd == wd && $0.mask == .create })
    }

    func testAddWatch_failsWithTheKernelsErrno() throws {
        try createFile("plain")
        let watcher = try XCTUnwrap(watcher)
        queue.sync {
            XCTAssertEqual(watcher.addWatch(path: Array(path("missing").utf8), mask: .create, existing: .addToMask),
                           .failure(.noSuchFileOrDirectory))
            XCTAssertEqual(watcher.addWatch(path: Array(path("plain").utf8), mask: [.create, .onlyDirectory], existing: .addToMask),
                           .failure(.notDirectory))
            XCTAssertEqual(watcher.addWatch(path: Array(directory.utf8) + [0], mask: .create, existing: .addToMask),
                           .failure(.invalidArgument))
            guard case .success = watcher.addWatch(path: Array(directory.utf8), mask: .create, existing: .fail) else {
                return XCTFail("the first watch of the directory failed")
            }
            XCTAssertEqual(watcher.addWatch(path: Array(directory.utf8), mask: .delete, existing: .fail), .failure(.fileExists))
        }
    }

    func testAddToMask_keepsTheFirstOwnersEvents_andReplaceMaskDropsThem() throws {
        let first = try watch("", [.create], existing: .replaceMask)
        let second = try watch("", [.delete], existing: .addToMask)
        XCTAssertEqual(first, second, "one inode, one descriptor")
        try start()
        try createFile("one")
        try systemCall { unlink(path("one")) }
        let both = log.wait { $0.contains { $0.mask.contains(.delete) } }
        XCTAssertEqual(both.map(\.mask), [.create, .delete])

        _ = try watch("", [.delete], existing: .replaceMask)
        try createFile("two")
        try systemCall { unlink(path("two")) }
        // Events arrive in order: the second DELETE arriving means no CREATE came before it.
        let after = log.wait { $0.filter { $0.mask.contains(.delete) }.count >= 2 }
        XCTAssertEqual(after.map(\.mask), [.create, .delete, .delete])
    }

    func testRemoveWatch_isFollowedByIgnored_andFailsOnceTheWatchIsGone() throws {
        let wd = try watch("", [.create])
        try start()
        XCTAssertNoThrow(try queue.sync { watcher!.removeWatch(wd) }.get())
        let events = log.wait { $0.contains { $0.mask.contains(.ignored) } }
        XCTAssertEqual(events, [InotifyEvent(wd: wd, mask: .ignored, cookie: 0, name: [])])
        guard case .failure(let failure) = queue.sync(execute: { watcher!.removeWatch(wd) }) else {
            return XCTFail("removing a watch twice succeeded")
        }
        XCTAssertEqual(failure, .invalidArgument)
    }

    func testAfterCancel_watchesFailWithEBADF_insteadOfUsingAReusedNumber() throws {
        queue.sync { watcher!.cancel() }
        XCTAssertEqual(queue.sync { watcher!.addWatch(path: Array(directory.utf8), mask: .create, existing: .addToMask) },
                       .failure(.badFileDescriptor))
    }

    func testMaskDescription_namesEveryBit_likeTheKernel() {
        XCTAssertEqual(InotifyMask([.closeWrite, .isDirectory]).description, "CLOSE_WRITE|ISDIR")
        XCTAssertEqual(InotifyMask.queueOverflow.description, "Q_OVERFLOW")
        XCTAssertEqual(InotifyMask([]).description, "0")
        XCTAssertEqual(InotifyMask(rawValue: 0x0000_1000 | 0x0000_0100).description, "CREATE|0x1000")
        XCTAssertEqual(InotifyMask.allEvents, [.access, .modify, .attrib, .close, .open, .move, .create, .delete, .deleteSelf, .moveSelf])
    }

    func testDecode_readsPackedRecords_andStopsAtATruncatedOne() {
        func record(wd: Int32, mask: UInt32, cookie: UInt32, name: [UInt8], padTo length: Int) -> [UInt8] {
            var bytes: [UInt8] = []
            withUnsafeBytes(of: wd) { bytes += $0 }
            withUnsafeBytes(of: mask) { bytes += $0 }
            withUnsafeBytes(of: cookie) { bytes += $0 }
            withUnsafeBytes(of: UInt32(length)) { bytes += $0 }
            return bytes + name + [UInt8](repeating: 0, count: length - name.count)
        }
        let data = record(wd: 1, mask: InotifyMask.create.rawValue, cookie: 0, name: Array("x".utf8), padTo: 16)
            + record(wd: 2, mask: InotifyMask.deleteSelf.rawValue, cookie: 0, name: [], padTo: 0)
            + record(wd: 3, mask: InotifyMask.movedTo.rawValue, cookie: 9, name: Array("cut".utf8), padTo: 16).prefix(20)
        var events: [InotifyEvent] = []
        let used = data.withUnsafeBytes { InotifyEvent.decode($0, into: &events) }
        XCTAssertEqual(events, [InotifyEvent(wd: WatchDescriptor(rawValue: 1), mask: .create, cookie: 0, name: Array("x".utf8)),
                                InotifyEvent(wd: WatchDescriptor(rawValue: 2), mask: .deleteSelf, cookie: 0, name: [])])
        XCTAssertEqual(used, 32 + 16)
    }
}
