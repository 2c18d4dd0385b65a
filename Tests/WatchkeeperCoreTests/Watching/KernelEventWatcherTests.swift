import CWatchkeeperSystem
import Dispatch
import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The reader thread under a KernelEventWatcher (an InotifyWatcher here, on real inotify):
/// where the handler runs, in what order it delivers, and how it ends.
final class KernelEventWatcherTests: ScratchDirectoryTestCase {
    private let queue = DispatchQueue(label: "watchkeeper.test.kernel-events")
    private var log = EventRecorder<InotifyEvent, Errno>()
    /// The kernel thread id each delivery ran in, and whether it was on `queue`.
    private struct Delivery: Sendable {
        let thread: Int32
        let onQueue: Bool
    }
    private var deliveries = EventRecorder<Delivery, Never>()
    private var watcher: InotifyWatcher?

    override func setUpWithError() throws {
        try super.setUpWithError()
        log = EventRecorder()
        deliveries = EventRecorder()
        let log = self.log
        let deliveries = self.deliveries
        let queue = self.queue
        watcher = try InotifyWatcher(queue: queue, onEvents: { events in
            // dispatchPrecondition would stop the whole test run; record the answer instead.
            let onQueue = DispatchQueue.getSpecific(key: Self.queueKey) == true
            deliveries.record(Delivery(thread: wk_gettid(), onQueue: onQueue))
            log.record(contentsOf: events)
        }, onReadFailure: { log.recordFailure($0) })
        queue.setSpecific(key: Self.queueKey, value: true)
    }

    private static let queueKey = DispatchSpecificKey<Bool>()

    override func tearDownWithError() throws {
        queue.sync { watcher?.cancel() }
        watcher = nil
        try super.tearDownWithError()
    }

    private func path(_ relative: String) -> String { directory + "/" + relative }

    /// Watches the scratch directory, starts, and returns the reader's thread id.
    private func watchAndStart(_ mask: InotifyMask = [.create]) throws -> Int32 {
        let watcher = try XCTUnwrap(watcher)
        try queue.sync {
            _ = try watcher.addWatch(path: Array(directory.utf8), mask: mask, existing: .addToMask).get()
            try watcher.start()
        }
        var thread: Int32 = 0
        XCTAssertTrue(eventually { thread = watcher.readerThreadID; return thread != 0 }, "the reader thread never ran")
        return thread
    }

    private func createFile(_ name: String) throws {
        try OwnedFileDescriptor(adopting: try systemCall { open(path(name), O_CREAT | O_WRONLY | O_CLOEXEC, 0o644) }).close()
    }

    private func eventually(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
        let deadline = MonotonicInstant.now + timeout * testDeadlineScale
        while MonotonicInstant.now < deadline {
            if condition() { return true }
            usleep(2_000)
        }
        return condition()
    }

    private static func threadExists(_ thread: Int32) -> Bool {
        FileManager.default.fileExists(atPath: "/proc/self/task/\(thread)")
    }

    /// Whether `fd` is still an inotify instance watching `inode`: its fdinfo lists each
    /// watch's inode, so a number reused by another file after the close cannot pass for it.
    private static func inotifyFd(_ fd: Int32, watches inode: UInt64) -> Bool {
        guard let info = try? String(contentsOfFile: "/proc/self/fdinfo/\(fd)", encoding: .utf8) else { return false }
        return info.contains("ino:\(String(inode, radix: 16)) ")
    }

    private func scratchInode() throws -> UInt64 {
        var info = stat()
        try systemCall { stat(directory, &info) }
        return UInt64(info.st_ino)
    }

    func testTheHandler_runsOnTheQueue_inTheReaderThreadItself() throws {
        let reader = try watchAndStart()
        try createFile("one")
        _ = log.wait { $0.count >= 1 }
        try createFile("two")
        _ = log.wait { $0.count >= 2 }
        let seen = deliveries.recorded
        XCTAssertFalse(seen.isEmpty, "nothing was delivered")
        XCTAssertTrue(seen.allSatisfy { $0.thread == reader }, "delivered in threads \(seen.map(\.thread)), the reader is \(reader)")
        XCTAssertTrue(seen.allSatisfy(\.onQueue), "a delivery ran off the watcher's queue")
        let comm = try String(contentsOfFile: "/proc/self/task/\(reader)/comm", encoding: .utf8)
        XCTAssertEqual(comm, "wk-inotify\n")
    }

    func testTheReaderThread_blocksEverySignal_whateverTheThreadThatStartedIt() throws {
        // start() runs in this test's thread (inside queue.sync), whose mask blocks nothing.
        var mine = sigset_t()
        pthread_sigmask(SIG_SETMASK, nil, &mine)
        XCTAssertEqual(sigismember(&mine, SIGTERM), 0, "the test thread blocks SIGTERM: the test proves nothing")
        let reader = try watchAndStart()
        let status = try String(contentsOfFile: "/proc/self/task/\(reader)/status", encoding: .utf8)
        let blocked = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("SigBlk:") })
        let mask = try XCTUnwrap(UInt64(blocked.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16))
        // Every signal but SIGKILL and SIGSTOP (the kernel blocks neither) and glibc's own
        // two (32 and 33), which pthread masks never hold. Bit n - 1 is signal n.
        let unblockable = [SIGKILL, SIGSTOP, 32, 33].reduce(UInt64(0)) { $0 | UInt64(1) << UInt64($1 - 1) }
        XCTAssertEqual(mask, ~unblockable, String(mask, radix: 16))
    }

    func testCancel_closesTheFd_andTheReaderThreadEnds() throws {
        let inode = try scratchInode()
        let reader = try watchAndStart()
        let fd = try XCTUnwrap(watcher).descriptor.rawValue
        XCTAssertTrue(Self.threadExists(reader))
        XCTAssertTrue(Self.inotifyFd(fd, watches: inode), "fdinfo of \(fd) does not list the watch")

        queue.sync { watcher!.cancel() }
        XCTAssertTrue(eventually { !Self.threadExists(reader) }, "the reader thread \(reader) is still there")
        XCTAssertFalse(Self.inotifyFd(fd, watches: inode), "fd \(fd) is still open")
        XCTAssertEqual(try XCTUnwrap(watcher).readerThreadID, 0)
    }

    func testCancelBeforeStart_closesTheFd_withNoThreadEverMade() throws {
        let inode = try scratchInode()
        let watcher = try XCTUnwrap(watcher)
        let fd = watcher.descriptor.rawValue
        try queue.sync { _ = try watcher.addWatch(path: Array(directory.utf8), mask: .create, existing: .addToMask).get() }
        XCTAssertTrue(Self.inotifyFd(fd, watches: inode))
        queue.sync { watcher.cancel() }
        XCTAssertFalse(Self.inotifyFd(fd, watches: inode), "closed at once: no thread holds it")
        try queue.sync { try watcher.start() }
        XCTAssertEqual(watcher.readerThreadID, 0, "a cancelled watcher started a thread")
    }

    /// The reader woken while the queue is busy waits in `queue.sync` (a futex); the cancel in
    /// that busy block must neither wait for it (a deadlock) nor let it read afterwards.
    func testCancel_whileTheReaderWaitsForTheQueue_endsItWithoutDelivering() throws {
        let inode = try scratchInode()
        let reader = try watchAndStart()
        let fd = try XCTUnwrap(watcher).descriptor.rawValue
        var waited = false
        queue.sync {
            do { try createFile("while-busy") } catch { XCTFail("\(error)") }
            waited = eventually { Self.currentSystemCall(of: reader) == Self.futex }
            watcher!.cancel()
        }
        XCTAssertTrue(waited, "the reader never waited for the queue (system call \(Self.currentSystemCall(of: reader) ?? -1))")
        XCTAssertTrue(eventually { !Self.threadExists(reader) }, "the reader thread \(reader) is still there")
        XCTAssertFalse(Self.inotifyFd(fd, watches: inode), "fd \(fd) is still open")
        XCTAssertEqual(log.recorded, [], "delivered after cancel")
    }

    func testEvents_areDeliveredInTheKernelsOrder_acrossWakeUps() throws {
        _ = try watchAndStart([.create, .movedFrom, .movedTo])
        var expected: [String] = []
        for index in 0..<300 {
            try createFile("f\(index)")
            expected.append("f\(index)")
            if index % 3 == 0 {
                try systemCall { rename(path("f\(index)"), path("g\(index)")) }
                expected += ["f\(index)", "g\(index)"]
            }
            if index % 50 == 49 { usleep(5_000) }
        }
        let events = log.wait { $0.count >= expected.count }
        XCTAssertEqual(events.map { String(decoding: $0.name, as: UTF8.self) }, expected)
        XCTAssertGreaterThan(queue.sync { watcher!.statistics.wakeUps }, 0)
    }

    #if arch(x86_64)
    private static let futex = 202
    #elseif arch(arm64)
    private static let futex = 98
    #endif

    /// The system call a thread of ours is blocked in, from /proc (its first field).
    private static func currentSystemCall(of thread: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/task/\(thread)/syscall", encoding: .utf8) else { return nil }
        return text.split(separator: " ").first.flatMap { Int($0) }
    }
}
