import XCTest

@testable import WatchkeeperCore

final class PolledTreeTests: XCTestCase {
    private func mount(_ id: Int64, _ point: String, _ type: String, _ source: String = "none") -> MountInfoEntry {
        MountInfoEntry(mountID: id, parentID: 1, mountPoint: Array(point.utf8), fileSystemType: type, source: source)
    }

    private lazy var table = [
        mount(1, "/", "ext4", "/dev/vda"),
        mount(2, "/srv", "ext4", "/dev/vdb"),
        mount(3, "/srv/in/share", "fuse.sshfs", "backup@files:/exports/in"),
        mount(4, "/mnt/nfs", "nfs4", "filer:/vol/in"),
        mount(5, "/mnt/nfs/deeper", "nfs4", "filer:/vol/other"),
    ]

    func testNetworkAndFuseFileSystems_arePolled_localOnesAreNot() {
        for type in ["nfs", "nfs4", "cifs", "smb3", "9p", "virtiofs", "ceph", "glusterfs", "lustre", "afs", "fuse", "fuse.sshfs", "fuse.rclone"] {
            XCTAssertNotNil(FilesystemClass.reasonToPoll(type), type)
        }
        for type in ["ext4", "xfs", "btrfs", "tmpfs", "overlay", "fuseblk", "zfs", "vfat"] {
            XCTAssertNil(FilesystemClass.reasonToPoll(type), type)
        }
        XCTAssertTrue(FilesystemClass.reasonToPoll("fuse.sshfs")!.contains("dir_cache=no"), "sshfs's 20 s cache is said")
    }

    func testAuto_pollsTheWholeTreeWhenTheRootIsOnANetworkFileSystem() {
        let trees = PolledTree.trees(root: Array("/mnt/nfs/in".utf8), recursive: true, method: .auto, mounts: table)
        XCTAssertEqual(trees.map(\.relative), [[]])
        XCTAssertEqual(trees.first?.fileSystemType, "nfs4")
        XCTAssertEqual(trees.first?.source, "filer:/vol/in")
        XCTAssertEqual(trees.first?.isRemote, true)
    }

    func testAuto_pollsOnlyTheNetworkMountsBelowALocalRoot_andOnlyForARecursiveRule() {
        let recursive = PolledTree.trees(root: Array("/srv/in".utf8), recursive: true, method: .auto, mounts: table)
        XCTAssertEqual(recursive.map(\.relative), [Array("share".utf8)])
        XCTAssertEqual(recursive.first?.mountPoint, Array("/srv/in/share".utf8))
        XCTAssertEqual(PolledTree.trees(root: Array("/srv/in".utf8), recursive: false, method: .auto, mounts: table), [])
        XCTAssertEqual(PolledTree.trees(root: Array("/srv/other".utf8), recursive: true, method: .auto, mounts: table), [])
    }

    func testAuto_aNetworkMountInsideAnotherIsPolledWithIt() {
        let trees = PolledTree.trees(root: Array("/mnt".utf8), recursive: true, method: .auto, mounts: table)
        XCTAssertEqual(trees.map(\.relative), [Array("nfs".utf8)])
    }

    func testInotifyNeverPolls_pollAlwaysPollsFromTheRoot() {
        XCTAssertEqual(PolledTree.trees(root: Array("/mnt/nfs".utf8), recursive: true, method: .inotify, mounts: table), [])
        let polled = PolledTree.trees(root: Array("/srv/in".utf8), recursive: false, method: .poll, mounts: table)
        XCTAssertEqual(polled.map(\.relative), [[]])
        XCTAssertEqual(polled.first?.isRemote, false, "a local tree polled by choice keeps the kernel's identities")
        XCTAssertEqual(polled.first?.reason, "method = \"poll\"")
    }

    func testTheLaterOfTwoStackedMounts_decides() {
        let stacked = table + [mount(6, "/mnt/nfs", "tmpfs")]
        XCTAssertEqual(PolledTree.trees(root: Array("/mnt/nfs/in".utf8), recursive: false, method: .auto, mounts: stacked), [])
    }

    func testARemoteFilesIdentity_survivesARemount_andAFuseInodeComesFromItsPath() {
        let tree = PolledTree.trees(root: Array("/srv/in".utf8), recursive: true, method: .auto, mounts: table)[0]
        let before = FileIdentity(device: 41, inode: 7, size: 10, modifiedNanoseconds: 1_000, changedNanoseconds: 1_000)
        // After a remount the kernel gives another device, libfuse another inode number.
        let after = FileIdentity(device: 52, inode: 3, size: 10, modifiedNanoseconds: 1_000, changedNanoseconds: 1_000)
        let path = Array("share/a.csv".utf8)
        XCTAssertTrue(tree.identity(of: before, relative: path).sameFile(as: tree.identity(of: after, relative: path)))
        XCTAssertFalse(tree.identity(of: before, relative: path).sameFile(as: tree.identity(of: after, relative: Array("share/b.csv".utf8))))
        let grown = FileIdentity(device: 52, inode: 3, size: 11, modifiedNanoseconds: 1_000, changedNanoseconds: 1_000)
        XCTAssertFalse(tree.identity(of: before, relative: path).sameFile(as: tree.identity(of: grown, relative: path)))
        // NFS keeps its inode numbers across mounts: they still tell files apart.
        let nfs = PolledTree.trees(root: Array("/mnt/nfs".utf8), recursive: true, method: .auto, mounts: table)[0]
        XCTAssertEqual(nfs.identity(of: before, relative: path).inode, 7)
        XCTAssertNotEqual(nfs.identity(of: before, relative: path).device, 41)
        XCTAssertEqual(nfs.identity(of: before, relative: path).device, nfs.identity(of: after, relative: path).device)
    }

    func testMountinfoSource_isParsed() {
        let entries = MountInfoEntry.parse(Array("43 27 0:39 / /tmp/mnt rw,nosuid - fuse.sshfs root@127.0.0.1:/tmp/with\\040space rw,user_id=0\n".utf8))
        XCTAssertEqual(entries.first?.source, "root@127.0.0.1:/tmp/with space")
        XCTAssertEqual(entries.first?.fileSystemType, "fuse.sshfs")
    }

    /// Issue 36: with sshfs's default 20 s cache, a settle of 5 s let 11 of 50 slowly
    /// written files run on partial content, and nothing said why.
    func testASettleNotAboveSshfsCache_isSaidWithBothWaysOut() {
        let warning = FilesystemClass.settleWarning(type: "fuse.sshfs", settle: .seconds(5))
        XCTAssertNotNil(warning)
        XCTAssertTrue(warning?.contains("poll_settle (5s)") == true, warning ?? "")
        XCTAssertTrue(warning?.contains("cache=no") == true, warning ?? "")
        XCTAssertTrue(warning?.contains("poll_settle = \"21s\"") == true, warning ?? "")
        XCTAssertNil(FilesystemClass.settleWarning(type: "fuse.sshfs", settle: .seconds(21)))
        XCTAssertNil(FilesystemClass.settleWarning(type: "nfs4", settle: .seconds(5)))
    }

    /// Issue 36: a file its job moved into done/ on sshfs ran again, because the identity of
    /// a file there hashes its path; a rename followed keeps the first path's hash.
    func testARenameFollowedOnAFuseTree_keepsTheIdentityOfTheFirstPath_andOnlyThere() {
        var settings = WatchSettings(name: "share", path: "/srv/in", filter: PathFilter(include: [], exclude: []), catchUp: true,
                                     job: JobSettings(command: .arguments(["/bin/true"])))
        settings.recursive = true
        let rule = WatchRule(settings: settings)
        rule.location.root = Array("/srv/in".utf8)
        rule.polling.trees = PolledTree.trees(root: Array("/srv/in".utf8), recursive: true, method: .auto, mounts: table)
        let status = FileIdentity(device: 40, inode: 1234, size: 5, modifiedNanoseconds: 9, changedNanoseconds: 9, bornNanoseconds: nil, generation: nil)
        let before = rule.polling.identity(of: status, at: Array("share/job".utf8))
        XCTAssertNotEqual(rule.polling.identity(of: status, at: Array("share/done/job".utf8)), before, "the path is what tells files apart there")
        XCTAssertTrue(rule.polling.followMoveOnShare(from: Array("share/job".utf8), to: Array("share/done/job".utf8)))
        XCTAssertEqual(rule.polling.identity(of: status, at: Array("share/done/job".utf8)), before)
        XCTAssertTrue(rule.polling.followMoveOnShare(from: Array("share/done/job".utf8), to: Array("share/done/old/job".utf8)))
        XCTAssertEqual(rule.polling.identity(of: status, at: Array("share/done/old/job".utf8)), before, "a second rename keeps the first path's")
        XCTAssertFalse(rule.polling.followMoveOnShare(from: Array("local".utf8), to: Array("local2".utf8)), "on a local disk the inode is the identity")
    }
}
