import XCTest

@testable import WatchkeeperCore

/// Pins where `TOMLSourceMap` places keys and values. Positions are 1-based
/// line:column, columns counting Unicode scalars.
final class TOMLSourceMapTests: XCTestCase {
    // MARK: - Table-driven helpers

    /// Test shorthand for a path component: `"task"` is a key, `1` an index.
    private enum Part: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
        case key(String)
        case index(Int)
        init(stringLiteral value: String) { self = .key(value) }
        init(integerLiteral value: Int) { self = .index(value) }
        var component: TOMLPathComponent {
            switch self {
            case .key(let k): return .key(k)
            case .index(let i): return .index(i)
            }
        }
    }

    /// One expectation: the path, where its key is, where its value is (nil: none).
    private struct Case {
        let path: [TOMLPathComponent]
        let key: SourcePosition?
        let value: SourcePosition?
        let line: UInt

        init(_ parts: [Part], key: (Int, Int)?, value: (Int, Int)?, line: UInt = #line) {
            path = parts.map(\.component)
            self.key = key.map { SourcePosition(line: $0.0, column: $0.1) }
            self.value = value.map { SourcePosition(line: $0.0, column: $0.1) }
            self.line = line
        }
    }

    private func check(
        _ source: String, _ cases: [Case], scannedCompletely: Bool = true,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let map = TOMLSourceMap(source: source)
        XCTAssertEqual(map.scannedCompletely, scannedCompletely, "scannedCompletely", file: file, line: line)
        for c in cases {
            XCTAssertEqual(map.keyPosition(c.path), c.key, "key of \(c.path)", file: file, line: c.line)
            XCTAssertEqual(map.valuePosition(c.path), c.value, "value of \(c.path)", file: file, line: c.line)
        }
    }

    // MARK: - Basics

    func testDescriptionIsLineColon() {
        XCTAssertEqual(SourcePosition(line: 12, column: 5).description, "12:5")
        XCTAssertEqual("\(SourcePosition(line: 1, column: 1))", "1:1")
    }

    func testTableHeaderKeysAndValues() {
        let source = """
            # comment
            [daemon]
            log_level = "info"   # trailing
              state_dir = '/var/lib/wk'
            top_level_looking = 1
            """
        check(source, [
            Case(["daemon"], key: (2, 2), value: nil),
            Case(["daemon", "log_level"], key: (3, 1), value: (3, 13)),
            Case(["daemon", "state_dir"], key: (4, 3), value: (4, 15)),
            // Keys after a header belong to that table, not to the root.
            Case(["daemon", "top_level_looking"], key: (5, 1), value: (5, 21)),
            Case(["top_level_looking"], key: nil, value: nil),
        ])
    }

    func testRootKeysBeforeFirstHeader() {
        let source = """
            version = 2
            [daemon]
            x = 1
            """
        check(source, [
            Case(["version"], key: (1, 1), value: (1, 11)),
            Case(["daemon", "x"], key: (3, 1), value: (3, 5)),
        ])
    }

    // MARK: - Arrays of tables

    func testKeyInsideSecondArrayOfTablesElement() {
        let source = """
            [[task]]
            name = "a"

            [[task]]
            name = "b"
            command = ["/bin/true", "x"]

            [[task.step]]
            run = "one"

            [[task.step]]
            run = "two"
            """
        check(source, [
            // `[task]` is the array itself: its first header. Positions are the
            // key inside the header (the `t`), not the `[[`.
            Case(["task"], key: (1, 3), value: nil),
            Case(["task", 0], key: (1, 3), value: nil),
            Case(["task", 0, "name"], key: (2, 1), value: (2, 8)),
            Case(["task", 1], key: (4, 3), value: nil),
            Case(["task", 1, "name"], key: (5, 1), value: (5, 8)),
            Case(["task", 1, "command"], key: (6, 1), value: (6, 11)),
            Case(["task", 1, "command", 0], key: (6, 12), value: (6, 12)),
            Case(["task", 1, "command", 1], key: (6, 25), value: (6, 25)),
            Case(["task", 2], key: nil, value: nil),
        ])
    }

    func testNestedArrayOfTablesBelongsToLatestParentElement() {
        let source = """
            [[task]]
            [[task.step]]
            run = "a0"
            [[task]]
            [[task.step]]
            run = "b0"
            [[task.step]]
            run = "b1"
            """
        check(source, [
            Case(["task", 0, "step"], key: (2, 8), value: nil),
            Case(["task", 0, "step", 0], key: (2, 8), value: nil),
            Case(["task", 0, "step", 0, "run"], key: (3, 1), value: (3, 7)),
            Case(["task", 0, "step", 1], key: nil, value: nil),
            Case(["task", 1, "step", 0], key: (5, 8), value: nil),
            Case(["task", 1, "step", 0, "run"], key: (6, 1), value: (6, 7)),
            Case(["task", 1, "step", 1], key: (7, 8), value: nil),
            Case(["task", 1, "step", 1, "run"], key: (8, 1), value: (8, 7)),
        ])
    }

    func testSubTableOfArrayOfTablesElement() {
        let source = """
            [[fruit]]
            [fruit.physical]
            color = "red"
            [[fruit]]
            [fruit.physical]
            color = "green"
            """
        check(source, [
            Case(["fruit", 0, "physical"], key: (2, 8), value: nil),
            Case(["fruit", 0, "physical", "color"], key: (3, 1), value: (3, 9)),
            Case(["fruit", 1], key: (4, 3), value: nil),
            Case(["fruit", 1, "physical"], key: (5, 8), value: nil),
            Case(["fruit", 1, "physical", "color"], key: (6, 1), value: (6, 9)),
            Case(["fruit", "physical"], key: nil, value: nil),
        ])
    }

    // MARK: - Implicit tables

    func testExplicitHeaderWinsOverImplicitCreation() {
        let source = """
            [a.b.c]
            x = 1
            [a]
            y = 2
            """
        check(source, [
            Case(["a"], key: (3, 2), value: nil),
            Case(["a", "b"], key: (1, 4), value: nil),
            Case(["a", "b", "c"], key: (1, 6), value: nil),
            Case(["a", "b", "c", "x"], key: (2, 1), value: (2, 5)),
            Case(["a", "y"], key: (4, 1), value: (4, 5)),
        ])
    }

    func testTableMadeByDottedKeysIsAtItsFirstKey() {
        let source = """
            [server]
            http.port = 80
            http.host = "x"
            """
        check(source, [
            Case(["server", "http"], key: (2, 1), value: nil),
            Case(["server", "http", "port"], key: (2, 6), value: (2, 13)),
            Case(["server", "http", "host"], key: (3, 6), value: (3, 13)),
        ])
    }

    // MARK: - Keys

    func testDottedAndQuotedKeys() {
        let source = #"""
            site."google.com" = true
            a . b . c = 1
            "my key" = 1
            'lit.eral' = 2
            "esc\tape" = 3
            [dog."tater.man"]
            type.name = "pug"
            [ spaced . header ]
            k = 0
            """#
        check(source, [
            Case(["site"], key: (1, 1), value: nil),
            Case(["site", "google.com"], key: (1, 6), value: (1, 21)),
            Case(["site", "google", "com"], key: nil, value: nil),
            Case(["a"], key: (2, 1), value: nil),
            Case(["a", "b"], key: (2, 5), value: nil),
            Case(["a", "b", "c"], key: (2, 9), value: (2, 13)),
            Case(["my key"], key: (3, 1), value: (3, 12)),
            Case(["lit.eral"], key: (4, 1), value: (4, 14)),
            Case(["lit"], key: nil, value: nil),
            // Basic quoted keys are decoded: `\t` is a tab.
            Case(["esc\tape"], key: (5, 1), value: (5, 14)),
            Case(["dog"], key: (6, 2), value: nil),
            Case(["dog", "tater.man"], key: (6, 6), value: nil),
            Case(["dog", "tater.man", "type"], key: (7, 1), value: nil),
            Case(["dog", "tater.man", "type", "name"], key: (7, 6), value: (7, 13)),
            Case(["spaced"], key: (8, 3), value: nil),
            Case(["spaced", "header"], key: (8, 12), value: nil),
            Case(["spaced", "header", "k"], key: (9, 1), value: (9, 5)),
        ])
    }

    func testUnicodeEscapesInQuotedKeys() {
        let source = #"""
            "caf\u00E9" = 1
            "\U0001F680" = 2
            "" = 3
            """#
        check(source, [
            Case(["café"], key: (1, 1), value: (1, 15)),
            Case(["🚀"], key: (2, 1), value: (2, 16)),
            Case([""], key: (3, 1), value: (3, 6)),
        ])
    }

    // MARK: - Inline tables and arrays

    func testInlineTableKeys() {
        let source = """
            [task]
            retry = { attempts = 3, backoff = "10s" }
            env = { outer = { inner = "v" }, "quoted key" = 'q' }
            x = [{a=1},{ a = 2 }]
            empty = {}
            none = []
            after = 1
            """
        check(source, [
            Case(["task", "retry"], key: (2, 1), value: (2, 9)),
            Case(["task", "retry", "attempts"], key: (2, 11), value: (2, 22)),
            Case(["task", "retry", "backoff"], key: (2, 25), value: (2, 35)),
            Case(["task", "env"], key: (3, 1), value: (3, 7)),
            Case(["task", "env", "outer"], key: (3, 9), value: (3, 17)),
            Case(["task", "env", "outer", "inner"], key: (3, 19), value: (3, 27)),
            Case(["task", "env", "quoted key"], key: (3, 34), value: (3, 49)),
            Case(["task", "x"], key: (4, 1), value: (4, 5)),
            Case(["task", "x", 0], key: (4, 6), value: (4, 6)),
            Case(["task", "x", 0, "a"], key: (4, 7), value: (4, 9)),
            Case(["task", "x", 1], key: (4, 12), value: (4, 12)),
            Case(["task", "x", 1, "a"], key: (4, 14), value: (4, 18)),
            Case(["task", "x", 2], key: nil, value: nil),
            Case(["task", "empty"], key: (5, 1), value: (5, 9)),
            Case(["task", "none"], key: (6, 1), value: (6, 8)),
            Case(["task", "none", 0], key: nil, value: nil),
            Case(["task", "after"], key: (7, 1), value: (7, 9)),
        ])
    }

    func testDottedKeysInsideInlineTable() {
        let source = """
            t = { a.b = 1, c = { d.e = 2 } }
            """
        check(source, [
            Case(["t", "a"], key: (1, 7), value: nil),
            Case(["t", "a", "b"], key: (1, 9), value: (1, 13)),
            Case(["t", "c", "d"], key: (1, 22), value: nil),
            Case(["t", "c", "d", "e"], key: (1, 24), value: (1, 28)),
        ])
    }

    func testMultilineArrayWithComments() {
        let source = """
            [daemon]
            list = [
              "a", # first, with = and [ ] inside
              # a whole-line comment "x = 1"
              'b',
              [1, 2],
              { name = "c" },  # trailing comma follows
            ]
            after = 1
            """
        check(source, [
            Case(["daemon", "list"], key: (2, 1), value: (2, 8)),
            Case(["daemon", "list", 0], key: (3, 3), value: (3, 3)),
            Case(["daemon", "list", 1], key: (5, 3), value: (5, 3)),
            Case(["daemon", "list", 2], key: (6, 3), value: (6, 3)),
            Case(["daemon", "list", 2, 1], key: (6, 7), value: (6, 7)),
            Case(["daemon", "list", 3], key: (7, 3), value: (7, 3)),
            Case(["daemon", "list", 3, "name"], key: (7, 5), value: (7, 12)),
            Case(["daemon", "list", 4], key: nil, value: nil),
            Case(["daemon", "x"], key: nil, value: nil),
            Case(["daemon", "after"], key: (9, 1), value: (9, 9)),
        ])
    }

    // MARK: - Strings

    func testMultilineStringContentsAreNotMistakenForKeys() {
        let source = #"""
            a = """
            [not.a.table]
            b = "not a key" # not a comment
            '''still inside'''
            """
            c = '''
            [[nope]]
            d = """ also inside
            '''
            e = """quote run "" and "\"" end"""""
            f = 1
            g = "line with \\" # comment
            h = 'C:\path\' # a literal string ends at the first quote
            i = """\
                continued \""" still inside
              """
            [real]
            x = true
            """#
        check(source, [
            Case(["a"], key: (1, 1), value: (1, 5)),
            Case(["not"], key: nil, value: nil),
            Case(["not", "a", "table"], key: nil, value: nil),
            Case(["b"], key: nil, value: nil),
            Case(["c"], key: (6, 1), value: (6, 5)),
            Case(["nope"], key: nil, value: nil),
            Case(["d"], key: nil, value: nil),
            Case(["e"], key: (10, 1), value: (10, 5)),
            Case(["f"], key: (11, 1), value: (11, 5)),
            Case(["g"], key: (12, 1), value: (12, 5)),
            Case(["h"], key: (13, 1), value: (13, 5)),
            Case(["i"], key: (14, 1), value: (14, 5)),
            Case(["real"], key: (17, 2), value: nil),
            Case(["real", "x"], key: (18, 1), value: (18, 5)),
        ])
    }

    func testStringsContainingHashAndEquals() {
        let source = #"""
            a = "x # y = z"
            b = 'p = q # r'
            c = "\"[d]\" = 1"
            e = 2
            """#
        check(source, [
            Case(["a"], key: (1, 1), value: (1, 5)),
            Case(["b"], key: (2, 1), value: (2, 5)),
            Case(["c"], key: (3, 1), value: (3, 5)),
            Case(["y"], key: nil, value: nil),
            Case(["d"], key: nil, value: nil),
            Case(["e"], key: (4, 1), value: (4, 5)),
        ])
    }

    // MARK: - Other scalars

    func testNumbersDatesAndBooleans() {
        let source = """
            when = 1979-05-27 07:32:00Z # a date-time may contain a space
            offset = 1979-05-27T00:32:00.999999-07:00
            neg = -inf
            hex = 0xDEAD_BEEF
            exp = 6.626e-34
            t = 07:32:00
            flag = false
            next = "after"
            """
        check(source, [
            Case(["when"], key: (1, 1), value: (1, 8)),
            Case(["offset"], key: (2, 1), value: (2, 10)),
            Case(["neg"], key: (3, 1), value: (3, 7)),
            Case(["hex"], key: (4, 1), value: (4, 7)),
            Case(["exp"], key: (5, 1), value: (5, 7)),
            Case(["t"], key: (6, 1), value: (6, 5)),
            Case(["flag"], key: (7, 1), value: (7, 8)),
            Case(["next"], key: (8, 1), value: (8, 8)),
        ])
    }

    // MARK: - Line endings, BOM, tabs, columns

    func testCRLFAndTabs() {
        let source = "# c\r\n[daemon]\r\n\tlog_level\t=\t\"debug\"\r\nport = 8080\r\nml = \"\"\"\r\nx = 1\r\n\"\"\"\r\nlast = 2\r\n"
        check(source, [
            Case(["daemon"], key: (2, 2), value: nil),
            Case(["daemon", "log_level"], key: (3, 2), value: (3, 14)),
            Case(["daemon", "port"], key: (4, 1), value: (4, 8)),
            Case(["daemon", "ml"], key: (5, 1), value: (5, 6)),
            Case(["daemon", "x"], key: nil, value: nil),
            Case(["daemon", "last"], key: (8, 1), value: (8, 8)),
        ])
    }

    func testByteOrderMarkIsNotAColumn() {
        let bytes: [UInt8] = [0xEF, 0xBB, 0xBF] + Array("name = 1\n[t]\nk = 2\n".utf8)
        check(String(decoding: bytes, as: UTF8.self), [
            Case(["name"], key: (1, 1), value: (1, 8)),
            Case(["t"], key: (2, 2), value: nil),
            Case(["t", "k"], key: (3, 1), value: (3, 5)),
        ])
    }

    func testColumnsCountUnicodeScalarsNotGraphemesOrBytes() {
        // "e\u{301}" is one grapheme but two scalars; the rocket is one scalar
        // but four UTF-8 bytes.
        let source = "t = { s = \"e\u{301}\", n = 1 }\nr = { s = \"🚀\", n = 1 }\n"
        check(source, [
            Case(["t", "n"], key: (1, 17), value: (1, 21)),
            Case(["r", "n"], key: (2, 16), value: (2, 20)),
        ])
    }

    // MARK: - Lookups that fail

    func testUnknownPathReturnsNil() {
        let source = """
            [daemon]
            log_level = "info"
            list = [1]
            [[task]]
            name = "a"
            """
        check(source, [
            Case([], key: nil, value: nil),
            Case(["nope"], key: nil, value: nil),
            Case(["log_level"], key: nil, value: nil),
            Case(["daemon", "log_level", "x"], key: nil, value: nil),
            Case(["daemon", "log_level", 0], key: nil, value: nil),
            Case(["daemon", "list", 1], key: nil, value: nil),
            Case(["daemon", 0], key: nil, value: nil),
            Case(["task", "name"], key: nil, value: nil),
            Case(["task", 1, "name"], key: nil, value: nil),
            Case(["task", -1], key: nil, value: nil),
        ])
    }

    func testTextItCannotFollowStopsTheScanButKeepsEarlierPositions() {
        // Not valid TOML (TOMLKit would have rejected it): the scanner gives up
        // at line 2 rather than guessing.
        let source = """
            a = 1
            b = = 2
            c = 3
            """
        check(source, [
            Case(["a"], key: (1, 1), value: (1, 5)),
            Case(["c"], key: nil, value: nil),
        ], scannedCompletely: false)
    }

    func testMalformedInputNeverCrashes() {
        let inputs = [
            "", "\u{FEFF}", "[", "[[", "[a", "[[a]", "a", "a =", "a = ", "=", "a = \"unterminated",
            "a = '''open", "a = \"\"\"open", "a = [1, 2", "a = {b = 1", "a = \"\\u12\"", "\"a\\", "a.",
            "a = 1 2 = 3", "\r", "\r\n", "#", "a = [,]", "a = {,}", "a = \"\\UFFFFFFFF\"", "]]",
        ]
        for input in inputs {
            let map = TOMLSourceMap(source: input)
            _ = map.keyPosition([.key("a")])
            _ = map.valuePosition([.key("a"), .index(0)])
        }
    }

    func testEmptyAndCommentOnlyDocumentsScanCompletely() {
        check("", [Case(["a"], key: nil, value: nil)])
        check("# only a comment\n\n   \t\n", [Case(["a"], key: nil, value: nil)])
    }
}
