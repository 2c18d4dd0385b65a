import Dispatch
import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore

/// Changes the watcher reported, collected on its queue and read from the test's thread.
private final class MountLog: @unchecked Sendable {
    private let lock = NSLock()
    private var changes: [MountChange] = []
    private var failures: [Errno] = []
    private let arrived = DispatchSemaphore(value: 0)

    func record(_ change: MountChange) {
        lock.lock()
        changes.append(change)
        lock.unlock()
        arrived.signal()
    }

    func recordFailure(_ failure: Errno) {
        lock.lock()
        failures.append(failure)
        lock.unlock()
        arrived.signal()
    }

    var readFailures: [Errno] {
        lock.lock()
        defer { lock.unlock() }
        return failures
    }

    /// Waits, up to a deadline, for a change that satisfies `matches`.
    func wait(timeout: Duration = .seconds(10), for matches: (MountChange) -> Bool) -> MountChange? {
        let deadline = MonotonicInstant.now + timeout
        while true {
            lock.lock()
            let found = changes.first(where: matches)
            lock.unlock()
            if let found { return found }
            if arrived.wait(timeout: deadline.dispatchTime) == .timedOut { return nil }
        }
    }
}

final class MountWatcherTests: XCTestCase {
    private let queue = DispatchQueue(label: "watchkeeper.test.mounts")

    func testMountinfoLines_parseIDsTypesAndUnescapedMountPoints() {
        let text = """
            22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
            97 22 0:45 / /srv/with\\040space\\011tab\\134slash rw,nosuid shared:50 master:3 - tmpfs none rw,size=1024k
            98 22 0:46 / /srv/odd\\9x rw - tmpfs none rw
            not a mountinfo line

            """
        let entries = MountInfoEntry.parse(Array(text.utf8))
        XCTAssertEqual(entries.map(\.mountID), [22, 97, 98])
        XCTAssertEqual(entries.map(\.parentID), [1, 22, 22])
        XCTAssertEqual(entries.map(\.fileSystemType), ["ext4", "tmpfs", "tmpfs"])
        XCTAssertEqual(entries[1].mountPoint, Array("/srv/with space\ttab\\slash".utf8))
        XCTAssertEqual(entries[2].mountPoint, Array("/srv/odd\\9x".utf8), "only three-digit octal escapes are the kernel's")
    }

    func testChanges_areTakenByMountID_soAStackedMountIsAnAddition() {
        let root = MountInfoEntry(mountID: 1, parentID: 0, mountPoint: Array("/".utf8), fileSystemType: "ext4")
        let first = MountInfoEntry(mountID: 5, parentID: 1, mountPoint: Array("/mnt".utf8), fileSystemType: "tmpfs")
        let stacked = MountInfoEntry(mountID: 6, parentID: 5, mountPoint: Array("/mnt".utf8), fileSystemType: "tmpfs")
        let change = MountChange.between([root, first], [root, first, stacked])
        XCTAssertEqual(change.added, [stacked])
        XCTAssertEqual(change.removed, [])
        XCTAssertTrue(MountChange.between([root, first], [root, first]).isEmpty)
        XCTAssertEqual(MountChange.between([root, first, stacked], [root]).removedMountPoints, [Array("/mnt".utf8)])
    }

    func testMountingAndUnmountingATmpfs_areBothReported() throws {
        try XCTSkipUnless(geteuid() == 0, "mounting a tmpfs needs root")
        var template = Array("/tmp/wk-mount-test-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Errno(rawValue: errno) }
        let parent = String(cString: made)
        // A space in the mount point: mountinfo writes it as \040.
        let target = parent + "/mount point"
        try systemCall { mkdir(target, 0o755) }
        defer {
            // The directory can only go once nothing is mounted on it.
            XCTAssertNoThrow(try FileManager.default.removeItem(atPath: parent))
        }

        let log = MountLog()
        let watcher = try MountWatcher(queue: queue, onChange: { log.record($0) }, onReadFailure: { log.recordFailure($0) })
        defer { queue.sync { watcher.cancel() } }
        XCTAssertNoThrow(try queue.sync { watcher.start() }.get())

        switch nothingOrErrno({ mount("watchkeeper-test", target, "tmpfs", 0, nil) }) {
        case .success:
            break
        case .failure(let failure) where failure == .notPermitted:
            throw XCTSkip(failure.unable("mount a tmpfs on \(target)") + " (no CAP_SYS_ADMIN here)")
        case .failure(let failure):
            return XCTFail(failure.unable("mount a tmpfs on \(target)"))
        }
        let mounted = log.wait { $0.addedMountPoints.contains(Array(target.utf8)) }
        let unmounted = nothingOrErrno { umount2(target, 0) }
        XCTAssertNoThrow(try unmounted.get())
        XCTAssertEqual(mounted?.added.first?.fileSystemType, "tmpfs",
                       "the mount was not reported: \(queue.sync { watcher.describe().text() })")

        let removed = log.wait { $0.removedMountPoints.contains(Array(target.utf8)) }
        XCTAssertNotNil(removed, "the unmount was not reported")
        XCTAssertEqual(log.readFailures, [])
        XCTAssertFalse(queue.sync { watcher.mounts.contains { $0.mountPoint == Array(target.utf8) } })
    }
}
