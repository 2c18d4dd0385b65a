import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// What tells a file from one that only looks like it (issue 22): a reused inode number
/// with a preserved mtime and size is another file; a file renamed is the same one.
final class FileIdentityTests: ScratchDirectoryTestCase {
    private func identity(generation: UInt64? = nil, born: Int64? = nil, changed: Int64? = 30, size: Int64 = 7, modified: Int64 = 20) -> FileIdentity {
        FileIdentity(device: 1, inode: 2, size: size, modifiedNanoseconds: modified, changedNanoseconds: changed,
                     bornNanoseconds: born, generation: generation)
    }

    func testSameFile_aReusedInodeWithThePreservedMtimeAndSize_isAnotherFile_byGenerationBirthOrChangeTime() {
        XCTAssertFalse(identity(generation: 1).sameFile(as: identity(generation: 2)))
        XCTAssertFalse(identity(born: 1).sameFile(as: identity(born: 2)))
        XCTAssertFalse(identity(changed: 1).sameFile(as: identity(changed: 2)), "without generation or birth time, the change time decides")
    }

    func testSameFile_comparesTheChangeTime_evenWhereTheIncarnationIsKnown() {
        // `cp -p` over a handled file while the daemon is down: same inode, generation, birth
        // time, size and mtime; only the change time tells.
        XCTAssertFalse(identity(generation: 1, born: 5, changed: 1).sameFile(as: identity(generation: 1, born: 5, changed: 2)))
        XCTAssertTrue(identity(generation: 1, born: 5, changed: 1).sameFile(as: identity(generation: 1, born: 5, changed: 1)))
        XCTAssertFalse(identity(generation: 1, size: 7).sameFile(as: identity(generation: 1, size: 8)), "new content")
        XCTAssertFalse(identity(generation: 1, modified: 1).sameFile(as: identity(generation: 1, modified: 2)), "new content")
    }

    func testRenamed_isTheSameIncarnationSizeAndMtime_whateverTheChangeTime() {
        XCTAssertTrue(identity(generation: 1, changed: 1).renamed(as: identity(generation: 1, changed: 2)))
        XCTAssertTrue(identity(born: 5, changed: 1).renamed(as: identity(born: 5, changed: 2)))
        XCTAssertFalse(identity(generation: 1).renamed(as: identity(generation: 2)), "a reused inode")
        XCTAssertFalse(identity(generation: 1, modified: 1).renamed(as: identity(generation: 1, modified: 2)), "a rename keeps the mtime")
        XCTAssertFalse(identity(changed: 1).renamed(as: identity(changed: 2)), "without the incarnation a reused inode looks the same")
        XCTAssertTrue(identity(changed: 1).renamed(as: identity(changed: 1)))
    }

    func testAttributesChanged_isTheSameIncarnationAndSize_theMtimeMayHaveBeenSet() {
        XCTAssertTrue(identity(generation: 1, changed: 1, modified: 10).attributesChanged(as: identity(generation: 1, changed: 2, modified: 99)))
        XCTAssertFalse(identity(generation: 1, size: 7).attributesChanged(as: identity(generation: 1, size: 8)), "a write")
        XCTAssertFalse(identity(born: 1).attributesChanged(as: identity(born: 2)), "a reused inode")
        XCTAssertFalse(identity(changed: 1).attributesChanged(as: identity(changed: 2)), "nothing tells a reused inode")
    }

    func testSameFile_aLedgerRowFromBeforeTheChangeTime_comparesAsItWasWritten() {
        let legacy = FileIdentity(device: 1, inode: 2, size: 7, modifiedNanoseconds: 20)
        XCTAssertTrue(legacy.sameFile(as: identity(generation: 9, born: 9, changed: 9)))
        XCTAssertFalse(legacy.sameFile(as: identity(size: 8)))
    }

    func testSameInode_isWhatTheStartCheckAsks_contentMayHaveGrown() {
        XCTAssertTrue(identity(born: 5, size: 7).sameInode(as: identity(born: 5, size: 900)))
        XCTAssertFalse(identity(born: 5).sameInode(as: identity(born: 6)))
        XCTAssertTrue(identity(generation: 3).sameInode(as: identity(born: 4)), "nothing to compare: the inode number decides")
    }

    func testFileStatus_ofARealFile_matchesStat_andTellsAReusedInodeApart() throws {
        let path = directory + "/file"
        FileManager.default.createFile(atPath: path, contents: Data("abc".utf8))
        let first = try XCTUnwrap(FileStatus.of(Array(path.utf8), followSymlinks: false))
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        XCTAssertEqual(first.identity.device, UInt64(info.st_dev))
        XCTAssertEqual(first.identity.inode, UInt64(info.st_ino))
        XCTAssertEqual(first.identity.size, 3)
        XCTAssertEqual(first.type, .regular)
        XCTAssertEqual(first.links, 1)
        XCTAssertEqual(first.identity.changedNanoseconds, Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))
        // Replaced by a file of the same size and mtime, in the same inode where it is reused.
        XCTAssertEqual(unlink(path), 0)
        FileManager.default.createFile(atPath: path, contents: Data("xyz".utf8))
        var times = [timespec(tv_sec: Int(first.identity.modifiedNanoseconds / 1_000_000_000), tv_nsec: Int(first.identity.modifiedNanoseconds % 1_000_000_000))]
        times.append(times[0])
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)
        let second = try XCTUnwrap(FileStatus.of(Array(path.utf8), followSymlinks: false))
        XCTAssertEqual(second.identity.modifiedNanoseconds, first.identity.modifiedNanoseconds)
        XCTAssertFalse(second.identity.sameFile(as: first.identity), "\(first.identity) vs \(second.identity)")
        // Renamed: the same file in a new form (its change time moved), where the incarnation
        // is known.
        XCTAssertEqual(rename(path, path + ".moved"), 0)
        let moved = try XCTUnwrap(FileStatus.of(Array((path + ".moved").utf8), followSymlinks: false))
        if moved.identity.generation != nil || moved.identity.bornNanoseconds != nil {
            XCTAssertTrue(second.identity.renamed(as: moved.identity), "\(second.identity) vs \(moved.identity)")
        }
        XCTAssertNil(FileStatus.of(Array(path.utf8), followSymlinks: false))
    }

    func testFileStatus_aSymbolicLink_isALink_unlessFollowed() throws {
        let target = directory + "/target"
        FileManager.default.createFile(atPath: target, contents: Data("t".utf8))
        XCTAssertEqual(symlink(target, directory + "/link"), 0)
        XCTAssertEqual(FileStatus.of(Array((directory + "/link").utf8), followSymlinks: false)?.type, .symlink)
        XCTAssertEqual(FileStatus.of(Array((directory + "/link").utf8), followSymlinks: true)?.type, .regular)
    }
}
