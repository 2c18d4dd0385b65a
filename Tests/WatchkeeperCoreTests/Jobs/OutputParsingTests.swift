import XCTest

@testable import WatchkeeperCore

/// How a job's output and progress bytes become lines and updates, whatever the chunking.
final class OutputParsingTests: XCTestCase {
    private struct Line {
        var bytes: [UInt8]
        var continues: Bool
    }

    private func feed(_ splitter: inout LineSplitter, _ bytes: [UInt8], into lines: inout [Line]) {
        bytes.withUnsafeBytes { chunk in
            splitter.feed(chunk) { line, continues in lines.append(Line(bytes: Array(line), continues: continues)) }
        }
    }

    private func split(_ chunks: [String], max: Int = 16_384) -> [Line] {
        var splitter = LineSplitter(maxLineBytes: max)
        var lines: [Line] = []
        for chunk in chunks { feed(&splitter, Array(chunk.utf8), into: &lines) }
        splitter.finish { line, continues in lines.append(Line(bytes: Array(line), continues: continues)) }
        return lines
    }

    private func priority(_ text: String) -> (priority: Int?, message: String) {
        Array(text.utf8).withUnsafeBufferPointer { bytes in
            let (priority, start) = LineSplitter.priorityPrefix(bytes)
            return (priority, String(decoding: bytes[start...], as: UTF8.self))
        }
    }

    func testLines_spanningChunks_areJoined_andCRLFIsStripped() {
        let lines = split(["hel", "lo\r\nwor", "ld\n", "tail"])
        XCTAssertEqual(lines.map { String(decoding: $0.bytes, as: UTF8.self) }, ["hello", "world", "tail"])
        XCTAssertEqual(lines.map(\.continues), [false, false, false])
    }

    /// Most jobs write no line split across reads on a stream, many nothing at all: a
    /// splitter holds no memory until a line spans reads, and then at most its limit.
    func testASplitter_holdsNoBufferUntilALineSpansReads() {
        var splitter = LineSplitter()
        var lines: [Line] = []
        XCTAssertEqual(splitter.reservedBytes, 0)
        feed(&splitter, Array("whole\nlines\n".utf8), into: &lines)
        XCTAssertEqual(splitter.reservedBytes, 0, "whole lines are lent from the read, never copied")
        feed(&splitter, Array("spans".utf8), into: &lines)
        XCTAssertGreaterThan(splitter.reservedBytes, 0)
        XCTAssertLessThanOrEqual(splitter.reservedBytes, 16_384 + 64)
        feed(&splitter, Array(" reads\n".utf8), into: &lines)
        XCTAssertEqual(lines.map { String(decoding: $0.bytes, as: UTF8.self) }, ["whole", "lines", "spans reads"])
    }

    func testALineLongerThanTheLimit_isCutIntoMarkedPieces_andMemoryStaysBounded() {
        var splitter = LineSplitter(maxLineBytes: 10)
        var lines: [Line] = []
        for _ in 0..<1_000 {
            feed(&splitter, Array("xxxxxxx".utf8), into: &lines)
            XCTAssertLessThan(splitter.bufferedBytes, 10)
        }
        feed(&splitter, Array("end\n".utf8), into: &lines)
        XCTAssertEqual(lines.dropLast().count, 700)
        XCTAssertTrue(lines.dropLast().allSatisfy { $0.continues && $0.bytes.count == 10 })
        XCTAssertEqual(String(decoding: lines.last!.bytes, as: UTF8.self), "end")
        XCTAssertFalse(lines.last!.continues)
    }

    func testInvalidUTF8AndEmptyLines_passThroughAsBytes() {
        var splitter = LineSplitter()
        var lines: [Line] = []
        feed(&splitter, [0xff, 0xfe, 0x0a, 0x0a, 0x41, 0x0a], into: &lines)
        XCTAssertEqual(lines.map(\.bytes), [[0xff, 0xfe], [], [0x41]])
    }

    func testPriorityPrefix_isReadOnlyInTheSdDaemonForm() {
        XCTAssertEqual(priority("<3>disk failed").priority, 3)
        XCTAssertEqual(priority("<3>disk failed").message, "disk failed")
        XCTAssertNil(priority("<8>not a level").priority)
        XCTAssertEqual(priority("<8>not a level").message, "<8>not a level")
        XCTAssertNil(priority("<12>no").priority)
        XCTAssertNil(priority("plain").priority)
    }

    private func feed(_ parser: inout ProgressParser, _ text: String) -> Bool {
        Array(text.utf8).withUnsafeBytes { parser.feed($0) }
    }

    func testProgress_keepsTheLatestValueAndStatus_andCountsEveryUpdate() {
        var parser = ProgressParser()
        XCTAssertTrue(feed(&parser, "PROGRESS=10\nSTATUS=one\nPROGRESS=20\nnoise\nSTATUS=two\nPROGRESS=30\n"))
        XCTAssertEqual(parser.progress, 30)
        XCTAssertEqual(parser.status, "two")
        XCTAssertEqual(parser.updates, 6)
        XCTAssertFalse(feed(&parser, "PROGRESS=30\n"), "an unchanged value is not a change")
        XCTAssertEqual(parser.updates, 7)
    }

    func testProgress_linesSplitAcrossReads_areCompletedBeforeParsing() {
        var parser = ProgressParser()
        _ = feed(&parser, "PROGRESS=4")
        XCTAssertNil(parser.progress, "half a line is not an update")
        _ = feed(&parser, "2\nSTATUS=imp")
        XCTAssertEqual(parser.progress, 42)
        _ = feed(&parser, "orting batch 7\r\n")
        XCTAssertEqual(parser.status, "importing batch 7")
        XCTAssertEqual(parser.updates, 2)
    }

    func testProgress_statusAtTheStartOfAChunk_andOnlyInTheFirstLine_isFound() {
        var parser = ProgressParser()
        _ = feed(&parser, "x\n")
        _ = feed(&parser, "STATUS=first line of chunk\nPROGRESS=5\n")
        XCTAssertEqual(parser.status, "first line of chunk")
        XCTAssertEqual(parser.progress, 5)
        _ = feed(&parser, "STATUS=only line\n")
        XCTAssertEqual(parser.status, "only line")
    }

    func testProgress_valuesAreClampedAndJunkIgnored() {
        var parser = ProgressParser()
        _ = feed(&parser, "PROGRESS=250\n")
        XCTAssertEqual(parser.progress, 100)
        _ = feed(&parser, "PROGRESS=-3\n")
        XCTAssertEqual(parser.progress, 0)
        _ = feed(&parser, "PROGRESS=12.5%\n")
        XCTAssertEqual(parser.progress, 12.5)
        _ = feed(&parser, "PROGRESS=lots\n")
        XCTAssertEqual(parser.progress, 12.5)
    }

    func testProgress_aFloodInOneChunk_isCountedExactly() {
        var parser = ProgressParser()
        let flood = (0..<100_000).map { "PROGRESS=\($0 % 100)\n" }.joined() + "STATUS=done\nPROGRESS=77\n"
        _ = feed(&parser, flood)
        XCTAssertEqual(parser.updates, 100_002)
        XCTAssertEqual(parser.progress, 77)
        XCTAssertEqual(parser.status, "done")
    }
}
