import CWatchkeeperSystemd
import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's own entries and a job's direct output, in journald's protocols as
/// libsystemd's sd_journal_sendv and sd_journal_stream_fd speak them, received by real
/// sockets bound where journald's would be.
final class JournalNativeProtocolTests: XCTestCase {
    /// One datagram from a bound socket, with the descriptor it carried (-1 for none).
    private func receive(on fd: Int32, capacity: Int = 65_536) -> (bytes: [UInt8], passed: Int32) {
        var buffer = [UInt8](repeating: 0, count: capacity)
        var control = [UInt8](repeating: 0, count: 64)
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 10_000) == 1 else { return ([], -1) }
        return buffer.withUnsafeMutableBytes { data in
            control.withUnsafeMutableBytes { space in
                var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                    var message = msghdr(msg_name: nil, msg_namelen: 0, msg_iov: vectorPointer, msg_iovlen: 1,
                                         msg_control: space.baseAddress, msg_controllen: space.count, msg_flags: 0)
                    let count = recvmsg(fd, &message, 0)
                    guard count >= 0 else { return ([], -1) }
                    var passed: Int32 = -1
                    if message.msg_controllen >= MemoryLayout<cmsghdr>.size {
                        let header = space.load(as: cmsghdr.self)
                        if header.cmsg_level == SOL_SOCKET && header.cmsg_type == Int32(SCM_RIGHTS) {
                            passed = space.load(fromByteOffset: (MemoryLayout<cmsghdr>.size + 7) & ~7, as: Int32.self)
                        }
                    }
                    return (Array(data.prefix(count)), passed)
                }
            }
        }
    }

    private func boundSocket(_ path: String, type: Int32 = Int32(SOCK_DGRAM.rawValue)) throws -> Int32 {
        let fd = socket(AF_UNIX, type | Int32(SOCK_CLOEXEC.rawValue), 0)
        try socketCall(fd, path: path, connecting: false)
        return fd
    }

    func testAnEntry_isOneDatagram_withAValueHoldingANewlineInItsBinaryForm() throws {
        let path = try makeScratchDirectory() + "/socket"
        let fd = try boundSocket(path)
        defer { close(fd) }
        XCTAssertEqual(Journal.send([("MESSAGE", "two\nlines"), ("PRIORITY", "6"), ("SYSLOG_IDENTIFIER", "watchkeeper")], path: path), 0)
        let expected = Array("MESSAGE\n".utf8) + [9, 0, 0, 0, 0, 0, 0, 0] + Array("two\nlines\nPRIORITY=6\nSYSLOG_IDENTIFIER=watchkeeper\n".utf8)
        XCTAssertEqual(receive(on: fd).bytes, expected)
    }

    func testAnEntryTooBigForADatagram_goesAsASealedMemfdHoldingIt() throws {
        let path = try makeScratchDirectory() + "/socket"
        let fd = try boundSocket(path)
        defer { close(fd) }
        // Over the 8 MiB send buffer (16 MiB as the kernel counts it) the sender asks for.
        let value = String(repeating: "0123456789abcdef", count: 1_100_000)
        XCTAssertEqual(Journal.send([("WATCHKEEPER_DUMP_JSON", value), ("SYSLOG_IDENTIFIER", "watchkeeper")], path: path), 0)
        let (bytes, passed) = receive(on: fd)
        XCTAssertEqual(bytes.count, 0, "no data beside the descriptor")
        XCTAssertGreaterThanOrEqual(passed, 0, "a descriptor passed")
        defer { close(passed) }
        XCTAssertEqual(fcntl(passed, 1034 /* F_GET_SEALS */), 15, "sealed against writes, growing, shrinking and new seals")
        var contents = [UInt8](repeating: 0, count: value.utf8.count + 100)
        let count = pread(passed, &contents, contents.count, 0)
        XCTAssertEqual(Array(contents.prefix(max(count, 0))), Array("WATCHKEEPER_DUMP_JSON=\(value)\nSYSLOG_IDENTIFIER=watchkeeper\n".utf8))
    }

    func testWithNoJournalThere_anEntryIsDroppedQuietly_butAJournalThatIsGoneIsAnError() throws {
        let directory = try makeScratchDirectory()
        XCTAssertEqual(Journal.send([("MESSAGE", "x")], path: directory + "/nothing-here"), 0, "no socket: as libsystemd, not an error")
        // A socket file nobody has open: journald died; the caller shows the entry on stderr.
        close(try boundSocket(directory + "/stale"))
        XCTAssertEqual(Journal.send([("MESSAGE", "x")], path: directory + "/stale"), -ECONNREFUSED)
    }

    func testAFieldWithoutAName_orWithANewlineInItsName_isRefused() throws {
        let path = try makeScratchDirectory() + "/socket"
        let fd = try boundSocket(path)
        defer { close(fd) }
        XCTAssertEqual(Journal.send([("", "x")], path: path), -EINVAL)
        XCTAssertEqual(Journal.send([("BAD\nNAME", "x")], path: path), -EINVAL)
    }

    func testAStream_sendsItsHeader_thenTheJobsLines() throws {
        let path = try makeScratchDirectory() + "/stdout"
        let listener = try boundSocket(path, type: Int32(SOCK_STREAM.rawValue))
        defer { close(listener) }
        XCTAssertEqual(listen(listener, 1), 0)
        let stream = wk_journal_stream_fd(path, "nightly-report", LOG_INFO, 1)
        XCTAssertGreaterThanOrEqual(stream, 0)
        XCTAssertEqual(write(stream, "<3>line\n", 8), 8)
        close(stream)
        let peer = accept(listener, nil, nil)
        defer { close(peer) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while case let count = read(peer, &buffer, buffer.count), count > 0 { received += buffer.prefix(count) }
        // Identifier, no unit, priority 6, level prefixes read, nothing forwarded.
        XCTAssertEqual(String(decoding: received, as: UTF8.self), "nightly-report\n\n6\n1\n0\n0\n0\n<3>line\n")
        XCTAssertEqual(wk_journal_stream_fd(path + "-missing", "x", LOG_INFO, 1), -ENOENT)
    }
}
