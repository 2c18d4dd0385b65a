import Dispatch
import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

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
        // Removed after the test, once nothing is mounted on it any more.
        let parent = try makeScratchDirectory()
        // A space in the mount point: mountinfo writes it as \040.
        let target = parent + "/mount point"
        try systemCall { mkdir(target, 0o755) }

        // Changes the watcher reported, collected on its queue and read from the test's thread.
        let log = EventRecorder<MountChange, Errno>()
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
        let isTheMount = { (change: MountChange) in change.addedMountPoints.contains(Array(target.utf8)) }
        let mounted = log.wait { $0.contains(where: isTheMount) }.first(where: isTheMount)
        let unmounted = nothingOrErrno { umount2(target, 0) }
        XCTAssertNoThrow(try unmounted.get())
        XCTAssertEqual(mounted?.added.first?.fileSystemType, "tmpfs",
                       "the mount was not reported: \(queue.sync { watcher.describe().text() })")

        let isTheUnmount = { (change: MountChange) in change.removedMountPoints.contains(Array(target.utf8)) }
        let removed = log.wait { $0.contains(where: isTheUnmount) }.first(where: isTheUnmount)
        XCTAssertNotNil(removed, "the unmount was not reported")
        XCTAssertEqual(log.recordedFailures, [])
        XCTAssertFalse(queue.sync { watcher.mounts.contains { $0.mountPoint == Array(target.utf8) } })
    }
}
