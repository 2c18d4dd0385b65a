import XCTest

@testable import WatchkeeperCore

/// Pins the `{name}` template syntax of argv elements and, above all, that a value is
/// inserted as exactly its bytes into the one element that names it, whatever it holds.
final class PlaceholdersTests: XCTestCase {
    private func pieces(_ template: String, file: StaticString = #filePath, line: UInt = #line) -> [Placeholders.Piece] {
        switch Placeholders.parse(template) {
        case .success(let pieces):
            return pieces
        case .failure(let problem):
            XCTFail("expected \"\(template)\" to parse, got: \(problem.message)", file: file, line: line)
            return []
        }
    }

    private func problem(_ template: String, file: StaticString = #filePath, line: UInt = #line) -> String? {
        switch Placeholders.parse(template) {
        case .success(let pieces):
            XCTFail("expected \"\(template)\" to be refused, got \(pieces)", file: file, line: line)
            return nil
        case .failure(let problem):
            return problem.message
        }
    }

    private func literal(_ text: String) -> Placeholders.Piece { .literal(Array(text.utf8)) }

    // MARK: - Parsing

    func testParse_wholeElementPlaceholder_isOnePlaceholderPiece() {
        XCTAssertEqual(pieces("{task}"), [.placeholder("task")])
    }

    func testParse_placeholderInsideText_splitsIntoLiteralPlaceholderLiteral() {
        XCTAssertEqual(pieces("--log=/var/log/{task}.log"), [
            literal("--log=/var/log/"), .placeholder("task"), literal(".log"),
        ])
    }

    func testParse_textWithoutBraces_isOneLiteral_andEmptyTextIsNoPieces() {
        XCTAssertEqual(pieces("/usr/bin/rsync"), [literal("/usr/bin/rsync")])
        XCTAssertEqual(pieces(""), [])
    }

    func testParse_adjacentPlaceholders_areSeparatePiecesWithNothingBetween() {
        XCTAssertEqual(pieces("{task}{run_id}{attempt}"), [
            .placeholder("task"), .placeholder("run_id"), .placeholder("attempt"),
        ])
    }

    func testParse_doubledBraces_areLiteralBraces() {
        XCTAssertEqual(pieces("{{"), [literal("{")])
        XCTAssertEqual(pieces("}}"), [literal("}")])
        XCTAssertEqual(pieces("awk {{print $1}}"), [literal("awk {print $1}")])
        // Escaped braces around a name are text, not a placeholder.
        XCTAssertEqual(pieces("{{task}}"), [literal("{task}")])
    }

    func testParse_escapedBracesAroundAPlaceholder_keepTheLiteralBracesOnEachSide() {
        XCTAssertEqual(pieces("{{{task}}}"), [literal("{"), .placeholder("task"), literal("}")])
    }

    func testParse_unclosedBrace_isRefusedSuggestingDoubling() {
        XCTAssertEqual(problem("{task"), #"unclosed "{" in "{task" (write "{{" for a literal brace)"#)
        XCTAssertEqual(problem("x{"), #"unclosed "{" in "x{" (write "{{" for a literal brace)"#)
        XCTAssertEqual(problem("{task}-{"), #"unclosed "{" in "{task}-{" (write "{{" for a literal brace)"#)
    }

    func testParse_unmatchedClosingBrace_isRefusedSuggestingDoubling() {
        XCTAssertEqual(problem("a}b"), #"unmatched "}" in "a}b" (write "}}" for a literal brace)"#)
        XCTAssertEqual(problem("}"), #"unmatched "}" in "}" (write "}}" for a literal brace)"#)
        // A tripled brace leaves one over.
        XCTAssertEqual(problem("}}}"), #"unmatched "}" in "}}}" (write "}}" for a literal brace)"#)
    }

    func testParse_namesOtherThanLettersAndUnderscores_areInvalidPlaceholders() {
        let cases: [(template: String, name: String, line: UInt)] = [
            ("{}", "", #line),
            ("{ task }", " task ", #line),
            ("{run-id}", "run-id", #line),
            ("{task1}", "task1", #line),
            ("{1}", "1", #line),
            ("{$HOME}", "$HOME", #line),
            ("{täsk}", "täsk", #line),
            ("{a{b}", "a{b", #line),
        ]
        for c in cases {
            switch Placeholders.parse(c.template) {
            case .success(let pieces):
                XCTFail("\"\(c.template)\" parsed as \(pieces)", line: c.line)
            case .failure(let problem):
                XCTAssertEqual(
                    problem.message,
                    "invalid placeholder \"{\(c.name)}\" in \"\(c.template)\" (write \"{{\" for a literal brace)",
                    line: c.line
                )
            }
        }
    }

    // MARK: - Checking against the known names

    func testCheck_knownPlaceholders_passAndPlainTextPasses() {
        let known = TaskSettings.placeholders
        XCTAssertNil(Placeholders.check("{task}-{run_id}-{attempt}-{scheduled}", known: known))
        XCTAssertNil(Placeholders.check("/bin/true", known: known))
        XCTAssertNil(Placeholders.check("{{nmae}}", known: known))
    }

    func testCheck_unknownPlaceholder_namesItAndListsTheKnownOnes() {
        XCTAssertEqual(
            Placeholders.check("--name={nmae}", known: TaskSettings.placeholders),
            Placeholders.Problem(message: #"unknown placeholder "{nmae}" in "--name={nmae}" (known: {task}, {run_id}, {attempt}, {scheduled})"#)
        )
    }

    func testCheck_reportsTheFirstUnknownPlaceholderOnly() {
        XCTAssertEqual(
            Placeholders.check("{task}{foo}{bar}", known: ["task"])?.message,
            #"unknown placeholder "{foo}" in "{task}{foo}{bar}" (known: {task})"#
        )
    }

    func testCheck_syntaxProblem_isReportedBeforeUnknownNames() {
        XCTAssertEqual(
            Placeholders.check("{nmae}}", known: ["task"])?.message,
            #"unmatched "}" in "{nmae}}" (write "}}" for a literal brace)"#
        )
    }

    // MARK: - Expansion

    func testExpand_substitutesEachPlaceholderAndUnescapesBraces() {
        let values: [String: [UInt8]] = ["task": Array("backup".utf8), "attempt": Array("2".utf8)]
        XCTAssertEqual(
            Placeholders.expand("{{{task}}}/{attempt}{task}", values: values),
            Array("{backup}/2backup".utf8)
        )
    }

    func testExpand_hostileValues_areInsertedByteExactIntoTheOneElement() {
        let hostile: [(name: String, bytes: [UInt8], line: UInt)] = [
            ("spaces", Array("my file name.txt".utf8), #line),
            ("quotes", Array(#"it's "quoted" \ here"#.utf8), #line),
            ("command substitution", Array("$(reboot)`reboot`;reboot&&reboot|reboot".utf8), #line),
            ("newlines", Array("line one\nline two\r\n".utf8), #line),
            ("leading dashes", Array("-rf *".utf8), #line),
            ("long option", Array("--delete".utf8), #line),
            ("invalid UTF-8", [0x66, 0xFF, 0xFE, 0x80, 0xC3], #line),
            ("braces", Array("{task}}{{".utf8), #line),
            ("glob", Array("*.?[a-z]".utf8), #line),
            ("tab and DEL", [0x09, 0x7F, 0x41], #line),
            ("empty", [], #line),
        ]
        for value in hostile {
            let expanded = Placeholders.expand("--file={task}.log", values: ["task": value.bytes])
            XCTAssertEqual(expanded, Array("--file=".utf8) + value.bytes + Array(".log".utf8), value.name, line: value.line)
            // A whole-element placeholder is the value itself: nothing added, nothing split.
            XCTAssertEqual(Placeholders.expand("{task}", values: ["task": value.bytes]), value.bytes, value.name, line: value.line)
        }
    }

    func testExpand_valueContainingAPlaceholder_isNotExpandedAgain() {
        let values: [String: [UInt8]] = ["task": Array("{run_id}".utf8), "run_id": Array("42".utf8)]
        XCTAssertEqual(Placeholders.expand("{task}", values: values), Array("{run_id}".utf8))
    }

    func testExpand_templateWithoutPlaceholders_isItsBytes() {
        XCTAssertEqual(Placeholders.expand("/usr/bin/rsync", values: [:]), Array("/usr/bin/rsync".utf8))
        XCTAssertEqual(Placeholders.expand("", values: ["task": [0x41]]), [])
    }
}
