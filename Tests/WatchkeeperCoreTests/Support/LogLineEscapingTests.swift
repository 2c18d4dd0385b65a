import Logging
import XCTest

@testable import WatchkeeperCore

/// A file name, a job name or a job's output reaches the log. On stderr one log call must
/// stay exactly one line whatever those hold; in the journal the fields keep their bytes.
final class LogLineEscapingTests: XCTestCase {
    private let time = WallTime(secondsSinceEpoch: 1_795_000_000, nanoseconds: 123_000_000)

    // MARK: - The stderr line

    func testStderrLine_withNewlinesAndEscapesInMessageAndMetadata_isOneLineWithEscapes() {
        let line = LogSink.line(
            time: time, level: .warning,
            message: "unable to move report\nFAKE: line",
            metadata: ["path": "/srv/in/a\nFAKE: line", "colour": "\u{1b}[31mred", "job": ["name": "x\ty"]]
        )
        XCTAssertEqual(line, "\(time.iso8601) warning: unable to move report\\nFAKE: line "
            + #"(colour="\x1b[31mred", job_name="x\ty", path="/srv/in/a\nFAKE: line")"# + "\n")
        XCTAssertEqual(line.utf8.filter { $0 == UInt8(ascii: "\n") }.count, 1, "one call, one line")
        XCTAssertFalse(line.utf8.contains(0x1B), "no raw ESC reaches the terminal")
    }

    func testStderrLine_ofPlainText_isUnchanged() {
        let line = LogSink.line(time: time, level: .info, message: "started 3 rules", metadata: ["rule": "incoming"])
        XCTAssertEqual(line, "\(time.iso8601) info: started 3 rules (rule=incoming)\n")
    }

    func testStderrLine_metadataKeysAreEscapedToo() {
        let line = LogSink.line(time: time, level: .info, message: "m", metadata: ["a\nb": "v"])
        XCTAssertEqual(line, "\(time.iso8601) info: m (\"a\\nb\"=v)\n")
    }

    // MARK: - The metadata suffix

    /// How a reader splits ` (k=v, k="v", ...)` at the end of `line` after `prefix`: a bare
    /// word, or a double-quoted string in which a backslash escapes the next character
    /// (`\"` and `\\` are decoded; LineEscaping's other escapes are left as written).
    /// Nil when the rest of the line is not exactly such a suffix.
    private func metadataPairs(of line: String, after prefix: String) -> [(key: String, value: String)]? {
        guard line.hasPrefix(prefix + " ("), line.hasSuffix(")\n") else { return nil }
        var rest = Substring(line.dropFirst(prefix.count + 2).dropLast(2))
        func token() -> String? {
            if rest.first == "\"" {
                rest.removeFirst()
                var text = ""
                while let character = rest.first {
                    rest.removeFirst()
                    if character == "\"" { return text }
                    if character == "\\" {
                        guard let escaped = rest.first else { return nil }
                        rest.removeFirst()
                        text += escaped == "\"" || escaped == "\\" ? String(escaped) : "\\" + String(escaped)
                    } else {
                        text.append(character)
                    }
                }
                return nil
            }
            let word = rest.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || "._/:@+-".contains($0)) }
            rest.removeFirst(word.count)
            return word.isEmpty ? nil : String(word)
        }
        var pairs: [(key: String, value: String)] = []
        while true {
            guard let key = token(), rest.first == "=" else { return nil }
            rest.removeFirst()
            guard let value = token() else { return nil }
            pairs.append((key, value))
            if rest.isEmpty { return pairs }
            guard rest.hasPrefix(", ") else { return nil }
            rest.removeFirst(2)
        }
    }

    func testStderrLine_aValueThatLooksLikeMorePairs_isQuoted_andSplitsAsOneValue() throws {
        let line = LogSink.line(time: time, level: .warning, message: "m",
                                metadata: ["outcome": "failed", "path": "/srv/in/a, outcome=ok, path=/x"])
        XCTAssertEqual(line, "\(time.iso8601) warning: m " + #"(outcome=failed, path="/srv/in/a, outcome=ok, path=/x")"# + "\n")
        let pairs = try XCTUnwrap(metadataPairs(of: line, after: "\(time.iso8601) warning: m"))
        XCTAssertEqual(pairs.map(\.key), ["outcome", "path"])
        XCTAssertEqual(pairs.map(\.value), ["failed", "/srv/in/a, outcome=ok, path=/x"])
    }

    func testStderrLine_everyValue_splitsBackIntoTheSamePairs() throws {
        let awkward = ["", "\"", "\\", "a\"b", "a\\\"b", ")", "a)", "(x=y)", ", x=y)", "x=y", " ", "a b", "é", "\u{202E}",
                       "a\"), b=(\"", "trailing\\", "\"\"", "/srv/in/report.csv", "2026-01-01T00:00:00.000Z", "1.5"]
        for value in awkward {
            let line = LogSink.line(time: time, level: .info, message: "m", metadata: ["a": "1", "v": .string(value), "z": "2"])
            let pairs = try XCTUnwrap(metadataPairs(of: line, after: "\(time.iso8601) info: m"), "unparsable: \(line)")
            XCTAssertEqual(pairs.map(\.key), ["a", "v", "z"], line)
            XCTAssertEqual(pairs.map(\.value), ["1", LineEscaping.escaped(value).replacingOccurrences(of: "\\\\", with: "\\"), "2"], line)
        }
    }

    func testField_plainWordsStayBare_andEverythingElseIsQuoted() {
        XCTAssertEqual(LineEscaping.field("run_id"), "run_id")
        XCTAssertEqual(LineEscaping.field("/srv/in/report-1.csv"), "/srv/in/report-1.csv")
        XCTAssertEqual(LineEscaping.field("user@host:+1"), "user@host:+1")
        XCTAssertEqual(LineEscaping.field(""), #""""#)
        XCTAssertEqual(LineEscaping.field("a b"), #""a b""#)
        XCTAssertEqual(LineEscaping.field("café"), #""café""#)
        XCTAssertEqual(LineEscaping.field(#"say "hi""#), #""say \"hi\"""#)
        XCTAssertEqual(LineEscaping.field(#"C:\dir"#), #""C:\\dir""#, "the backslash doubled once, by LineEscaping")
        XCTAssertEqual(LineEscaping.field([0x61, 0xFF, 0x0A]), #""a\xff\n""#)
    }

    func testRunRecordOnStderr_quotesAPathThatLooksLikeMorePairs() throws {
        let sink = LogSink(target: .stderr, level: .info, problemCapacity: 4)
        let path = Array("/srv/in/a, outcome=ok, path=/x".utf8)
        let record = RunRecord(name: "inbox", runID: "00000000000000ab", attempt: 1, outcome: .failed, scheduledAt: nil,
                               startedAt: nil, finishedAt: time, duration: .milliseconds(5), exit: .exited(1), expiry: nil,
                               lateness: nil, detail: nil)
        let subject = JobSubject.file(FileSubject(path: path, rootLength: 7, event: .closedWrite, identity: nil))
        let written = try capturingStandardError(sink) { record.journal(to: sink, key: JobKey(.watch, "inbox"), subject: subject) }
        XCTAssertTrue(written.hasSuffix(#" (watch=inbox, run_id=00000000000000ab, outcome=failed, duration_ms=5, attempt=1, "#
                                        + #"path="/srv/in/a, outcome=ok, path=/x", event=closed_write, exit_code=1)"# + "\n"), written)
    }

    func testRunRecordOnStderr_showsThePathInItsMessageEscapedOnce_asTheJournalMessageDoes() throws {
        let sink = LogSink(target: .stderr, level: .info, problemCapacity: 4)
        let record = RunRecord(name: "inbox", runID: "00000000000000ab", attempt: 1, outcome: .ok, scheduledAt: nil,
                               startedAt: nil, finishedAt: time, duration: .milliseconds(5), exit: .exited(0), expiry: nil,
                               lateness: nil, detail: nil)
        let path = Array(#"/srv/in/a\b"#.utf8) + Array("\u{202E}fdp.exe\n".utf8)
        let subject = JobSubject.file(FileSubject(path: path, rootLength: 7, event: .closedWrite, identity: nil))
        let written = try capturingStandardError(sink) { record.journal(to: sink, key: JobKey(.watch, "inbox"), subject: subject) }
        XCTAssertTrue(written.contains(#" info: watch inbox run 00000000000000ab (/srv/in/a\\b\u202efdp.exe\n): ok (exit 0) in 5ms ("#),
                      written)
        XCTAssertTrue(written.contains(#"path="/srv/in/a\\b\u202efdp.exe\n""#), written)
    }

    /// What the sink itself writes to fd 2 while `body` runs, through a pipe put in its place.
    private func capturingStandardError(_ sink: LogSink, _ body: () -> Void) throws -> String {
        let pipe = try OwnedPipe.forJobOutput().releaseEnds()
        defer { close(pipe.readEnd) }
        let saved = dup(2)
        XCTAssertGreaterThanOrEqual(saved, 0)
        XCTAssertEqual(dup2(pipe.writeEnd, 2), 2)
        close(pipe.writeEnd)
        body()
        // The sink writes on its own queue: what it was given is out before fd 2 goes back.
        XCTAssertTrue(sink.flush(within: .seconds(5)))
        XCTAssertEqual(dup2(saved, 2), 2)
        close(saved)
        var captured: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(pipe.readEnd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            captured += buffer[0..<count]
        }
        return String(decoding: captured, as: UTF8.self)
    }

    func testSinkInStderrMode_writesOneLogCallAsOneLine() throws {
        let sink = LogSink(target: .stderr, level: .info, problemCapacity: 4)
        let written = try capturingStandardError(sink) {
            sink.log(level: .info, message: "moved a\nFAKE: line", metadata: ["path": "b\nFAKE: line\u{1b}[31m"],
                     label: "test", file: #fileID, function: #function, line: #line)
        }
        XCTAssertTrue(written.hasSuffix(#" info: moved a\nFAKE: line (path="b\nFAKE: line\x1b[31m")"# + "\n"), written)
        XCTAssertEqual(written.split(separator: "\n", omittingEmptySubsequences: false).count, 2, written)
    }

    func testSinkEmitInStderrMode_keepsTheTextsOwnLines_butEscapesOtherControls() throws {
        let sink = LogSink(target: .stderr, level: .info, problemCapacity: 4)
        let written = try capturingStandardError(sink) {
            sink.emit(bytes: [("MESSAGE", [0x1B, 0x5B, 0x32, 0x4A])], stderrText: "job[1] stdout: \u{1b}[2J\rover\nsecond")
        }
        XCTAssertEqual(written, "job[1] stdout: \\x1b[2J\\rover\nsecond\n")
    }

    // MARK: - The escaping itself

    func testEscaped_controlBytesAndDelete_becomeCEscapes() {
        XCTAssertEqual(LineEscaping.escaped([0x61, 0x00, 0x07, 0x0A, 0x0D, 0x09, 0x1B, 0x1F, 0x7F, 0x62]),
                       "a\\x00\\x07\\n\\r\\t\\x1b\\x1f\\x7fb")
    }

    func testEscaped_invalidUTF8_becomesOneEscapePerByte_andValidTextIsKept() {
        let bytes: [UInt8] = Array("café ".utf8) + [0xFF, 0xC3] + Array("漢".utf8) + [0xE6, 0xBC] + Array("😀".utf8)
        XCTAssertEqual(LineEscaping.escaped(bytes), "café \\xff\\xc3漢\\xe6\\xbc😀")
    }

    func testEscaped_overlongAndSurrogateAndOutOfRangeForms_areInvalid() {
        XCTAssertEqual(LineEscaping.escaped([0xC0, 0xAF]), "\\xc0\\xaf", "overlong '/'")
        XCTAssertEqual(LineEscaping.escaped([0xE0, 0x80, 0xAF]), "\\xe0\\x80\\xaf", "overlong '/'")
        XCTAssertEqual(LineEscaping.escaped([0xED, 0xA0, 0x80]), "\\xed\\xa0\\x80", "surrogate U+D800")
        XCTAssertEqual(LineEscaping.escaped([0xF4, 0x90, 0x80, 0x80]), "\\xf4\\x90\\x80\\x80", "above U+10FFFF")
        XCTAssertEqual(LineEscaping.escaped([0xF4, 0x8F, 0xBF, 0xBF]), "\u{10FFFF}", "the last scalar is valid")
    }

    func testEscaped_unicodeLineBreaksAndC1Controls_areEscaped() {
        XCTAssertEqual(LineEscaping.escaped("a\u{85}b\u{2028}c\u{2029}d\u{9B}e"), "a\\u0085b\\u2028c\\u2029d\\u009be")
    }

    /// A right-to-left override makes `report\u{202E}fdp.exe` read as `reportexe.pdf`; a zero
    /// width space makes two different names look the same.
    func testEscaped_bidirectionalAndInvisibleFormatCharacters_areEscaped() {
        XCTAssertEqual(LineEscaping.escaped("report\u{202E}fdp.exe"), "report\\u202efdp.exe")
        XCTAssertEqual(LineEscaping.escaped("in\u{200B}box"), "in\\u200bbox")
        let escapedScalars: [UInt32] = [0x061C, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                                        0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x2067, 0x2068, 0x2069, 0xFEFF]
        for value in escapedScalars {
            let scalar = Unicode.Scalar(value)!
            let hex = String(value, radix: 16)
            XCTAssertEqual(LineEscaping.escaped("a\(scalar)b"), "a\\u\(String(repeating: "0", count: 4 - hex.count) + hex)b",
                           "U+\(hex) is escaped")
        }
        // Their neighbours are visible text and stay as they are.
        for kept: UInt32 in [0x00A0, 0x061B, 0x200A, 0x2010, 0x202F, 0x205F, 0x206A, 0xFEFE, 0xFF01] {
            let text = "a\(Unicode.Scalar(kept)!)b"
            XCTAssertEqual(LineEscaping.escaped(text), text, "U+\(String(kept, radix: 16)) is kept")
        }
    }

    func testStderrLineAndJobOutput_escapeARightToLeftOverride() {
        let line = LogSink.line(time: time, level: .info, message: "moved x\u{202E}txt.exe", metadata: [:])
        XCTAssertEqual(line, "\(time.iso8601) info: moved x\\u202etxt.exe\n")
        XCTAssertEqual(LineEscaping.controlsEscaped(inFormatted: "out\u{200B}put\n\u{2066}x"), "out\\u200bput\n\\u2066x")
    }

    func testEscaped_backslashIsDoubled_soAnEscapeAndItsLiteralTextDiffer() {
        XCTAssertEqual(LineEscaping.escaped([0x5C, 0x78, 0x66, 0x66]), "\\\\xff")
        XCTAssertEqual(LineEscaping.escaped([0xFF]), "\\xff")
    }

    func testControlsEscapedInFormattedText_keepsNewlinesAndBackslashes() {
        XCTAssertEqual(LineEscaping.controlsEscaped(inFormatted: "dump\n  path: a\\nb\u{1b}[2J\r"), "dump\n  path: a\\nb\\x1b[2J\\r")
    }

    // MARK: - The journal keeps the bytes

    func testJournalFields_keepTheMessageAndMetadataExactly() {
        let fields = JournalFields.fields(level: .info, message: "a\nFAKE: line\u{1b}[31m", metadata: ["path": "x\ny"],
                                          label: "l", file: "f", function: "g", line: 1)
        XCTAssertEqual(fields.first { $0.name == "MESSAGE" }?.value, "a\nFAKE: line\u{1b}[31m")
        XCTAssertEqual(fields.first { $0.name == "WATCHKEEPER_PATH" }?.value, "x\ny")
    }

    func testJournalEntry_isOneSpanPerFieldWithTheValuesBytesExactly() {
        let awkward: [UInt8] = [0x61, 0x0A, 0x00, 0x1B, 0xFF, 0xFE, 0x0A]
        let entry = Journal.entry([("MESSAGE", awkward), ("WATCHKEEPER_PATH", []), ("PRIORITY", Array("6".utf8))])
        let spans = entry.spans.map { Array(entry.buffer[$0.start..<$0.start + $0.length]) }
        XCTAssertEqual(spans, [Array("MESSAGE=".utf8) + awkward, Array("WATCHKEEPER_PATH=".utf8), Array("PRIORITY=6".utf8)])
    }
}
