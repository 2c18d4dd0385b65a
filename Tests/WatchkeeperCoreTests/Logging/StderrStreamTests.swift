import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// Job output on the daemon's stderr when that is a pipe nobody reads fast enough: no
/// write blocks the daemon, every line arrives whole with its prefix once the reader
/// catches up, and a reader that stops for good costs a counted drop, not a hang. The
/// pipe is a real one; nothing reads it until the test does.
final class StderrStreamTests: XCTestCase {
    private var readEnd: Int32 = -1
    private var writeEnd: Int32 = -1

    override func setUpWithError() throws {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        (readEnd, writeEnd) = (fds[0], fds[1])
    }

    override func tearDown() {
        close(readEnd)
        close(writeEnd)
    }

    private func writer(_ stream: StderrStream, pid: pid_t = 42) -> JobOutputWriter {
        let sink = LogSink(target: .stderr, level: .info, problemCapacity: 4, stderrStream: stream)
        return JobOutputWriter(sink: sink, name: "flood", kind: .task, runID: "r1", pid: pid, stream: "stdout")
    }

    private func feed(_ writer: JobOutputWriter, _ line: [UInt8], continues: Bool = false) {
        writer.beginRead()
        line.withUnsafeBufferPointer { writer.line($0, continues: continues) }
    }

    /// Everything in the pipe now, without waiting.
    private func drain() -> [UInt8] {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            var poller = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 0) == 1 else { return all }
            let count = read(readEnd, &buffer, buffer.count)
            guard count > 0 else { return all }
            all += buffer[0..<count]
        }
    }

    private func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast()
    }

    func testAPipeGetsADescriptionOfItsOwnThatIsNonBlocking() {
        let stream = StderrStream(fd: writeEnd)
        guard stream.mode == .nonBlocking else { return XCTFail("a pipe is written \(stream.mode)") }
        let own = stream.fd
        XCTAssertNotEqual(own, writeEnd)
        XCTAssertEqual(fcntl(writeEnd, F_GETFL) & O_NONBLOCK, 0, "the shared description must stay as it was")
        XCTAssertNotEqual(fcntl(own, F_GETFL) & O_NONBLOCK, 0)
    }

    func testARegularFileIsWrittenDirectly() throws {
        let file = try makeScratchDirectory() + "/stderr.log"
        let fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(fd) }
        XCTAssertEqual(StderrStream(fd: fd).mode, .direct)
    }

    func testAFullPipeMakesTheWriterWaitInsteadOfBlocking() {
        let writer = writer(StderrStream(fd: writeEnd))
        let line = [UInt8](repeating: UInt8(ascii: "a"), count: 100)
        var fed = 0
        // 64 KiB of pipe: well before 10,000 lines of ~150 bytes the reader is behind.
        while fed < 10_000 {
            feed(writer, line)
            fed += 1
            if !writer.flush() { break }
        }
        XCTAssertLessThan(fed, 10_000, "the writer never noticed the reader was behind")
        XCTAssertFalse(writer.flush(), "still behind while nobody reads")

        var received = drain()
        let deadline = MonotonicInstant.now + .seconds(10)
        while !writer.flush() && MonotonicInstant.now < deadline { received += drain() }
        received += drain()
        let got = lines(received)
        XCTAssertEqual(got.count, fed, "every line arrives once the reader catches up")
        for text in got {
            XCTAssertTrue(text.starts(with: Array("20".utf8)), "a line without its time stamp: \(String(decoding: text.prefix(60), as: UTF8.self))")
            XCTAssertNotNil(String(decoding: text, as: UTF8.self).range(of: " flood[42] stdout: " + String(repeating: "a", count: 100)))
        }
    }

    func testEachWriteToAPipeEndsAtALineEndWithinPipeBuf() {
        var text: [UInt8] = []
        for index in 0..<200 { text += Array("line \(index) \(String(repeating: "x", count: index))\n".utf8) }
        var offset = 0
        text.withUnsafeBufferPointer { all in
            while offset < all.count {
                let length = StderrStream.wholeLines(all.baseAddress! + offset, count: all.count - offset)
                XCTAssertLessThanOrEqual(length, Int(PIPE_BUF))
                XCTAssertEqual(all[offset + length - 1], UInt8(ascii: "\n"))
                offset += length
            }
        }
    }

    func testALineLongerThanPipeBufIsCutIntoPiecesThatFitWithoutSplittingACharacter() {
        let writer = writer(StderrStream(fd: writeEnd))
        // 3-byte characters and control bytes (escaped to 4 bytes each) in a 12,000-byte line.
        var line: [UInt8] = []
        while line.count < 12_000 { line += Array("€€€\u{1}".utf8) }
        feed(writer, line)
        XCTAssertTrue(writer.flush())
        let got = lines(drain())
        XCTAssertGreaterThan(got.count, 2)
        var joined = ""
        for (index, piece) in got.enumerated() {
            XCTAssertLessThanOrEqual(piece.count + 1, Int(PIPE_BUF), "piece \(index) does not fit PIPE_BUF")
            let text = String(decoding: piece, as: UTF8.self)
            XCTAssertFalse(text.contains("\u{FFFD}"), "piece \(index) splits a character")
            let body = text.components(separatedBy: " flood[42] stdout: ")[1]
            // No escape cut in two: with every whole \xNN taken out, no backslash is left.
            XCTAssertFalse(body.replacingOccurrences(of: #"\\x[0-9a-f]{2}"#, with: "", options: .regularExpression).contains("\\"),
                           "piece \(index) cuts an escape: …\(body.suffix(8))")
            if index < got.count - 1 {
                XCTAssertTrue(body.hasSuffix(" […]"), "piece \(index) does not say it goes on")
                joined += String(body.dropLast(4))
            } else {
                XCTAssertFalse(body.hasSuffix(" […]"))
                joined += body
            }
        }
        XCTAssertEqual(joined, String(decoding: line, as: UTF8.self).replacingOccurrences(of: "\u{1}", with: "\\x01"))
    }

    /// Control bytes escape to four bytes each: whatever the offset, a cut never falls inside one.
    func testALongLineOfControlBytes_isNeverCutInsideAnEscape() {
        for lead in 0..<4 {
            let writer = writer(StderrStream(fd: writeEnd))
            feed(writer, [UInt8](repeating: UInt8(ascii: "a"), count: lead) + [UInt8](repeating: 1, count: 3_000))
            XCTAssertTrue(writer.flush())
            var joined = ""
            for piece in lines(drain()) {
                var body = String(decoding: piece, as: UTF8.self).components(separatedBy: " flood[42] stdout: ")[1]
                if body.hasSuffix(" […]") { body = String(body.dropLast(4)) }
                XCTAssertTrue(body.replacingOccurrences(of: "a", with: "").replacingOccurrences(of: #"\x01"#, with: "").isEmpty,
                              "lead \(lead): a piece cuts an escape: …\(body.suffix(8))")
                joined += body
            }
            XCTAssertEqual(joined, String(repeating: "a", count: lead) + String(repeating: #"\x01"#, count: 3_000))
        }
    }

    func testLastLinesAreDroppedAndCountedWhenTheReaderTakesNothing() {
        let writer = writer(StderrStream(fd: writeEnd))
        let line = [UInt8](repeating: UInt8(ascii: "b"), count: 1_000)
        while writer.flush() { feed(writer, line) }
        writer.dropUnwritten()
        XCTAssertGreaterThan(writer.droppedBytes, 0)
        XCTAssertTrue(writer.flush(), "nothing is left waiting once dropped")
        // What did go out is whole lines only.
        for text in lines(drain()) { XCTAssertEqual(Array(text.suffix(line.count)), line) }
    }
}
