import CWatchkeeperSystem
import Dispatch
import SystemPackage
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Real fanotify on a tmpfs a test mounts in its scratch directory (a file system mark hears
/// the whole file system, so a private one keeps the rest of the machine out of the events):
/// the mount, a watcher and a handle resolver on it, and the handles and paths a test
/// compares with theirs. The kernel parts need root: fanotify_init with FID reporting,
/// FAN_MARK_FILESYSTEM, open_by_handle_at and mount all want CAP_SYS_ADMIN (ScratchTmpfs
/// skips the test without it). Shared by FanotifyWatcherTests and DirectoryHandleResolverTests.
final class FanotifyScratch {
    let queue = DispatchQueue(label: "watchkeeper.test.fanotify")
    let log = EventRecorder<FanotifyEvent, Errno>()
    var watcher: FanotifyWatcher?
    var resolver: DirectoryHandleResolver?
    /// The tmpfs's mount point as the kernel spells it (realpath), once mounted.
    private(set) var mountPoint: String?
    private let directory: String

    /// One for `test`, in its scratch `directory`; its watcher is cancelled and its tmpfs
    /// unmounted when the test ends, before the directory is removed.
    init(in directory: String, for test: XCTestCase) {
        self.directory = directory
        test.addTeardownBlock { [self] in tearDown() }
    }

    private func tearDown() {
        queue.sync {
            watcher?.cancel()
            watcher = nil
            // Its O_PATH fd of the root would keep the tmpfs busy.
            resolver = nil
        }
        if let mountPoint {
            XCTAssertNoThrow(try nothingOrErrno { umount2(mountPoint, 0) }.get())
        }
    }

    /// Mounts a tmpfs on the scratch directory's "mnt" and returns its real path.
    func mountScratchFileSystem() throws -> String {
        mountPoint = try ScratchTmpfs(at: directory + "/mnt").path
        return mountPoint!
    }

    /// A tmpfs, a watcher with `mask` on it, not started, and a resolver of its root.
    /// Events queue in the kernel until `startWatching()`: a test that starts after its
    /// changes sees exactly what the kernel merged, with no read racing the changes.
    @discardableResult
    func watchScratchFileSystem(_ mask: FanotifyMask = .treeChanges, reportObjectHandles: Bool = false,
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

    func startWatching() throws {
        try queue.sync { try watcher!.start() }
    }

    func path(_ relative: String) -> String { mountPoint! + "/" + relative }

    func createFile(_ relative: String, contents: String = "") throws {
        let fd = try systemCall { open(path(relative), O_CREAT | O_WRONLY | O_CLOEXEC, 0o644) }
        let owned = OwnedFileDescriptor(adopting: fd)
        var bytes = Array(contents.utf8)
        if !bytes.isEmpty { _ = try systemCall { write(fd, &bytes, bytes.count) } }
        try owned.close()
    }

    /// The handle name_to_handle_at gives for `relative`, to compare with an event's.
    func handle(of relative: String) throws -> FanotifyFileHandle {
        var raw = wk_file_handle()
        var mountID: Int32 = 0
        try systemCall { wk_name_to_handle_at(AT_FDCWD, path(relative), &raw, &mountID, 0) }
        let bytes = withUnsafeBytes(of: raw.f_handle) { Array($0.prefix(Int(raw.handle_bytes))) }
        return FanotifyFileHandle(fileSystemID: try XCTUnwrap(resolver).fileSystemID, type: raw.handle_type, bytes: bytes)
    }

    func resolve(_ handle: FanotifyFileHandle?) throws -> DirectoryHandleResolver.Resolution {
        let handle = try XCTUnwrap(handle, "the event has no directory handle")
        return queue.sync { resolver!.resolve(handle) }
    }

    /// What the resolver should answer for `relative` ("" for the mount point itself).
    func resolved(_ relative: String) -> DirectoryHandleResolver.Resolution {
        .path(Array((relative.isEmpty ? mountPoint! : path(relative)).utf8))
    }

    static func names(_ events: [FanotifyEvent]) -> [String] {
        events.map { String(decoding: $0.name, as: UTF8.self) }
    }
}
