import Foundation
import SystemPackage
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The other watchkeeper is a real second process: util-linux's flock(1) holding the lock
/// file while a shell writes its pid, told when to let go through its stdin.
final class StateDirectoryLockTests: ScratchDirectoryTestCase {
    private var lockPath: String { directory + "/" + StateDirectoryLock.fileName }

    /// A process holding the lock until its stdin closes. `script` runs under the lock with
    /// the lock file's path in $1; its first line on stdout means "locked".
    private final class Holder {
        let process = Process()
        private let input = Pipe()
        private let output = Pipe()
        let firstLine: String

        init(lockPath: String, script: String) throws {
            let flock = "/usr/bin/flock"
            try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: flock), "\(flock) is not installed (Debian package util-linux)")
            process.executableURL = URL(fileURLWithPath: flock)
            process.arguments = ["--nonblock", lockPath, "/bin/sh", "-c", script, "holder", lockPath]
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            var bytes: [UInt8] = []
            while let byte = try output.fileHandleForReading.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") {
                bytes.append(byte)
            }
            firstLine = String(decoding: bytes, as: UTF8.self)
        }

        /// Ends the holder and waits for it: its lock is gone when this returns.
        func finish() {
            do {
                try input.fileHandleForWriting.close()
            } catch {
                XCTFail("unable to close the holder's stdin: \(error)")
                process.terminate()
            }
            process.waitUntilExit()
        }
    }

    func testLock_inAnEmptyDirectory_createsTheFileWithMode0600_andWritesOurPid() throws {
        let lock = try StateDirectoryLock(stateDirectory: directory)
        defer { lock.release() }
        var info = stat()
        XCTAssertEqual(stat(lockPath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        XCTAssertEqual(try String(contentsOfFile: lockPath, encoding: .utf8), "\(getpid())\n")
        XCTAssertTrue(lock.isHeld)
    }

    func testLock_heldByAnotherProcess_failsNamingThePidItWrote_andSucceedsOnceItExits() throws {
        // The shell writes its own pid, as a daemon would; `exec cat` keeps that pid until
        // stdin closes.
        let holder = try Holder(lockPath: lockPath, script: "echo $$ > \"$1\"; echo $$; exec cat")
        XCTAssertThrowsError(try StateDirectoryLock(stateDirectory: directory)) { error in
            XCTAssertEqual("\(error)", "unable to lock \(self.directory): another watchkeeper (pid \(holder.firstLine)) is using this state directory")
            XCTAssertEqual((error as? StateDirectoryLockError)?.holder, pid_t(holder.firstLine))
            XCTAssertEqual((error as? StateDirectoryLockError)?.errorNumber, .wouldBlock)
        }
        holder.finish()
        let lock = try StateDirectoryLock(stateDirectory: directory)
        defer { lock.release() }
        XCTAssertEqual(try String(contentsOfFile: lockPath, encoding: .utf8), "\(getpid())\n", "our pid replaced the old one")
    }

    func testLock_heldByAProcessThatWroteNoPid_saysThePidIsUnknown() throws {
        let holder = try Holder(lockPath: lockPath, script: ": > \"$1\"; echo locked; exec cat")
        defer { holder.finish() }
        XCTAssertEqual(holder.firstLine, "locked")
        XCTAssertThrowsError(try StateDirectoryLock(stateDirectory: directory)) { error in
            XCTAssertEqual("\(error)", "unable to lock \(self.directory): another process (its pid is not in \(self.lockPath) yet) is using this state directory")
            XCTAssertNil((error as? StateDirectoryLockError)?.holder)
        }
    }

    func testLock_twiceInOneProcess_failsTheSecondTime_untilTheFirstIsReleased() throws {
        let first = try StateDirectoryLock(stateDirectory: directory)
        XCTAssertThrowsError(try StateDirectoryLock(stateDirectory: directory)) { error in
            XCTAssertEqual((error as? StateDirectoryLockError)?.holder, getpid())
        }
        first.release()
        first.release()
        XCTAssertFalse(first.isHeld)
        let second = try StateDirectoryLock(stateDirectory: directory)
        second.release()
    }

    func testLock_descriptorIsCloseOnExec_soJobsDoNotInheritTheLock() throws {
        let lock = try StateDirectoryLock(stateDirectory: directory)
        defer { lock.release() }
        XCTAssertNotEqual(fcntl(lock.descriptor, F_GETFD) & FD_CLOEXEC, 0)
    }

    func testLock_throughASymbolicLink_isRefused_andTheTargetIsNotCreated() throws {
        let target = directory + "/elsewhere"
        XCTAssertEqual(symlink(target, lockPath), 0)
        XCTAssertThrowsError(try StateDirectoryLock(stateDirectory: directory)) { error in
            XCTAssertEqual("\(error)", "unable to lock \(self.directory): open \(self.lockPath): Too many levels of symbolic links")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target))
    }

    func testLock_inAMissingDirectory_failsSayingSo() throws {
        let missing = directory + "/missing"
        XCTAssertThrowsError(try StateDirectoryLock(stateDirectory: missing)) { error in
            XCTAssertEqual("\(error)", "unable to lock \(missing): open \(missing)/watchkeeper.lock: No such file or directory")
        }
    }
}
