import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Pins what is refused before TOMLKit sees the file (ConfigPreflight): NUL bytes and
/// invalid UTF-8 anywhere, over-long keys and over-deep nesting, each at its
/// `LINE:COLUMN`, and that what TOMLKit then gets is bounded.
final class ConfigPreflightTests: XCTestCase {
    private static let tooDeepHeader =
        "table header nested more than 8 levels deep; watchkeeper's settings go at most 3 deep, as in task.retry.attempts"
    private static let tooDeepKey =
        "key nested more than 8 levels deep; watchkeeper's settings go at most 3 deep, as in task.retry.attempts"
    private static let tooDeepValue =
        "value nested more than 8 levels deep; watchkeeper's settings go at most 3 deep, as in task.retry.attempts"
    private static let nul = "NUL byte in the file: a configuration file is text, and TOML allows no NUL byte anywhere"

    // MARK: - Helpers

    /// The bytes written to a file and loaded, as `check-config` does: invalid UTF-8
    /// cannot be put in a Swift String.
    private func diagnostics(bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) throws -> [ConfigDiagnostic] {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("watchkeeper-preflight-\(UUID().uuidString).toml")
        try Data(bytes).write(to: url)
        defer { XCTAssertNoThrow(try FileManager.default.removeItem(at: url)) }
        switch ConfigLoader.load(path: url.path, environment: [:]) {
        case .success:
            XCTFail("expected the file to be refused", file: file, line: line)
            return []
        case .failure(let errors):
            return errors.diagnostics.map { ConfigDiagnostic(file: configPath, position: $0.position, message: $0.message) }
        }
    }

    private static let validTask = """
        [[task]]
        name = "a"
        command = ["/bin/true"]
        every = "1h"

        """

    // MARK: - NUL bytes

    func testParse_nulByteBetweenLines_isRefusedAtItsPosition_notTakenAsTheEndOfTheFile() {
        // toml++ stopped at the NUL, so the unknown table after it went unnoticed and the
        // file loaded.
        let source = "[daemon]\nlog_level = \"info\"\n\u{0}\n[bogus]\nx = 1\n"
        assertSingleDiagnostic(configErrors(source), at: (3, 1), Self.nul)
    }

    func testParse_nulByteInsideAComment_isRefusedAtItsColumn() {
        assertSingleDiagnostic(configErrors(Self.validTask + "# ok so far\u{0}then hidden\n"), at: (5, 12), Self.nul)
    }

    func testParse_nulByteInsideAString_isRefusedAtItsColumn() {
        assertSingleDiagnostic(configErrors("[daemon]\nruntime_dir = \"/run/a\u{0}b\"\n"), at: (2, 22), Self.nul)
    }

    // MARK: - UTF-8

    func testLoad_latin1ByteInACommand_isRefusedAtItsColumn_notTurnedIntoAReplacementCharacter() throws {
        // "café" saved as Latin-1: the é is the single byte 0xE9. Columns count characters,
        // so the ü before it is one column.
        var bytes = Array(Self.validTask.utf8)
        bytes += Array("[[task]]\nname = \"b\"\nevery = \"1h\"\ncommand = [\"/bin/echo\", \"ü caf".utf8) + [0xE9] + Array("\"]\n".utf8)
        assertSingleDiagnostic(try diagnostics(bytes: bytes), at: (8, 31), "invalid UTF-8 byte 0xE9: a configuration file must be UTF-8 text")
    }

    func testLoad_eachRunOfInvalidBytes_isOneError_showingTheBytes() throws {
        // A sequence cut short (E2 82 without its last byte), an overlong NUL (C0 80), a
        // UTF-16 surrogate (ED A0 80) and a lone continuation byte.
        let bytes = Array("# a".utf8) + [0xE2, 0x82] + Array("b\n# ".utf8) + [0xC0, 0x80] + Array("\n# ".utf8)
            + [0xED, 0xA0, 0x80] + Array("\n# ".utf8) + [0x80] + Array("\n".utf8)
        let found = try diagnostics(bytes: bytes)
        XCTAssertEqual(found.map { $0.position.map(\.description) }, ["1:4", "2:3", "3:3", "4:3"], "\(found)")
        XCTAssertEqual(found.map(\.message), [
            "invalid UTF-8 bytes 0xE2 0x82: a configuration file must be UTF-8 text",
            "invalid UTF-8 bytes 0xC0 0x80: a configuration file must be UTF-8 text",
            "invalid UTF-8 bytes 0xED 0xA0 0x80: a configuration file must be UTF-8 text",
            "invalid UTF-8 byte 0x80: a configuration file must be UTF-8 text",
        ])
    }

    func testLoad_sequenceCutShortAtTheEndOfTheFile_isRefused() throws {
        assertSingleDiagnostic(try diagnostics(bytes: Array("# end".utf8) + [0xF0, 0x9F, 0x98]), at: (1, 6),
                               "invalid UTF-8 bytes 0xF0 0x9F 0x98: a configuration file must be UTF-8 text")
    }

    func testLoad_binaryFile_listsTwentyProblemsThenSaysWhereItStopped() throws {
        let found = try diagnostics(bytes: Array(repeating: [0, UInt8(ascii: "x")], count: 500).flatMap { $0 })
        XCTAssertEqual(found.count, 21)
        XCTAssertEqual(found.last?.position, SourcePosition(line: 1, column: 41))
        XCTAssertEqual(found.last?.message, "more than 20 problems like these; the check stopped here")
    }

    // MARK: - Key length

    func testParse_bareKeyOver256Bytes_isRefusedAtTheKey() {
        let key = String(repeating: "k", count: 257)
        assertSingleDiagnostic(configErrors("[daemon]\n  \(key) = 1\n"), at: (2, 3), "key is 257 bytes long; a key may be at most 256 bytes")
    }

    func testParse_quotedKeyOver256Bytes_isRefusedAtItsOpeningQuote() {
        let key = String(repeating: "é", count: 150)  // 300 bytes, 150 columns
        assertSingleDiagnostic(configErrors("[daemon]\nlog_level = \"info\"\nenv.\"\(key)\" = 1\n"), at: (3, 5),
                               "key is 300 bytes long; a key may be at most 256 bytes")
    }

    func testParse_keyOfAMegabyte_isRefusedBeforeTOMLKitReadsIt() {
        // TOMLKit took 31 s over this one.
        let key = String(repeating: "k", count: 1 << 20)
        assertSingleDiagnostic(configErrors("\(key) = 1\n"), at: (1, 1), "key is 1048576 bytes long; a key may be at most 256 bytes")
    }

    func testParse_keyOf256Bytes_reachesTheSchemaChecks() {
        let key = String(repeating: "k", count: 256)
        let found = configErrors("[daemon]\n\(key) = 1\n")
        XCTAssertEqual(found.count, 1)
        XCTAssertEqual(found.first?.message.hasPrefix("unknown key \"kkk"), true, "\(found)")
    }

    func testParse_longStringValuesAndComments_areNotKeys() throws {
        let long = String(repeating: "x", count: 100_000)
        let source = Self.validTask + """
            # \(long) [a.b.c.d.e.f.g.h.i.j]
            [[task]]
            name = "b"
            every = "1h"
            command = ["/bin/echo", "\(long)", '\(long)', \"\"\"
            \(long) = [a.b.c.d.e.f.g.h.i.j]
            \"\"\"]
            """
        XCTAssertNoThrow(try ConfigLoader.parse(source: source, path: configPath, environment: [:]).get())
    }

    // MARK: - Depth

    func testParse_tableHeaderNineKeysDeep_isRefusedAtTheNinthKey() {
        assertSingleDiagnostic(configErrors("[a.b.c.d.e.f.g.h.i]\nx = 1\n"), at: (1, 18), Self.tooDeepHeader)
    }

    func testParse_tableHeaderEightKeysDeep_reachesTheSchemaChecks() {
        let found = configErrors("[a.b.c.d.e.f.g.h]\n")
        XCTAssertEqual(found.map(\.message), [#"unknown key "a" in the top level (known keys: daemon, cluster, task, watch)"#])
    }

    func testParse_dottedKeyBelowAHeader_countsTheHeadersKeysToo() {
        assertSingleDiagnostic(configErrors("[a.b.c.d]\ne.f.g.h = 1\ne.f.g.h2.i = 2\n"), at: (3, 10), Self.tooDeepKey)
    }

    func testParse_inlineTablesAndArraysNestedTooDeep_areRefusedAtTheOpeningBracket() {
        assertSingleDiagnostic(configErrors("x = { a = { b = { c = [[[[[1]]]]] } } }\n"), at: (1, 27), Self.tooDeepValue)
        assertSingleDiagnostic(configErrors("x = { a = { b = { c = { d = { e = { f = { g = { h = 1 } } } } } } } }\n"), at: (1, 47), Self.tooDeepValue)
        assertSingleDiagnostic(configErrors("x = { a = { b.c.d.e.f.g.h = 1 } }\n"), at: (1, 25), Self.tooDeepKey)
    }

    func testParse_thousandsOfNestedArrays_areOneErrorAndNoDeepRecursion() {
        let depth = 100_000
        let source = "x = " + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "\n"
        assertSingleDiagnostic(configErrors(source), at: (1, 12), Self.tooDeepValue)
    }

    func testParse_twentyKilobytesOfOneDeepDottedHeader_isOneError() {
        // 10,000 levels: 12 s and 1.2 GiB in TOMLKit before this check.
        let header = "[" + Array(repeating: "a", count: 10_000).joined(separator: ".") + "]\n"
        XCTAssertGreaterThan(header.utf8.count, 20_000)
        assertSingleDiagnostic(configErrors(header + "x = 1\ny.z = 2\n"), at: (1, 18), Self.tooDeepHeader)
    }

    func testParse_twentyKilobytesOfManyDeepHeaders_listsTwentyThenStops() {
        var source = ""
        for index in 0..<170 {
            source += "[t\(index)." + Array(repeating: "a", count: 60).joined(separator: ".") + "]\n"
        }
        XCTAssertGreaterThan(source.utf8.count, 20_000)
        let found = configErrors(source)
        XCTAssertEqual(found.count, 21)
        XCTAssertEqual(Set(found.dropLast().map(\.message)), [Self.tooDeepHeader])
        XCTAssertEqual(found.map { $0.position?.line }, Array(1...21))
        XCTAssertEqual(found.last?.message, "more than 20 problems like these; the check stopped here")
    }

    // MARK: - Size

    func testParse_moreThan100000Values_isRefusedAtTheFirstOneTooMany() {
        // `x` and 100,000 elements: the last element is one too many.
        let source = "x = [" + String(repeating: "1,", count: 100_000) + "]\n"
        assertSingleDiagnostic(configErrors(source), at: (1, 6 + 2 * 99_999),
                               "more than 100000 keys, table headers and array elements; a watchkeeper configuration needs far fewer")
    }

    func testParse_100000Values_reachTheSchemaChecks() {
        let source = "x = [" + String(repeating: "1,", count: 99_999) + "]\n"
        XCTAssertEqual(configErrors(source).map(\.message), [#"unknown key "x" in the top level (known keys: daemon, cluster, task, watch)"#])
    }

    func testParse_byteOrderMarkAndCRLF_keepColumnsAsEditorsShowThem() {
        assertSingleDiagnostic(configErrors("\u{FEFF}[daemon]\r\n[a.b.c.d.e.f.g.h.i]\r\n"), at: (2, 18), Self.tooDeepHeader)
    }

    func testCheck_followsEveryKindOfValidTOMLToTheEnd() {
        // Strings of all four kinds holding brackets, quotes, `#` and `=`; comments; dates;
        // multi-line arrays of inline tables. If the scanner lost its place anywhere, it
        // would stop (or misreport) before the deep header on the last line.
        let source = #"""
        # comment with [brackets] and "quotes" and 'single' = x.y.z
        "quoted.key" = 1
        'literal.key' = 2
        a . b . "c" = 3
        str1 = "with # hash and [bracket] and \" escaped quote and \\"
        str2 = 'literal with \ backslash and # hash'
        ml1 = """
        multi [ { line
        "" two quotes "" then \""" escaped
        """
        ml2 = '''
        literal '''
        ml3 = """five quotes"""""
        ml4 = '''x'''''
        ml5 = """\
           line ending backslash \
        """
        dt1 = 1979-05-27 07:32:00Z
        dt2 = 1979-05-27T00:32:00.999999-07:00
        t = 07:32:00
        f = [ 1.5e3, -0.0, +inf, nan, 0xDEAD ]
        arr = [
          # comment in array
          "a", 'b', """c""", '''d''',
          [1, [2, [3]]],
          { x = 1, y.z = "w" },
        ]
        inl = { a = 1, b = { c = [1, 2] }, "d.e" = 'f' }

        [ table . "with spaces" ]
        x = 1 # trailing

        [[ aot ]]
        name = "a"
        [[aot.sub]]
        k = true
        [[aot]]
        k = false
        	tabbed	=	"tabs"
        [a.b.c.d.e.f.g.h.i]
        """#
        XCTAssertEqual(ConfigPreflight.check(Array(source.utf8)), [
            ConfigPreflight.Problem(position: SourcePosition(line: 40, column: 18), message: Self.tooDeepHeader),
        ])
    }

    func testParse_afterTextTOMLKitWillRefuse_theCheckStopsAndTOMLKitReportsIt() {
        // The preflight reports no syntax errors of its own: TOMLKit's message stands.
        let found = configErrors("[daemon]\nlog_level = = 1\n[a.b.c.d.e.f.g.h.i]\n")
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertEqual(found.first?.position, SourcePosition(line: 2, column: 13))
        XCTAssertEqual(found.first?.message.hasPrefix("syntax error: "), true, "\(found)")
    }
}
