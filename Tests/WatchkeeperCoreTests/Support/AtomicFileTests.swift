import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// state.json is written by root into a directory someone else might also write to: no
/// symlink planted at the target or at a temporary name may redirect the write, and a
/// directory another user controls is refused outright.
final class AtomicFileTests: XCTestCase {
    private func contents(_ path: String) throws -> String {
        try String(contentsOfFile: path, encoding: .utf8)
    }

    private func isSymlink(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFLNK
    }

    private func isRegularFile(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
    }

    private func entries(_ directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
    }

    /// A file outside the written directory that a planted symlink points at.
    private func makeVictim() throws -> String {
        let victim = try makeScratchDirectory() + "/victim"
        try "must stay".write(toFile: victim, atomically: false, encoding: .utf8)
        return victim
    }

    // MARK: - Writing

    func testWrite_replacesTheContents_andLeavesNoTemporaryBehind() throws {
        let directory = try makeScratchDirectory()
        try writeFileAtomically(directory + "/state.json", contents: "first\n")
        try writeFileAtomically(directory + "/state.json", contents: "second\n")
        XCTAssertEqual(try contents(directory + "/state.json"), "second\n")
        XCTAssertEqual(try entries(directory), ["state.json"])
    }

    func testWrittenFile_hasTheModeAskedFor_whateverTheUmask() throws {
        let directory = try makeScratchDirectory()
        let previous = umask(0o027)
        defer { umask(previous) }
        try writeFileAtomically(directory + "/watchkeeper.prom", contents: "x 1\n", mode: 0o644)
        var status = stat()
        XCTAssertEqual(stat(directory + "/watchkeeper.prom", &status), 0)
        XCTAssertEqual(status.st_mode & 0o7777, 0o644)
    }

    func testTemporaryNames_areHiddenAndUnpredictable() {
        let names = (0..<64).map { _ in randomTemporaryName("state.json") }
        XCTAssertEqual(Set(names).count, names.count)
        for name in names {
            XCTAssertTrue(name.hasPrefix(".state.json.") && name.hasSuffix(".tmp"), name)
            XCTAssertEqual(name.count, ".state.json.".count + 16 + ".tmp".count, name)
        }
    }

    // MARK: - Planted symlinks

    func testSymlinkPlantedAtTheTarget_isReplacedByARegularFile_notFollowed() throws {
        let directory = try makeScratchDirectory()
        let victim = try makeVictim()
        XCTAssertEqual(symlink(victim, directory + "/state.json"), 0)
        try writeFileAtomically(directory + "/state.json", contents: "dump\n")
        XCTAssertTrue(isRegularFile(directory + "/state.json"))
        XCTAssertEqual(try contents(directory + "/state.json"), "dump\n")
        XCTAssertEqual(try contents(victim), "must stay")
    }

    /// state.json.tmp was the temporary name before it became unpredictable.
    func testSymlinkPlantedAtTheOldPredictableTemporaryName_isNotFollowed() throws {
        let directory = try makeScratchDirectory()
        let victim = try makeVictim()
        XCTAssertEqual(symlink(victim, directory + "/state.json.tmp"), 0)
        try writeFileAtomically(directory + "/state.json", contents: "dump\n")
        XCTAssertEqual(try contents(victim), "must stay")
        XCTAssertTrue(isSymlink(directory + "/state.json.tmp"), "left alone, neither followed nor used")
        XCTAssertEqual(try contents(directory + "/state.json"), "dump\n")
    }

    /// Even a name the attacker guessed right: a symlink there, dangling or not, makes
    /// creation fail, and the write moves on to another name.
    func testSymlinksPlantedAtTheProposedTemporaryNames_areNotFollowed_andAnotherNameIsUsed() throws {
        let directory = try makeScratchDirectory()
        let victim = try makeVictim()
        let dangling = try makeScratchDirectory() + "/created-through-the-link"
        XCTAssertEqual(symlink(dangling, directory + "/.guess-1"), 0)
        XCTAssertEqual(symlink(victim, directory + "/.guess-2"), 0)
        var proposed: [String] = []
        try writeFileAtomically(directory + "/state.json", bytes: Array("dump\n".utf8)) { _ in
            proposed.append(".guess-\(proposed.count + 1)")
            return proposed.last!
        }
        XCTAssertEqual(proposed, [".guess-1", ".guess-2", ".guess-3"])
        XCTAssertEqual(try contents(victim), "must stay")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dangling), "O_CREAT went through a dangling symlink")
        XCTAssertEqual(try contents(directory + "/state.json"), "dump\n")
        XCTAssertEqual(try entries(directory), [".guess-1", ".guess-2", "state.json"])
    }

    // MARK: - Directories the daemon must not trust

    func testDirectoryOwnedByAnotherUid_isRefused() throws {
        try XCTSkipUnless(geteuid() == 0, "chown to another uid needs root")
        let directory = try makeScratchDirectory()
        XCTAssertEqual(chown(directory, 65534, 65534), 0)
        XCTAssertEqual(chmod(directory, 0o777), 0)
        XCTAssertThrowsError(try writeFileAtomically(directory + "/state.json", contents: "dump\n")) { error in
            XCTAssertEqual("\(error)", "unable to write \(directory)/state.json: \(directory) is owned by uid 65534, not uid 0")
            XCTAssertNil((error as? FileWriteError)?.errorNumber)
        }
        XCTAssertEqual(try entries(directory), [])
    }

    func testDirectoryWritableByGroupOrOthersWithoutStickyBit_isRefused_evenWhenOwned() throws {
        let directory = try makeScratchDirectory()
        for mode: mode_t in [0o777, 0o770, 0o757] {
            XCTAssertEqual(chmod(directory, mode), 0)
            XCTAssertThrowsError(try writeFileAtomically(directory + "/state.json", contents: "dump\n")) { error in
                XCTAssertEqual("\(error)", "unable to write \(directory)/state.json: \(directory) is writable by group or others "
                    + "(mode 0\(String(mode, radix: 8))) and has no sticky bit")
            }
        }
        XCTAssertEqual(try entries(directory), [])
    }

    /// Like /tmp: others may add names but not rename or remove ours, and O_EXCL with
    /// O_NOFOLLOW covers the names they add.
    func testOwnDirectoryWithStickyBit_orWritableOnlyByUs_isAccepted() throws {
        let directory = try makeScratchDirectory()
        for mode: mode_t in [0o1777, 0o755, 0o700] {
            XCTAssertEqual(chmod(directory, mode), 0)
            try writeFileAtomically(directory + "/state.json", contents: "mode \(String(mode, radix: 8))\n")
            XCTAssertEqual(try contents(directory + "/state.json"), "mode \(String(mode, radix: 8))\n")
        }
    }

    // MARK: - Failures

    func testFailedRename_removesTheTemporary_andNamesTheCall() throws {
        let directory = try makeScratchDirectory()
        XCTAssertEqual(mkdir(directory + "/state.json", 0o700), 0)
        XCTAssertEqual(mkdir(directory + "/state.json/occupied", 0o700), 0)
        XCTAssertThrowsError(try writeFileAtomically(directory + "/state.json", contents: "dump\n")) { error in
            XCTAssertTrue("\(error)".hasPrefix("unable to write \(directory)/state.json: rename \(directory)/.state.json."), "\(error)")
            XCTAssertNotNil((error as? FileWriteError)?.errorNumber)
        }
        XCTAssertEqual(try entries(directory), ["state.json"])
    }

    func testMissingDirectory_failsNamingIt() throws {
        let directory = try makeScratchDirectory() + "/missing"
        XCTAssertThrowsError(try writeFileAtomically(directory + "/state.json", contents: "dump\n")) { error in
            XCTAssertEqual("\(error)", "unable to write \(directory)/state.json: open \(directory): No such file or directory")
        }
    }
}
