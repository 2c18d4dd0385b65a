import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// What `ConfigLoader.load` says when the path does not lead to a readable regular file:
/// one unpositioned diagnostic, "unable to read the configuration: <reason>", as for a
/// missing file, and never a wait.
final class ConfigFileReadingTests: ScratchDirectoryTestCase {
    /// The single whole-file message `load` gives for `path`.
    private func readFailure(_ path: String, file: StaticString = #filePath, line: UInt = #line) -> String? {
        switch ConfigLoader.load(path: path, environment: [:]) {
        case .success:
            XCTFail("\(path) must not load", file: file, line: line)
            return nil
        case .failure(let errors):
            XCTAssertEqual(errors.diagnostics.count, 1, "\(errors)", file: file, line: line)
            XCTAssertNil(errors.diagnostics.first?.position, file: file, line: line)
            XCTAssertEqual(errors.diagnostics.first?.file, path, file: file, line: line)
            return errors.diagnostics.first?.message
        }
    }

    func testLoad_fifo_isRefusedAtOnceInsteadOfWaitingForAWriter() throws {
        // Before the configuration was opened with O_NONBLOCK after a stat, this test
        // did not fail: it blocked in open(2) for ever, as check-config did.
        let fifo = directory + "/watchkeeper.toml"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0, String(cString: strerror(errno)))
        XCTAssertEqual(readFailure(fifo), "unable to read the configuration: Is a FIFO (named pipe), not a regular file")
    }

    func testLoad_characterDevice_isRefusedInsteadOfReadAsAnEmptyFile() {
        XCTAssertEqual(readFailure("/dev/null"), "unable to read the configuration: Is a character device, not a regular file")
    }

    func testLoad_unixSocket_isRefusedAsNotARegularFile() throws {
        let path = directory + "/socket.toml"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            precondition(bytes.count < raw.count, "socket path too long for sun_path")
            raw.copyBytes(from: bytes)
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(bound, 0, String(cString: strerror(errno)))
        XCTAssertEqual(readFailure(path), "unable to read the configuration: Is a socket, not a regular file")
    }

    func testLoad_directory_keepsTheOSWording() {
        XCTAssertEqual(readFailure(directory), "unable to read the configuration: Is a directory")
    }

    func testLoad_symbolicLinkLoop_saysItLooksLikeALoop() throws {
        let first = directory + "/a.toml"
        let second = directory + "/b.toml"
        try FileManager.default.createSymbolicLink(atPath: first, withDestinationPath: second)
        try FileManager.default.createSymbolicLink(atPath: second, withDestinationPath: first)
        XCTAssertEqual(readFailure(first), "unable to read the configuration: Too many levels of symbolic links (a symbolic link loop?)")
    }

    func testLoad_fileWithoutReadPermission_saysPermissionDenied() throws {
        try XCTSkipIf(geteuid() == 0, "root reads files whatever their mode")
        let path = directory + "/secret.toml"
        try "[daemon]\n".write(toFile: path, atomically: false, encoding: .utf8)
        XCTAssertEqual(chmod(path, 0), 0)
        XCTAssertEqual(readFailure(path), "unable to read the configuration: Permission denied")
    }

    func testLoad_emptyPath_saysThePathIsEmpty() {
        XCTAssertEqual(readFailure(""), "unable to read the configuration: the path is empty")
    }

    func testArgumentPathProblem_emptyArgument_isAnError_notTheDefaultPath() {
        XCTAssertEqual(ConfigLoader.argumentPathProblem(""), "the path is empty")
        XCTAssertNil(ConfigLoader.argumentPathProblem(nil))
        XCTAssertNil(ConfigLoader.argumentPathProblem("/etc/watchkeeper/watchkeeper.toml"))
    }

    func testLoad_fileOver16MiB_isRefusedBeforeReadingIt() throws {
        let path = directory + "/huge.toml"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        // Sparse: no 16 MiB is written, and the size check comes before any read.
        XCTAssertEqual(truncate(path, off_t(ConfigFileReader.sizeLimit + 1)), 0)
        XCTAssertEqual(readFailure(path), "unable to read the configuration: file is larger than 16 MiB")
    }

    func testRead_fileOfExactly16MiB_isReadToTheEnd() throws {
        let path = directory + "/large.toml"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        XCTAssertEqual(truncate(path, off_t(ConfigFileReader.sizeLimit)), 0)
        XCTAssertEqual(try ConfigFileReader.read(path).get().count, ConfigFileReader.sizeLimit)
    }
}
