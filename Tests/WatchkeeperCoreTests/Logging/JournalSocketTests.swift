import Dispatch
import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// Job output's way to journald: entries in the native protocol, many per syscall, each
/// one datagram, over a socket that survives journald restarting. The receiver is a real
/// datagram socket bound where journald's would be.
final class JournalSocketTests: XCTestCase {
    /// A bound datagram socket that collects what arrives, on its own thread.
    private final class Receiver: @unchecked Sendable {
        let fd: Int32
        private let lock = NSLock()
        private var received: [[UInt8]] = []
        private let finished = DispatchSemaphore(value: 0)

        init(path: String, reading: Bool = true) throws {
            unlink(path)
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            try socketCall(fd, path: path, connecting: false)
            if reading { startReading() }
        }

        /// A journald that was stalled catches up.
        func startReading() {
            DispatchQueue.global().async { [self] in
                defer { finished.signal() }
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = recv(fd, &buffer, buffer.count, 0)
                    // 0 after shutdown.
                    guard count > 0 else { return }
                    lock.lock()
                    received.append(Array(buffer[0..<count]))
                    lock.unlock()
                }
            }
        }

        var datagrams: [[UInt8]] {
            lock.lock()
            defer { lock.unlock() }
            return received
        }

        func stop() {
            // The reader stops before the fd closes, so it never reads a reused fd number.
            shutdown(fd, Int32(SHUT_RDWR))
            finished.wait()
            close(fd)
        }
    }

    private func batch(_ messages: [String]) -> JournalBatch {
        var batch = JournalBatch()
        let shared = JournalBatch.encode([("SYSLOG_IDENTIFIER", Array("job".utf8))])
        for message in messages {
            batch.beginEntry()
            batch.append(shared)
            Array(message.utf8).withUnsafeBufferPointer { batch.appendField(prefix: Array("MESSAGE=".utf8), value: $0) }
            batch.endEntry()
        }
        return batch
    }

    /// What the output channel does: send, and while journald is behind, wait and go on.
    private func sendAll(_ socket: JournalSocket, _ entries: JournalBatch, from start: Int = 0) -> Int {
        var sent = start
        let deadline = MonotonicInstant.now + .seconds(10)
        while sent < entries.count, MonotonicInstant.now < deadline {
            let result = socket.send(entries, from: sent)
            sent = result.sent
            guard result.behind else { break }
            // The channel retries on a timer; a short pause stands in for it.
            usleep(2_000)
        }
        return sent
    }

    func testEncode_writesPlainValuesAsLines_andValuesWithNewlinesWithTheirLength() {
        let encoded = JournalBatch.encode([("A", Array("one".utf8)), ("B", Array("two\nlines".utf8))])
        let expected = Array("A=one\nB\n".utf8) + [9, 0, 0, 0, 0, 0, 0, 0] + Array("two\nlines\n".utf8)
        XCTAssertEqual(encoded, expected)
    }

    func testEveryEntry_arrivesAsOneDatagram_acrossSeveralSendCalls() throws {
        let directory = try makeScratchDirectory()
        let receiver = try Receiver(path: directory + "/socket")
        defer { receiver.stop() }
        let socket = JournalSocket(path: directory + "/socket")
        // 200 entries: more than one sendmmsg call takes (64).
        let messages = (0..<200).map { "line \($0)" }
        XCTAssertEqual(sendAll(socket, batch(messages)), 200)
        XCTAssertTrue(waitFor(10) { receiver.datagrams.count == 200 }, "200 datagrams")
        XCTAssertEqual(receiver.datagrams.map { String(decoding: $0, as: UTF8.self) },
                       messages.map { "SYSLOG_IDENTIFIER=job\nMESSAGE=\($0)\n" })
    }

    func testARestartedJournal_isReconnected_andNothingIsLost() throws {
        let directory = try makeScratchDirectory()
        let path = directory + "/socket"
        let first = try Receiver(path: path)
        let socket = JournalSocket(path: path)
        XCTAssertEqual(sendAll(socket, batch(["before"])), 1)
        XCTAssertTrue(waitFor(10) { first.datagrams.count == 1 }, "the first entry")
        // journald restarting: its socket closes and a new one is bound at the same path.
        first.stop()
        let second = try Receiver(path: path)
        defer { second.stop() }
        XCTAssertEqual(sendAll(socket, batch(["after", "and more"])), 2)
        XCTAssertTrue(waitFor(10) { second.datagrams.count == 2 }, "the entries after the restart")
    }

    func testAStalledJournal_doesNotBlockTheSender_andTheRestGoesOutOnceItReads() throws {
        let directory = try makeScratchDirectory()
        let receiver = try Receiver(path: directory + "/socket", reading: false)
        defer { receiver.stop() }
        let socket = JournalSocket(path: directory + "/socket")
        let messages = (0..<5_000).map { "line \($0)" }
        let entries = batch(messages)
        let first = socket.send(entries)
        XCTAssertTrue(first.behind, "5,000 entries cannot all fit in a queue nobody reads")
        XCTAssertLessThan(first.sent, 5_000)
        receiver.startReading()
        XCTAssertEqual(sendAll(socket, entries, from: first.sent), 5_000)
        XCTAssertTrue(waitFor(10) { receiver.datagrams.count == 5_000 }, "received \(receiver.datagrams.count)")
        XCTAssertEqual(Set(receiver.datagrams.map { $0 }).count, 5_000, "each entry once")
        XCTAssertEqual(receiver.datagrams.last.map { String(decoding: $0, as: UTF8.self) }, "SYSLOG_IDENTIFIER=job\nMESSAGE=line 4999\n")
    }

    func testWithNoJournalListening_nothingCountsAsSent() throws {
        let directory = try makeScratchDirectory()
        let socket = JournalSocket(path: directory + "/nothing-here")
        let result = socket.send(batch(["lost?"]))
        XCTAssertEqual(result.sent, 0)
        XCTAssertFalse(result.behind, "nothing to wait for: the caller shows unsent lines on stderr")
    }
}
