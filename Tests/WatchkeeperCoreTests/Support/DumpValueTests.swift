import Foundation
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// Pins both renderings of the state dump: the JSON (which must parse, keep key order
/// and escape everything JSON requires) and the indented text an operator reads.
final class DumpValueTests: XCTestCase {
    private func parseJSON(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> Any? {
        do {
            return try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
        } catch {
            XCTFail("not valid JSON: \(error)\n\(text)", file: file, line: line)
            return nil
        }
    }

    // MARK: - JSON

    func testJSON_ofAMixedDocument_isExactAndParsesBack() throws {
        let document = DumpValue.object([
            .init("version", .int(1)),
            .init("zeta", .string("listed first, sorts last")),
            .init("alpha", .bool(true)),
            .init("off", .bool(false)),
            .init("ratio", .double(0.25)),
            .init("negative", .int(-7)),
            .init("nothing", .null),
            .init("list", .array([.int(1), .string("two"), .array([]), .object([])])),
            .init("nested", .object([.init("b", .int(2)), .init("a", .int(1))])),
        ])
        let json = document.json
        XCTAssertEqual(
            json,
            #"{"version":1,"zeta":"listed first, sorts last","alpha":true,"off":false,"ratio":0.25,"negative":-7,"#
                + #""nothing":null,"list":[1,"two",[],{}],"nested":{"b":2,"a":1}}"#
        )
        let parsed = try XCTUnwrap(parseJSON(json) as? [String: Any])
        XCTAssertEqual(parsed["version"] as? Int, 1)
        XCTAssertEqual(parsed["zeta"] as? String, "listed first, sorts last")
        XCTAssertEqual(parsed["alpha"] as? Bool, true)
        XCTAssertEqual(parsed["ratio"] as? Double, 0.25)
        XCTAssertTrue(parsed["nothing"] is NSNull)
        XCTAssertEqual((parsed["list"] as? [Any])?.count, 4)
        XCTAssertEqual((parsed["nested"] as? [String: Any])?["a"] as? Int, 1)
    }

    func testJSON_keepsObjectKeysInTheirGivenOrder() {
        let keys = ["z", "a", "m", "b", "y", "c"]
        let json = DumpValue.object(keys.enumerated().map { .init($0.element, .int(Int64($0.offset))) }).json
        XCTAssertEqual(json, #"{"z":0,"a":1,"m":2,"b":3,"y":4,"c":5}"#)
        XCTAssertNotNil(parseJSON(json))
    }

    func testJSON_escapesQuotesBackslashesNewlinesAndControlCharacters() throws {
        let awkward = "say \"hi\" to C:\\dir\nnext\r\tcol\u{01}bell\u{07}del\u{7F}nul\u{0}end"
        let document = DumpValue.object([.init("key \"with\" \\ and \n", .string(awkward))])
        let json = document.json
        XCTAssertEqual(
            json,
            #"{"key \"with\" \\ and \n":"say \"hi\" to C:\\dir\nnext\r\tcol\u0001bell\u0007del\u007fnul\u0000end"}"#
        )
        let parsed = try XCTUnwrap(parseJSON(json) as? [String: String])
        XCTAssertEqual(parsed, ["key \"with\" \\ and \n": awkward], "the escapes decode back to the original text")
    }

    func testJSON_nonASCIIText_isWrittenAsIs_andParsesBack() throws {
        let text = "café 漢字 😀 ü"
        let json = DumpValue.array([.string(text)]).json
        XCTAssertEqual(json, "[\"\(text)\"]")
        XCTAssertEqual(try XCTUnwrap(parseJSON(json) as? [String]), [text])
    }

    /// `watchkeeper status --json` on a terminal: a U+202E in a file name must not reorder
    /// what the operator reads, nor a U+009B start an escape sequence.
    func testJSON_lineBreaksC1ControlsAndBidirectionalFormatCharacters_areUEscapes_andParseBack() throws {
        let text = "a\u{2028}b\u{85}c\u{9B}d\u{202E}txt.exe\u{200B}\u{FEFF}"
        let json = DumpValue.array([.string(text)]).json
        XCTAssertEqual(json, #"["a\u2028b\u0085c\u009bd\u202etxt.exe\u200b\ufeff"]"#)
        XCTAssertEqual(try XCTUnwrap(parseJSON(json) as? [String]), [text])
        XCTAssertEqual(try DumpValue.parse(json: json), .array([.string(text)]), "our own parser reads it back too")
    }

    func testJSON_nonFiniteDoubles_becomeNull() throws {
        let document = DumpValue.object([
            .init("nan", .double(.nan)),
            .init("inf", .double(.infinity)),
            .init("minus_inf", .double(-.infinity)),
            .init("finite", .double(1.5)),
        ])
        let json = document.json
        XCTAssertEqual(json, #"{"nan":null,"inf":null,"minus_inf":null,"finite":1.5}"#)
        let parsed = try XCTUnwrap(parseJSON(json) as? [String: Any])
        XCTAssertTrue(parsed["nan"] is NSNull)
        XCTAssertTrue(parsed["inf"] is NSNull)
        XCTAssertTrue(parsed["minus_inf"] is NSNull)
    }

    func testJSON_extremeNumbers_areValidJSONNumbers() throws {
        let values: [DumpValue] = [
            .double(1e-7), .double(1e20), .double(-2.5e-300), .double(Double.greatestFiniteMagnitude),
            .int(.max), .int(.min), .double(0), .double(-0.0),
        ]
        for value in values {
            let json = DumpValue.array([value]).json
            let parsed = parseJSON(json) as? [Any]
            XCTAssertEqual(parsed?.count, 1, "\(value) rendered as \(json)")
        }
    }

    // MARK: - Text

    func testText_ofASmallNestedDocument_isIndentedKeyValueLines() {
        let document = DumpValue.object([
            .init("version", .int(1)),
            .init("healthy", .bool(true)),
            .init("degraded", .bool(false)),
            .init("note", .string("")),
            .init("uptime_s", .double(12.3456)),
            .init("last_error", .null),
            .init("tags", .array([.string("a"), .int(2)])),
            .init("empty_list", .array([])),
            .init("empty_object", .object([])),
            .init("daemon", .object([.init("state", .string("running")), .init("pid", .int(42))])),
            .init("sources", .array([
                .object([.init("kind", .string("signal")), .init("target", .string("SIGHUP"))]),
                .object([.init("name", .string("job")), .init("limits", .object([.init("cpu", .string("1s"))]))]),
                .string("loose"),
            ])),
        ])
        XCTAssertEqual(document.text().components(separatedBy: "\n"), [
            "version: 1",
            "healthy: yes",
            "degraded: no",
            #"note: """#,
            "uptime_s: 12.346",
            "last_error: -",
            "tags: a, 2",
            "empty_list: none",
            "empty_object: none",
            "daemon:",
            "  state: running",
            "  pid: 42",
            "sources:",
            "  - kind: signal, target: SIGHUP",
            "  - name: job",
            "    limits:",
            "      cpu: 1s",
            "  - loose",
        ])
    }

    func testText_withIndent_shiftsEveryLine() {
        let document = DumpValue.object([.init("a", .object([.init("b", .int(1))]))])
        XCTAssertEqual(document.text(indent: 4), "    a:\n      b: 1")
    }

    func testText_ofTopLevelArrayAndScalar() {
        XCTAssertEqual(DumpValue.array([.int(1), .object([.init("k", .string("v"))])]).text(), "- 1\n- k: v")
        XCTAssertEqual(DumpValue.string("plain").text(), "plain")
        XCTAssertEqual(DumpValue.double(-0.25).text(), "-0.250")
        XCTAssertEqual(DumpValue.double(2).text(), "2.000")
    }

    // MARK: - Names from outside: bytes and control characters

    func testJSON_ofValidUTF8Bytes_isAString() throws {
        let json = DumpValue.object([.init("path", .bytes(Array("/srv/in/café\n\"x\".txt".utf8)))]).json
        XCTAssertEqual(json, #"{"path":"/srv/in/café\n\"x\".txt"}"#)
        XCTAssertEqual(try XCTUnwrap(parseJSON(json) as? [String: String]), ["path": "/srv/in/café\n\"x\".txt"])
    }

    /// journalctl -o json's convention for a field that is not UTF-8: the byte values.
    func testJSON_ofBytesWithAnInvalidByte_isAnArrayOfTheByteValues() throws {
        let name: [UInt8] = Array("/srv/in/a".utf8) + [0xFF] + Array("\nb".utf8)
        let json = DumpValue.object([.init("path", .bytes(name)), .init("empty", .bytes([]))]).json
        XCTAssertEqual(json, #"{"path":[47,115,114,118,47,105,110,47,97,255,10,98],"empty":""}"#)
        let parsed = try XCTUnwrap(parseJSON(json) as? [String: Any])
        XCTAssertEqual(parsed["path"] as? [UInt8], name, "the exact bytes come back")
    }

    func testText_ofBytes_keepsPrintableUTF8_andEscapesInvalidAndControlBytes() {
        let name: [UInt8] = Array("/srv/in/café ".utf8) + [0xFF] + Array("\nwatch: forged".utf8)
        let text = DumpValue.object([.init("path", .bytes(name)), .init("empty", .bytes([]))]).text()
        XCTAssertEqual(text.components(separatedBy: "\n"), [#"path: /srv/in/café \xff\nwatch: forged"#, #"empty: """#])
    }

    /// A file name with a newline must not add a line to the dump an operator reads.
    func testText_ofStringsAndKeysWithControlCharacters_staysOneLinePerField() {
        let document = DumpValue.object([
            .init("last_file", .string("a\nhealthy: yes")),
            .init("rule\nforged", .string("\u{1b}[2Jx\ty")),
            .init("files", .array([.string("b\nc"), .string("d")])),
        ])
        XCTAssertEqual(document.text().components(separatedBy: "\n"), [
            #"last_file: a\nhealthy: yes"#,
            #"rule\nforged: \x1b[2Jx\ty"#,
            #"files: b\nc, d"#,
        ])
        let nested = DumpValue.object([.init("files", .array([.object([.init("name", .string("d\ne")), .init("n", .int(1))])]))])
        XCTAssertEqual(nested.text().components(separatedBy: "\n"), ["files:", #"  - name: d\ne, n: 1"#])
    }

    func testSubscript_findsFirstFieldWithThatKey_onlyInObjects() {
        let document = DumpValue.object([.init("a", .int(1)), .init("b", .int(2)), .init("a", .int(3))])
        XCTAssertEqual(document["a"], .int(1))
        XCTAssertEqual(document["b"], .int(2))
        XCTAssertNil(document["c"])
        XCTAssertNil(DumpValue.array([.int(1)])["a"])
    }

    // The text rendering must survive every value the JSON survives: a NaN or
    // infinite figure (0/0 in a rate) or a huge one must not stop the daemon while it
    // writes its dump. These run in a child process (see exitStatusOfChild).

    func testText_ofNonFiniteDoubles_doesNotCrash_andShowsThemAsMissing() throws {
        try assertChildHarnessWorks()
        let status = try XCTUnwrap(exitStatusOfChild {
            let text = DumpValue.object([
                .init("nan", .double(.nan)),
                .init("inf", .double(.infinity)),
                .init("minus_inf", .double(-.infinity)),
            ]).text()
            return text == "nan: -\ninf: -\nminus_inf: -" ? 0 : 2
        }, "the child did not finish")
        XCTAssertEqual(status.signal, 0, "rendering NaN/infinity as text crashed the process (signal \(status.signal))")
        XCTAssertEqual(status.exitCode, 0, "non-finite doubles should read as \"-\", like null in the JSON")
    }

    func testText_ofHugeDouble_doesNotCrash() throws {
        try assertChildHarnessWorks()
        let status = try XCTUnwrap(exitStatusOfChild {
            DumpValue.double(1e300).text().isEmpty ? 2 : 0
        }, "the child did not finish")
        XCTAssertEqual(status.signal, 0, "rendering 1e300 as text crashed the process (signal \(status.signal))")
        XCTAssertEqual(status.exitCode, 0)
    }

    /// The fork-based check itself must tell exit codes apart, or the two tests above prove nothing.
    private func assertChildHarnessWorks(file: StaticString = #filePath, line: UInt = #line) throws {
        let benign = try XCTUnwrap(exitStatusOfChild { DumpValue.double(1.5).text() == "1.500" ? 0 : 2 }, file: file, line: line)
        XCTAssertEqual(benign.signal, 0, file: file, line: line)
        XCTAssertEqual(benign.exitCode, 0, file: file, line: line)
        let three = try XCTUnwrap(exitStatusOfChild { 3 }, file: file, line: line)
        XCTAssertEqual(three.exitCode, 3, file: file, line: line)
    }

    /// Runs `body` in a forked child, since a trap would otherwise end the whole test
    /// run; its return value becomes the exit code.
    private func exitStatusOfChild(_ body: () -> Int32) -> (exitCode: Int32, signal: Int32)? {
        fflush(nil)  // all output streams, so the child does not repeat buffered output
        let pid = fork()
        if pid == 0 {
            // Keep the child's crash report, if any, out of the test log.
            let devNull = open("/dev/null", O_WRONLY)
            if devNull >= 0 { dup2(devNull, 2) }
            _exit(body())
        }
        guard pid > 0 else { return nil }
        var status: Int32 = 0
        let deadline = DispatchTime.now() + .seconds(60)
        while DispatchTime.now() < deadline {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                let signal = status & 0x7F
                return (exitCode: signal == 0 ? (status >> 8) & 0xFF : -1, signal: signal)
            }
            if result < 0 && errno != EINTR { return nil }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        _ = waitpid(pid, &status, 0)
        return nil
    }
}
